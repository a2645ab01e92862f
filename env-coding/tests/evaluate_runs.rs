//! What `codegym evaluate` costs in sandboxed runs: one per sample of a unit-test task (the
//! harness), not two (the harness and an observation nobody reads), and the plain run only where
//! the reward reads it. Counted by the sandbox's own `codegym_sandbox_executions_total`, through a
//! recorder installed for this test binary alone (its own process: no other test's runs).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use codegym_sandbox::metrics::EXECUTIONS;
use env_coding::completions::{Sample, evaluate_samples};
use env_coding::tasks::TaskSet;
use env_coding::{CodingConfig, Scorer};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

/// Counts every increment of the sandbox's executions counter, whatever its labels.
struct Executions(Arc<AtomicU64>);

impl Recorder for Executions {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if key.name() == EXECUTIONS {
            Counter::from_arc(self.0.clone())
        } else {
            Counter::noop()
        }
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

const TASKS: &str = r#"{"schema_version": 1, "id": "tests", "prompt": "p", "reward": {"version": 1, "components": [{"type": "asserts", "asserts": ["assert f() == 1"]}]}}
{"schema_version": 1, "id": "stdout", "prompt": "p", "reward": {"version": 1, "components": [{"type": "stdout", "expected": "1"}]}}
{"schema_version": 1, "id": "tests-with-a-penalty", "prompt": "p", "reward": {"version": 1, "components": [{"type": "asserts", "asserts": ["assert f() == 1"]}], "penalties": {"timeout": 0.25}}}"#;

fn sample(task_id: &str, completion: &str, line: usize) -> Sample {
    Sample {
        task_id: task_id.into(),
        completion: completion.into(),
        line,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_test_sample_is_one_sandboxed_run() {
    let runs = Arc::new(AtomicU64::new(0));
    metrics::set_global_recorder(Executions(runs.clone())).expect("the only recorder");
    let scorer = tokio::task::spawn_blocking(|| Scorer::new(&CodingConfig::default()))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("scorer setup failed: {e}"));
    let tasks = TaskSet::parse(TASKS, Path::new("inline.jsonl")).unwrap();
    // Distinct programs: identical ones would share one verdict.
    let samples = vec![
        sample("tests", "def f():\n    return 1\n", 1),
        sample("tests", "def f():\n    return 1  # again\n", 2),
        sample("tests", "def f():\n    return 2\n", 3),
        sample("stdout", "print(1)\n", 4),
        sample("tests-with-a-penalty", "def f():\n    return 1\n", 5),
    ];
    let before = runs.load(Ordering::SeqCst);
    let results = evaluate_samples(&scorer, &tasks, samples, scorer.options())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let passed: Vec<bool> = results.iter().map(|r| r.passed).collect();
    assert_eq!(passed, [true, true, false, true, true]);
    // One harness run per unit-test sample, the stdout task's plain run, and for the task whose
    // penalty reads the plain run, the harness and the plain run.
    assert_eq!(runs.load(Ordering::SeqCst) - before, 3 + 1 + 2);
}
