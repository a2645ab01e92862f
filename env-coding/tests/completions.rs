//! `codegym evaluate` and `codegym tasks check` logic on real runs: sample scoring with pass@k, and
//! every bundled and fixture reference solution passing its own tests.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use codegym_sandbox::Limits;
use env_coding::completions::{
    EvalError, check_tasks, default_results_path, evaluate_samples, pass_at_ks, read_samples,
    write_results,
};
use env_coding::reward::run::EvalOptions;
use env_coding::tasks::TaskSet;
use env_coding::{CodingConfig, Scorer};

/// The engine every surface scores through, built from the default configuration.
fn scorer() -> &'static Scorer {
    static SCORER: OnceLock<Scorer> = OnceLock::new();
    SCORER.get_or_init(|| match Scorer::new(&CodingConfig::default()) {
        Ok(s) => s,
        Err(e) => panic!("scorer setup failed: {e}"),
    })
}

fn opts() -> EvalOptions {
    EvalOptions {
        limits: Some(Limits {
            cpu_ms: 10_000,
            wall_ms: 120_000,
            ..Limits::default()
        }),
        per_test_timeout_ms: 20_000,
        ..EvalOptions::default()
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tasks/fixtures")
        .join(name)
}

fn load(path: impl AsRef<Path>) -> TaskSet {
    TaskSet::load(path).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn every_reference_solution_passes() {
    for set in [
        load("builtin:examples"),
        load(fixture("humaneval_mini.jsonl")),
        load(fixture("mbpp_mini.jsonl")),
        load(fixture("mbpp_sanitized_mini.json")),
    ] {
        let results = check_tasks(scorer(), &set, opts())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(results.len(), set.len());
        for r in &results {
            assert!(
                r.passed,
                "{}: {} failed: {:?}",
                set.source(),
                r.task_id,
                r.error
            );
        }
    }
}

#[tokio::test]
async fn a_broken_reference_solution_is_reported() {
    let text = r#"{"schema_version": 1, "id": "broken", "prompt": "p", "reference_solution": "print(2)", "reward": {"version": 1, "components": [{"type": "stdout", "expected": "1"}]}}
{"schema_version": 1, "id": "none", "prompt": "p", "reward": {"version": 1, "components": [{"type": "exit_code"}]}}"#;
    let set = TaskSet::parse(text, Path::new("inline.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    let results = check_tasks(scorer(), &set, opts())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !results[0].passed
            && results[0]
                .error
                .as_deref()
                .is_some_and(|e| e.contains("stdout"))
    );
    assert!(!results[1].passed && results[1].error.as_deref() == Some("no reference solution"));
}

#[tokio::test]
async fn scores_samples_with_pass_at_k() {
    let tasks = load(fixture("humaneval_mini.jsonl"));
    let dir = tempfile::tempdir().expect("tempdir");
    let samples_path = dir.path().join("samples.jsonl");
    let good0 = "    return sum(ch in 'aeiouAEIOU' for ch in s)\n";
    let bad0 = "    return len(s)\n";
    let good1 = "    import itertools\n    return list(itertools.accumulate(xs, max))\n";
    let cheat1 = "    import sys\n    sys.exit(0)\n";
    let lines = [
        serde_json::json!({"task_id": "Mini/0", "completion": good0}),
        serde_json::json!({"task_id": "Mini/0", "completion": bad0}),
        serde_json::json!({"task_id": "Mini/1", "completion": good1}),
        serde_json::json!({"task_id": "Mini/1", "completion": cheat1}),
    ];
    let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&samples_path, body).expect("write");

    let samples = read_samples(&samples_path, &tasks).unwrap_or_else(|e| panic!("{e}"));
    let results = evaluate_samples(scorer(), &tasks, samples, opts())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let passed: Vec<bool> = results.iter().map(|r| r.passed).collect();
    assert_eq!(passed, [true, false, true, false], "{results:#?}");
    let m = pass_at_ks(&results, &[1, 2, 10]);
    assert!((m["pass@1"] - 0.5).abs() < 1e-12);
    assert!((m["pass@2"] - 1.0).abs() < 1e-12);
    assert!(!m.contains_key("pass@10"));

    let out = default_results_path(&samples_path);
    write_results(&out, &results).unwrap_or_else(|e| panic!("{e}"));
    let written = std::fs::read_to_string(&out).expect("results");
    let rows: Vec<serde_json::Value> = written
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[1]["task_id"], "Mini/0");
    assert_eq!(rows[1]["passed"], false);
    assert!(rows[1]["reward_breakdown"]["components"][0]["detail"]["tests"].is_array());
}

#[test]
fn bad_samples_name_file_and_line() {
    let tasks = load(fixture("humaneval_mini.jsonl"));
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            "{\"task_id\": \"Mini/0\", \"completion\": \"x\"}\n{oops}\n",
            2,
            "invalid JSON",
        ),
        ("\n{\"task_id\": \"Mini/0\"}\n", 2, "missing completion"),
        (
            "{\"task_id\": \"Nope/1\", \"completion\": \"\"}\n",
            1,
            "unknown task_id",
        ),
    ];
    for (i, (body, line, msg)) in cases.iter().enumerate() {
        let p = dir.path().join(format!("s{i}.jsonl"));
        std::fs::write(&p, body).expect("write");
        let err = read_samples(&p, &tasks).expect_err("bad samples");
        assert!(
            matches!(&err, EvalError::Parse { line: l, .. } if l == line),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("{}:{line}:", p.display())) && text.contains(msg),
            "{text}"
        );
    }
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "\n").expect("write");
    assert!(matches!(
        read_samples(&empty, &tasks),
        Err(EvalError::Empty { .. })
    ));
}
