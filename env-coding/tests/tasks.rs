//! Task loaders on the fixture files in `env-coding/tasks/fixtures` (written for this project).

use std::io::Write;
use std::path::{Path, PathBuf};

use env_coding::reward::Component;
use env_coding::tasks::{Task, TaskError, TaskFormat, TaskSet};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tasks/fixtures")
        .join(name)
}

fn load(name: &str) -> TaskSet {
    match TaskSet::load(fixture(name)) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn humaneval_jsonl_and_gz() {
    for name in ["humaneval_mini.jsonl", "humaneval_mini.jsonl.gz"] {
        let set = load(name);
        assert_eq!(set.format(), TaskFormat::HumanEval);
        assert_eq!(
            set.ids().collect::<Vec<_>>(),
            ["Mini/0", "Mini/1", "Mini/2"]
        );
        let t = set.get("Mini/0").expect("task");
        assert!(t.prompt.starts_with("def count_vowels"));
        assert_eq!(t.completion_prefix.as_deref(), Some(t.prompt.as_str()));
        assert!(
            t.reference_solution
                .as_deref()
                .is_some_and(|r| r.contains("return sum("))
        );
        assert!(matches!(&t.reward.components[0],
            Component::CheckFunction { entry_point, .. } if entry_point == "count_vowels"));
        assert_eq!(
            t.program_from_completion("    return 0\n"),
            format!("{}    return 0\n", t.prompt)
        );
    }
}

#[test]
fn mbpp_original_and_sanitized() {
    let set = load("mbpp_mini.jsonl");
    assert_eq!(set.format(), TaskFormat::Mbpp);
    assert_eq!(set.len(), 3);
    let t = set.get("903").expect("numeric task ids become text");
    assert!(
        t.prompt
            .contains("assert count_above({'a': 1, 'b': 5}, THRESHOLD) == 1")
    );
    match &t.reward.components[0] {
        Component::Asserts { asserts, setup, .. } => {
            assert_eq!(asserts.len(), 3);
            assert!(setup.contains("THRESHOLD = 2"));
        }
        other => panic!("{other:?}"),
    }
    let sanitized = load("mbpp_sanitized_mini.json");
    assert_eq!(sanitized.format(), TaskFormat::Mbpp);
    assert_eq!(sanitized.ids().collect::<Vec<_>>(), ["901", "902"]);
}

#[test]
fn native_and_builtin() {
    let on_disk = TaskSet::load(Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks/examples.jsonl"))
        .unwrap_or_else(|e| panic!("{e}"));
    let builtin = TaskSet::load("builtin:examples").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(on_disk.format(), TaskFormat::Native);
    assert_eq!(
        on_disk.ids().collect::<Vec<_>>(),
        builtin.ids().collect::<Vec<_>>()
    );
    let kinds: std::collections::BTreeSet<&str> = builtin
        .iter()
        .flat_map(|t| t.reward.components.iter().map(Component::kind))
        .collect();
    for k in [
        "exit_code",
        "stdout",
        "contains",
        "regex",
        "numeric",
        "io_cases",
        "check_function",
        "asserts",
    ] {
        assert!(kinds.contains(k), "the examples have no {k} task");
    }
}

fn write_temp(name: &str, content: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(name);
    std::fs::write(&path, content).expect("write");
    (dir, path)
}

#[test]
fn malformed_lines_are_reported_with_file_and_line() {
    let good = std::fs::read_to_string(fixture("humaneval_mini.jsonl")).expect("fixture");
    let mut lines: Vec<&str> = good.lines().collect();
    lines.insert(2, "{\"task_id\": \"Mini/x\", \"prompt\": \"p\"");
    let (_d, path) = write_temp("bad.jsonl", lines.join("\n").as_bytes());
    let err = TaskSet::load(&path).expect_err("malformed");
    assert!(matches!(err, TaskError::Parse { line: 3, .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with(&format!("{}:3:", path.display())),
        "{err}"
    );

    // A record missing a field, inside a gzip file.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(format!("{}\n{{\"task_id\": \"M/9\", \"prompt\": \"p\", \"entry_point\": \"f\", \"test\": 5}}\n", lines[0]).as_bytes())
        .expect("gz");
    let (_d2, path) = write_temp("bad.jsonl.gz", &gz.finish().expect("gz"));
    let err = TaskSet::load(&path).expect_err("bad record").to_string();
    assert!(err.contains(":2: invalid HumanEval record"), "{err}");

    let (_d3, path) = write_temp("notjson.jsonl", b"[1, 2");
    assert!(TaskSet::load(&path).is_err());
    let (_d4, path) = write_temp("nul.jsonl", &[0xff, 0xfe, 0x00]);
    assert!(TaskSet::load(&path).is_err());
    let missing = TaskSet::load("/nonexistent/tasks.jsonl").expect_err("missing");
    assert!(matches!(missing, TaskError::Io { .. }));
    assert!(missing.to_string().contains("/nonexistent/tasks.jsonl"));
}

#[test]
fn inline_task_json() {
    let t = Task::from_json(serde_json::json!({"id": "inline", "prompt": "say hi",
        "reward": {"version": 1, "components": [{"type": "stdout", "expected": "hi"}]}}))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.id, "inline");
    assert!(Task::from_json(serde_json::json!({"id": "x"})).is_err());
    assert!(
        Task::from_json(
            serde_json::json!({"schema_version": 9, "id": "x", "prompt": "",
        "reward": {"version": 1, "components": [{"type": "exit_code"}]}})
        )
        .is_err()
    );
}
