//! `codegym tasks prune` on a store filled by `codegym tasks check` (two processes, as a user
//! runs them): `--keep` removes every prepared state but the named files' tasks', `--all` the
//! rest. As root (repository tasks need the sandbox's workspaces).

use std::path::Path;
use std::process::{Command, Output};

fn codegym(args: &[&str]) -> Output {
    // The binary under test is a process by nature; this is not sandboxed user code.
    #[allow(clippy::disallowed_methods)]
    let out = Command::new(env!("CARGO_BIN_EXE_codegym"))
        .args(args)
        .output();
    out.expect("run codegym")
}

fn ok(args: &[&str]) -> String {
    let out = codegym(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "codegym {args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn entries(store: &Path) -> usize {
    std::fs::read_dir(store.join("states")).map_or(0, |d| d.count())
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir").flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().expect("type").is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

#[test]
fn prune_keeps_the_named_sets_states_and_all_removes_the_rest() {
    let tmp = tempfile::Builder::new()
        .prefix("codegym-prune-cli")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let store = tmp.path().join("store");
    let config = tmp.path().join("config.json");
    let body = serde_json::json!({"coding": {
        "prepared": {"dir": store},
        "packages": {"enabled": true, "cache_dir": "/tmp/codegym-test-repository-packages"},
    }});
    std::fs::write(&config, body.to_string()).expect("config");
    let config = config.to_str().expect("utf-8");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("env-coding/tasks");
    let hand_made = root.join("repository/tasks.jsonl");
    // One task of the synthesized set: a second state, of another set.
    let six = tmp.path().join("six");
    copy_tree(&root.join("synthesized/six"), &six);
    let text = std::fs::read_to_string(six.join("tasks.jsonl")).expect("six");
    let first = text.lines().find(|l| l.starts_with('{')).expect("a task");
    std::fs::write(six.join("tasks.jsonl"), format!("{first}\n")).expect("write");
    let six_tasks = six.join("tasks.jsonl");
    let (hand_made, six_tasks) = (
        hand_made.to_str().expect("utf-8"),
        six_tasks.to_str().expect("utf-8"),
    );

    for set in [hand_made, six_tasks] {
        ok(&["tasks", "check", "--config", config, set]);
    }
    // The hand-made set's three tasks share one state (their hidden tests differ, which is not
    // an input of the prepared state).
    assert_eq!(entries(&store), 2);
    let out = ok(&["tasks", "prune", "--config", config, "--keep", hand_made]);
    assert!(out.contains("1 prepared states removed"), "{out}");
    assert_eq!(entries(&store), 1);
    // The kept state is the hand-made set's: checking it again stores nothing new.
    ok(&["tasks", "check", "--config", config, hand_made]);
    assert_eq!(entries(&store), 1);
    let out = ok(&["tasks", "prune", "--config", config, "--all"]);
    assert!(out.contains("1 prepared states removed"), "{out}");
    assert_eq!(entries(&store), 0);
    let refused = codegym(&["tasks", "prune", "--config", config]);
    assert!(!refused.status.success(), "prune without --keep or --all");
}
