//! The proptest configuration every fuzz target shares (docs/fuzzing.md): the case count from
//! `CODEGYM_FUZZ_CASES` (else the target's default, sized for CI), and the failures found kept in
//! the target's regressions file, run first next time (commit them with the fix).

use proptest::test_runner::{Config, FileFailurePersistence};

/// `default` cases unless `CODEGYM_FUZZ_CASES` says otherwise; failures saved to `regressions`
/// (relative to the crate's manifest directory).
pub fn config(default: u32, regressions: &'static str) -> Config {
    let cases = std::env::var("CODEGYM_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        ..Config::default()
    }
}
