//! Seeding: every random stream in env-core is a ChaCha8 generator, reproducible from a `u64` seed.

use rand::SeedableRng;
pub use rand_chacha::ChaCha8Rng;

/// The generator for `seed`: the same seed always yields the same stream, on every platform.
pub fn seeded_rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// A generator seeded from the operating system, for `reset(None)` before any seed was given
/// (Gymnasium seeds from entropy in that case too).
pub fn entropy_rng() -> ChaCha8Rng {
    ChaCha8Rng::from_os_rng()
}
