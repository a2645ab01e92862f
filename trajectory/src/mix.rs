//! SplitMix64's finaliser: the fixed, documented mixing function behind every stable choice made
//! from a seed (per-episode seeds in `rollout::seed`, which steps a cross-check samples in
//! [`crate::cross_check`]). Not `std`'s `DefaultHasher`, whose output may change between Rust
//! releases: the same seed must choose the same on every machine and every release.

/// One SplitMix64 step of `z`.
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
