//! Shared by the repository-task tests (`repository.rs`, `repo_hack.rs`, `repo_env.rs`): the
//! shipped set, and the coding config they run with (the fresh backend, a uid range of the
//! binary's own, pytest from a package cache and prepared states from a store, both shared
//! across binaries and runs).

// Each test binary compiles this module and uses a subset of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use codegym_sandbox::packages::PackagesConfig;
use codegym_sandbox::{Backend, PreparedConfig, SandboxConfig};
use env_coding::repo::RepoScorer;
use env_coding::{CodingConfig, Scorer};

/// The shipped repository set's task file.
pub fn shipped() -> PathBuf {
    dir().join("tasks.jsonl")
}

/// The shipped repository set's directory.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks/repository")
}

/// The config of scorer `n` of a binary whose uids start at `base`.
pub fn config(base: u32, n: u32) -> CodingConfig {
    CodingConfig {
        sandbox: SandboxConfig {
            backend: Backend::Fresh,
            uid_base: base + (std::process::id() % 1000) * 200 + n * 32,
            uid_count: 32,
            ..SandboxConfig::default()
        },
        packages: PackagesConfig {
            enabled: true,
            cache_dir: PathBuf::from("/tmp/codegym-test-repository-packages"),
            ..PackagesConfig::default()
        },
        // Shared across binaries and runs, as a machine's store is across processes: a later
        // run's tasks use the states an earlier one stored.
        prepared: PreparedConfig {
            dir: PathBuf::from("/tmp/codegym-test-repository-prepared"),
            ..PreparedConfig::default()
        },
        ..CodingConfig::default()
    }
}

/// Scorer `n` of a binary whose uids start at `base`.
pub fn scorer(base: u32, n: u32) -> RepoScorer {
    let scorer = Scorer::new(&config(base, n)).unwrap_or_else(|e| panic!("scorer: {e}"));
    RepoScorer::of(&scorer)
}
