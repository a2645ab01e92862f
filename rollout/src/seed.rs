//! Per-episode seeds from (run seed, task id, sample index) by a stable hash: the same run seed
//! gives the same seeds on every machine and every release, so resumed and repeated runs agree.
//! FNV-1a over the task id and SplitMix64 finalisation ([`trajectory::mix`]); both are fixed,
//! documented functions (not `std`'s `DefaultHasher`, whose output may change between Rust
//! releases).

use trajectory::mix::splitmix64;

/// The seed of sample `sample_index` of `task_id` in a run seeded with `run_seed`.
pub fn episode_seed(run_seed: u64, task_id: &str, sample_index: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in task_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    splitmix64(splitmix64(run_seed) ^ h ^ splitmix64(u64::from(sample_index).wrapping_add(0x9e37)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_stable_and_distinct() {
        // Pinned values: a change here breaks reproducibility of existing datasets.
        assert_eq!(episode_seed(0, "a", 0), 1_589_464_861_287_817_335);
        assert_eq!(episode_seed(7, "hello-world", 3), 8_585_277_342_046_346_937);
        let mut seen = std::collections::HashSet::new();
        for run in 0..4 {
            for task in ["a", "b", "ab", "ba"] {
                for i in 0..16 {
                    assert!(seen.insert(episode_seed(run, task, i)));
                }
            }
        }
    }
}
