//! A verdict's provenance: what produced its reward besides the program. Made once, by the scoring
//! engine ([`Scorer::score`](crate::Scorer::score)), for every verdict of every surface, and kept
//! with a cached verdict (a shared verdict carries the provenance of the run that produced it).
//! The type is the trajectory crate's ([`Provenance`]), so that datasets record it typed and the
//! trainer bridge reads it without this crate.

use std::sync::{Arc, LazyLock};

use sha2::{Digest, Sha256};
use trajectory::record::{Provenance, ProvenanceLimits};

use crate::reward::run::EvalOptions;
use crate::tasks::Task;
use codegym_sandbox::Sandbox;
use codegym_sandbox::lang::Language;

/// The provenance of scoring a `language` program for `task` (whose [`Task::fingerprint`] is
/// `fingerprint`) under `options` in `sandbox`.
pub(crate) async fn provenance(
    sandbox: &Sandbox,
    task: &Task,
    fingerprint: &[u8; 32],
    language: Language,
    options: &EvalOptions,
) -> Provenance {
    let limits = options.limits.unwrap_or(*sandbox.limits());
    let info = sandbox.info();
    let hashes = task_hashes(task, fingerprint);
    Provenance {
        task_hash: hashes.task.clone(),
        reward_spec_hash: hashes.reward_spec.clone(),
        reward_spec_version: task.reward.version,
        limits: provenance_limits(&limits, options.per_test_timeout_ms),
        sandbox_backend: info.backend.to_string(),
        isolation_level: info.isolation_level.to_string(),
        language: language.name().to_string(),
        toolchain: sandbox.toolchain_version(language).await,
        codegym_version: CODEGYM_VERSION.to_string(),
    }
}

/// (`task_hash`, `reward_spec_hash`) of each task scored, kept by its fingerprint, so that each
/// task is serialised and hashed once, not per submission: a task with megabytes of data files
/// cost more to serialise than a run (bench: ~19 ms per submission for a 4.6 MiB file).
static TASK_HASHES: LazyLock<moka::sync::Cache<[u8; 32], Arc<TaskHashes>>> =
    LazyLock::new(|| moka::sync::Cache::new(4096));

struct TaskHashes {
    task: String,
    reward_spec: String,
}

fn task_hashes(task: &Task, fingerprint: &[u8; 32]) -> Arc<TaskHashes> {
    TASK_HASHES.get_with(*fingerprint, || {
        let spec = serde_json::to_value(&task.reward).unwrap_or_default();
        Arc::new(TaskHashes {
            task: hash_json(&task.to_json()),
            reward_spec: hash_json(&spec),
        })
    })
}

/// A verdict's runs' limits as its provenance records them.
pub(crate) fn provenance_limits(
    limits: &codegym_sandbox::Limits,
    per_test_timeout_ms: u64,
) -> ProvenanceLimits {
    ProvenanceLimits {
        cpu_ms: limits.cpu_ms,
        wall_ms: limits.wall_ms,
        memory_bytes: limits.memory_bytes,
        max_processes: limits.max_processes,
        max_file_bytes: limits.max_file_bytes,
        stdout_cap: limits.stdout_cap as u64,
        stderr_cap: limits.stderr_cap as u64,
        per_test_timeout_ms,
    }
}

/// The codegym that scores: the package version and, when built from a git checkout (or told by
/// the packager), its commit as build metadata (`0.1.0+0123456789ab`): scoring code changes
/// between commits under one version.
pub const CODEGYM_VERSION: &str = env!("CODEGYM_VERSION");

/// `sha256:HEX` of `value`'s canonical JSON: serde_json's maps keep their keys sorted (no
/// `preserve_order`), so equal values hash equal whatever order their file had.
pub fn hash_json(value: &serde_json::Value) -> String {
    let digest = Sha256::digest(value.to_string().as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_of_content_not_of_key_order() {
        let a: serde_json::Value = serde_json::from_str(r#"{"b": 1, "a": [1, 2]}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str(r#"{"a": [1, 2], "b": 1}"#).unwrap();
        assert_eq!(hash_json(&a), hash_json(&b));
        assert_ne!(
            hash_json(&a),
            hash_json(&serde_json::json!({"a": [2, 1], "b": 1}))
        );
        assert!(hash_json(&a).starts_with("sha256:") && hash_json(&a).len() == 7 + 64);
    }

    #[test]
    fn a_task_s_hash_is_its_json_s_whenever_it_is_asked() {
        // Kept per task, never across tasks: two tasks one data byte apart, each asked twice.
        let task = |csv: &str| {
            Task::from_json(serde_json::json!({"id": "t", "prompt": "p",
                "files": {"a.txt": {"text": csv}},
                "reward": {"version": 1, "components": [{"type": "exit_code"}]}}))
            .unwrap()
        };
        let (a, b) = (
            task(&"x".repeat(4096)),
            task(&format!("{}y", "x".repeat(4095))),
        );
        let hash = |t: &Task| task_hashes(t, &t.fingerprint()).task.clone();
        for t in [&a, &b, &a, &b] {
            assert_eq!(hash(t), hash_json(&t.to_json()));
        }
        assert_ne!(hash(&a), hash(&b));
    }
}
