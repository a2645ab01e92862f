//! `codegym run --solution` (issue 13): a solution from a Python file or a rollout episode, run on a
//! data task's files with new `--name value` inputs, prints its typed outputs.

use std::path::Path;
use std::process::{Command, Output};

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
    let record = |id: &str, solved: bool, code: &str| {
        serde_json::json!({"episode_id": id, "solved": solved, "turns": [
            {"env_steps": [{"action": {"type": "code_block", "code": "print('first try')"}}]},
            {"env_steps": [{"action": {"type": "code_block", "code": code}}]}
        ]})
        .to_string()
    };
    std::fs::write(
        dir.join("out.jsonl"),
        format!(
            "{}\n{}\n",
            record("ep-1", true, SOLUTION),
            record("ep-2", false, "raise SystemExit(1)")
        ),
    )
    .expect("dataset");
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
    let o = run(dir.path(), &["--solution", "out.jsonl#ep-2"]);
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
    let record = serde_json::json!({"episode_id": "sales#0", "solved": true,
        "autocoder": {"code": program, "requirements": ["tabulate==0.9.0"], "tests": "", "test_runs": 1},
        "turns": [{"env_steps": [
            {"action": {"kind": "model_tests", "solution": "x", "tests": "", "requirements": []}},
            {"action": {"kind": "run_python", "code": program}}]}]});
    std::fs::write(dir.path().join("ac.jsonl"), format!("{record}\n")).expect("dataset");
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
