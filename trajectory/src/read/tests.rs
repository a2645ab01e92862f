//! The reader's policy on real files: versions, a torn last line, corrupt lines, latest attempts.

use super::*;

/// A minimal record line (with its newline) of `task#sample`.
fn line(task: &str, sample: u32, version: u64, stop: &str) -> String {
    let v = serde_json::json!({
        "schema_version": version, "run_id": "r", "episode_id": format!("{task}#{sample}"),
        "task_id": task, "group_id": format!("r/{task}"), "sample_index": sample, "seed": 7,
        "env_id": "codegym/Python-v0", "mode": "code_block",
        "model": {"requested": "m", "endpoint": "http://x"}, "sampling": {},
        "messages": [], "turns": [], "total_reward": 1.0, "final_reward": 1.0,
        "solved": stop == "solved", "stop_reason": stop, "usage": {},
        "timings": {"started_at_ms": 0, "wall_ms": 1, "model_ms": 0, "env_ms": 0},
        "engine": {"name": "codegym-rollout", "version": "0.1.0"}
    });
    format!("{v}\n")
}

fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

#[test]
fn the_last_attempt_of_an_episode_wins_in_first_appearance_order() {
    let text = [
        line("a", 0, 2, "error"),
        line("b", 0, 1, "max_turns"),
        "\n".to_string(),
        line("a", 0, 2, "solved"),
    ]
    .concat();
    let (_dir, path) = file(&text);
    let d = read(&path).unwrap();
    assert_eq!(d.lines, 3);
    assert_eq!(d.torn_bytes, 0);
    let ids: Vec<_> = d.records.iter().map(|r| r.episode_id.as_str()).collect();
    assert_eq!(ids, ["a#0", "b#0"]);
    assert!(d.records[0].solved);
}

#[test]
fn a_torn_last_line_is_ignored_and_repair_cuts_it() {
    let whole = line("a", 0, 2, "solved");
    let torn = &line("a", 1, 2, "solved")[..40];
    let (_dir, path) = file(&format!("{whole}{torn}"));
    let d = read(&path).unwrap();
    assert_eq!((d.records.len(), d.torn_bytes), (1, 40));
    // Reading alone leaves the file as it was; repairing cuts the torn bytes.
    assert_eq!(
        std::fs::read_to_string(&path).unwrap().len(),
        whole.len() + 40
    );
    let d = read_and_repair(&path).unwrap();
    assert_eq!(d.records.len(), 1);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), whole);
}

#[test]
fn a_whole_last_record_without_newline_counts_and_gets_one() {
    let a = line("a", 0, 2, "solved");
    let b = line("a", 1, 2, "no_code");
    let (_dir, path) = file(&format!("{a}{}", b.trim_end()));
    assert_eq!(read(&path).unwrap().records.len(), 2);
    read_and_repair(&path).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{a}{b}"));
}

#[test]
fn a_corrupt_line_before_the_last_is_an_error_naming_file_and_line() {
    let text = [
        line("a", 0, 2, "solved"),
        "{not json\n".into(),
        line("b", 0, 2, "solved"),
    ]
    .concat();
    let (_dir, path) = file(&text);
    let err = read(&path).unwrap_err();
    assert!(matches!(err, ReadError::Corrupt { line: 2, .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with(&format!("{}:2:", path.display())),
        "{err}"
    );
    // A complete last line that is not a record is damage too, not a torn write.
    let (_dir, path) = file(&[line("a", 0, 2, "solved"), "{\"x\": 1}\n".into()].concat());
    let err = read(&path).unwrap_err().to_string();
    assert!(
        err.contains(":2: not a trajectory record: no schema_version"),
        "{err}"
    );
}

#[test]
fn a_newer_or_older_schema_version_is_an_error_naming_file_and_line() {
    let newer = u64::from(SCHEMA_VERSION) + 1;
    let (_dir, path) = file(&[line("a", 0, 2, "solved"), line("b", 0, newer, "solved")].concat());
    let err = read(&path).unwrap_err();
    assert!(
        matches!(err, ReadError::UnsupportedVersion { line: 2, version, .. } if version == newer)
    );
    assert!(
        err.to_string().contains("a newer codegym wrote it"),
        "{err}"
    );
    // A newer version that also changed a field's type is still reported as the version.
    let mut v: serde_json::Value = serde_json::from_str(&line("c", 0, newer, "solved")).unwrap();
    v["turns"] = serde_json::json!("retyped");
    let (_dir, path) = file(&format!("{v}\n"));
    assert!(matches!(
        read(&path).unwrap_err(),
        ReadError::UnsupportedVersion { line: 1, .. }
    ));
    let (_dir, path) = file(&line("a", 0, 0, "solved"));
    assert!(matches!(
        read(&path).unwrap_err(),
        ReadError::UnsupportedVersion { version: 0, .. }
    ));
}

#[test]
fn a_missing_file_is_an_io_error_that_says_so() {
    let err = read(Path::new("/nonexistent/run.jsonl")).unwrap_err();
    assert!(err.is_not_found());
    assert!(err.to_string().contains("/nonexistent/run.jsonl"));
}
