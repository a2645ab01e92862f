//! `codegym run --solution` (issue 13): a solution from a Python file or a rollout episode, run on a
//! data task's files with new `--name value` inputs, prints its typed outputs.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

const TASK: &str = r#"{"schema_version": 1, "id": "sales", "prompt": "Summarise sales.csv for --region.", "files": {"sales.csv": {"path": "data/sales.csv"}}, "inputs": {"region": "west"}, "outputs": {"total_revenue": "float", "rows": "int"}, "reward": {"version": 1, "components": [{"type": "output", "name": "rows", "expected": 2}]}}"#;

const SOLUTION: &str = r#"import argparse, csv, os
p = argparse.ArgumentParser(); p.add_argument("--region"); a = p.parse_args()
rows = [r for r in csv.DictReader(open("sales.csv")) if r["region"] == a.region]
out = os.environ["CODEGYM_OUTPUTS"]
open(f"{out}/total_revenue", "w").write(str(sum(int(r["units"]) * float(r["price"]) for r in rows)))
open(f"{out}/rows", "w").write(str(len(rows)))
"#;

fn setup(dir: &Path) {
    std::fs::create_dir_all(dir.join("data")).expect("data dir");
    std::fs::write(
        dir.join("data/sales.csv"),
        "date,region,product,units,price\n2024-01-01,west,widget,3,9.50\n\
         2024-01-01,east,gadget,2,20.00\n2024-01-02,west,gadget,1,20.00\n",
    )
    .expect("csv");
    std::fs::write(dir.join("tasks.jsonl"), format!("{TASK}\n")).expect("task");
    std::fs::write(dir.join("solution.py"), SOLUTION).expect("solution");
    // A rollout dataset of two episodes: the solved one's last program is the solution.
    let first = json!({"kind": "code_block", "code": "print('first try')"});
    let lines = [
        episode(0, true, &[first.clone(), code_block(SOLUTION)], json!({})),
        episode(
            1,
            false,
            &[first, code_block("raise SystemExit(1)")],
            json!({}),
        ),
    ];
    std::fs::write(dir.join("out.jsonl"), lines.concat()).expect("dataset");
}

fn code_block(code: &str) -> Value {
    json!({"kind": "code_block", "code": code})
}

/// A trajectory record line (with its newline) of episode `sales#sample`: one turn per action,
/// `extra` merged into the record.
fn episode(sample: u32, solved: bool, actions: &[Value], extra: Value) -> String {
    let step = |action: &Value| {
        json!({"action": action, "reward": 0.0, "terminated": false, "truncated": false,
               "duration_ms": 1})
    };
    let turns: Vec<Value> = actions
        .iter()
        .enumerate()
        .map(|(i, a)| json!({"index": i, "model_call": {"latency_ms": 1, "attempts": 1}, "env_steps": [step(a)]}))
        .collect();
    let mut record = json!({
        "schema_version": 2, "run_id": "r", "episode_id": format!("sales#{sample}"),
        "task_id": "sales", "group_id": "r/sales", "sample_index": sample, "seed": 1,
        "env_id": "codegym/Python-v0", "mode": "code_block",
        "model": {"requested": "m", "endpoint": "http://127.0.0.1:1"}, "sampling": {},
        "messages": [], "turns": turns, "total_reward": 0.0, "final_reward": 0.0,
        "solved": solved, "stop_reason": if solved { "solved" } else { "max_turns" },
        "usage": {}, "timings": {"started_at_ms": 0, "wall_ms": 1, "model_ms": 0, "env_ms": 0},
        "engine": {"name": "codegym-rollout", "version": "0.1.0"}
    });
    if let (Some(r), Value::Object(extra)) = (record.as_object_mut(), extra) {
        r.extend(extra);
    }
    format!("{record}\n")
}

fn run(dir: &Path, args: &[&str]) -> Output {
    #[allow(clippy::disallowed_methods)] // the test runs the binary under test
    Command::new(env!("CARGO_BIN_EXE_codegym"))
        .current_dir(dir)
        .args(["run", "--task", "tasks.jsonl"])
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("codegym run")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn runs_a_file_or_an_episode_on_new_inputs() {
    let dir = tempfile::tempdir().expect("tempdir");
    setup(dir.path());
    let o = run(dir.path(), &["--solution", "solution.py"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), "rows = 2\ntotal_revenue = 48.5\n");

    let o = run(
        dir.path(),
        &["--solution", "solution.py", "--", "--region", "east"],
    );
    assert_eq!(stdout(&o), "rows = 1\ntotal_revenue = 40.0\n");

    // The last solved episode of a dataset, or one chosen by id.
    let o = run(
        dir.path(),
        &["--solution", "out.jsonl", "--", "--region", "east"],
    );
    assert_eq!(stdout(&o), "rows = 1\ntotal_revenue = 40.0\n", "{o:?}");
    let o = run(dir.path(), &["--solution", "out.jsonl#sales#1"]);
    assert!(!o.status.success());
    assert!(stdout(&o).contains("rows: error: missing"), "{o:?}");

    // The whole result as JSON.
    let o = run(dir.path(), &["--solution", "solution.py", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["outputs"]["rows"], serde_json::json!({"value": 2}));

    // Bad inputs and unknown episodes are clear errors.
    let o = run(
        dir.path(),
        &["--solution", "solution.py", "--", "region", "x"],
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--NAME VALUE"),
        "{o:?}"
    );
    let o = run(dir.path(), &["--solution", "out.jsonl#nope"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no episode"),
        "{o:?}"
    );
}

/// An AutoCoder episode (issue 13): its final program runs with the requirements it was scored with
/// (`autocoder.requirements`), resolved by the package cache (PyPI).
#[test]
fn an_autocoder_episode_runs_with_its_requirements() {
    let dir = tempfile::tempdir().expect("tempdir");
    setup(dir.path());
    let program = format!("import tabulate\n{SOLUTION}");
    let autocoder = json!({"autocoder": {"code": program, "requirements": ["tabulate==0.9.0"],
                                         "tests": "", "test_runs": 1}, "mode": "autocoder"});
    let tests = json!({"kind": "model_tests", "solution": "x", "tests": "", "requirements": []});
    let line = episode(
        0,
        true,
        &[tests, json!({"kind": "run_python", "code": program})],
        autocoder,
    );
    std::fs::write(dir.path().join("ac.jsonl"), line).expect("dataset");
    let cache = dir.path().join("cache");
    let o = run(
        dir.path(),
        &[
            "--solution",
            "ac.jsonl",
            "--package-cache",
            cache.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), "rows = 2\ntotal_revenue = 48.5\n");
}

/// The dataset is read by the one reader: a torn last line (a run killed mid-write) is ignored, a
/// corrupt line before it is an error naming the file and line.
#[test]
fn a_dataset_with_a_torn_last_line_runs_and_a_corrupt_line_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    setup(dir.path());
    let solved = episode(0, true, &[code_block(SOLUTION)], json!({}));
    let torn = &episode(1, true, &[code_block("raise SystemExit(1)")], json!({}))[..60];
    std::fs::write(dir.path().join("torn.jsonl"), format!("{solved}{torn}")).expect("dataset");
    let o = run(dir.path(), &["--solution", "torn.jsonl"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), "rows = 2\ntotal_revenue = 48.5\n");

    std::fs::write(
        dir.path().join("bad.jsonl"),
        format!("{solved}{{oops\n{solved}"),
    )
    .expect("dataset");
    let o = run(dir.path(), &["--solution", "bad.jsonl#sales#0"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.jsonl:2: not a trajectory record"),
        "{err}"
    );
}
