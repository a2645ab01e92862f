//! A unit-test suite compiled once, shared by every later run of the same suite in this process.
//!
//! Parsing, rewriting (each test statement's pass and fail marks) and compiling a suite's tests is
//! about a quarter of a HumanEval harness run's tests' process, and the same suite runs for every
//! sample of a task (a GRPO group, an epoch, an audit's attacks). So the harness offers its
//! compiled tests in its record (`compiled`: hex of the bytecode's magic number and `marshal`'s form
//! of plain data and code objects, made from the tests alone before any candidate code ran), the
//! host keeps them here, and hands them to the next run of the same suite, which checks the magic
//! number and the shape and skips the work (or compiles again, and offers anew).
//!
//! The verdict is the same either way: compiling is deterministic for one interpreter, and a copy
//! only ever comes from a record carrying its run's nonce (so from the harness, never from the
//! candidate, whose process has neither the nonce nor the record's descriptor). A process-wide
//! cache, like the differential runner's expected outputs: the key is a SHA-256 of everything the
//! compiled form depends on (the suite, the harness's source), so any two callers asking for it
//! would compute the same bytes. Bounded by their size (LRU-like eviction beyond it).

use std::sync::{Arc, LazyLock};

use moka::sync::Cache;
use sha2::{Digest, Sha256};

/// Longest copy the harness offers (hex characters); a larger suite compiles in every run. The
/// harness's output cap grows by this much, so a record that fit before still fits.
pub const MAX_HEX: usize = 1 << 18;

/// Bytes of compiled suites kept.
const CACHE_BYTES: u64 = 64 << 20;

static CACHE: LazyLock<Cache<[u8; 32], Arc<str>>> = LazyLock::new(|| {
    Cache::builder()
        .weigher(|_, v: &Arc<str>| u32::try_from(v.len()).unwrap_or(u32::MAX))
        .max_capacity(CACHE_BYTES)
        .build()
});

/// The hash of the harness itself, which every key starts from (hashed once: ~20 KB a run).
static HARNESS: LazyLock<Sha256> = LazyLock::new(|| {
    let source = super::harness::HARNESS_SOURCE;
    let mut h = Sha256::new();
    h.update((source.len() as u64).to_le_bytes());
    h.update(source.as_bytes());
    h
});

/// The key of a suite: the harness, and the suite's configuration as the harness reads it
/// (without the per-run fields).
pub fn key(suite_config: &str) -> [u8; 32] {
    let mut h = HARNESS.clone();
    h.update((suite_config.len() as u64).to_le_bytes());
    h.update(suite_config.as_bytes());
    h.finalize().into()
}

/// The compiled suite kept for `key`, if any.
pub fn get(key: &[u8; 32]) -> Option<Arc<str>> {
    CACHE.get(key)
}

/// Keeps a harness's offer for `key` if it looks like one (hex, within [`MAX_HEX`]); what it
/// holds is the harness's to check when it gets it back.
pub fn offer(key: [u8; 32], hex: &str) {
    if !hex.is_empty() && hex.len() <= MAX_HEX && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        CACHE.insert(key, Arc::from(hex));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_hex_within_the_bound() {
        let k = key("{\"style\":\"check\",\"code\":\"compiled test\"}");
        offer(k, "not hex");
        assert_eq!(get(&k), None);
        offer(k, &"a".repeat(MAX_HEX + 2));
        assert_eq!(get(&k), None);
        offer(k, "e30d0d0a00");
        assert_eq!(get(&k).as_deref(), Some("e30d0d0a00"));
        assert_ne!(k, key("{\"style\":\"check\",\"code\":\"another test\"}"));
    }
}
