//! Support for the tests of `codegym rollout` (`rollout_cli.rs`, `env_pool.rs`, `metrics.rs`,
//! `tracing.rs`, `report.rs`): the fake model's script over the bundled tasks, the rollout's
//! arguments, and reading datasets. Running the binary is `codegym_bin.rs`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;

use env_coding::tasks::TaskSet;
use fake_llm::{FakeScript, Reply, Rule};
use rollout::dataset::record::TrajectoryRecord;

/// The first `n` bundled task ids; even positions get their reference solution from the script.
pub fn task_ids(n: usize) -> Vec<String> {
    TaskSet::builtin_examples()
        .iter()
        .filter(|t| t.reference_solution.is_some())
        .take(n)
        .map(|t| t.id.clone())
        .collect()
}

/// Correct answers for even-positioned bundled tasks, a wrong program for the others.
pub fn script(latency_ms: u64) -> FakeScript {
    let rules = TaskSet::builtin_examples()
        .iter()
        .filter(|t| t.reference_solution.is_some())
        .enumerate()
        .map(|(i, t)| {
            let program = match (&t.reference_solution, i % 2) {
                (Some(s), 0) => s.clone(),
                _ => "print('wrong answer')\n".to_string(),
            };
            Rule {
                prompt_contains: Some(t.prompt.clone()),
                turn: None,
                reply: Reply::code(&program),
            }
        })
        .collect();
    FakeScript {
        rules,
        latency_ms,
        ..FakeScript::default()
    }
}

/// The `codegym rollout` arguments common to every test.
pub fn rollout_args(base_url: &str, tasks: &[String], samples: u32, out: &Path) -> Vec<String> {
    [
        "rollout",
        "--model",
        "test-org/test-model:fastest",
        "--base-url",
        base_url,
        "--api-key-env",
        "CODEGYM_TEST_UNSET_KEY",
        "--task-ids",
        &tasks.join(","),
        "--samples",
        &samples.to_string(),
        "--max-turns",
        "2",
        "--seed",
        "11",
        "--progress",
        "log",
        "--out",
        &out.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Every line of a dataset parsed (a torn line would fail the test).
pub fn records(path: &Path) -> Vec<TrajectoryRecord> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is a whole record"))
        .collect()
}

/// How many lines a dataset has so far (0 before it exists): progress of a run still going.
pub fn records_so_far(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// How many records each episode id has.
pub fn per_episode(records: &[TrajectoryRecord]) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for r in records {
        *m.entry(r.episode_id.clone()).or_default() += 1;
    }
    m
}
