//! A repository task's disk quota (`limits.disk_mib`) through the scorer: the setup, an
//! episode's copy and the scoring copy each get it; an agent that writes past it sees `ENOSPC`
//! in its command and goes on after deleting; a setup that hits it is an error, never a verdict;
//! a task asking more than the sandbox allows is refused.

use std::path::Path;
use std::sync::Arc;

use env_coding::repo::{RepoError, RepoScorer};
use env_coding::tasks::RepoTaskSet;

#[path = "support/repo.rs"]
mod repo_support;

const QUOTA_MIB: u64 = 40;

fn scorer() -> RepoScorer {
    repo_support::scorer(2_750_000, 0)
}

/// A task whose test passes when its copy's file system (the repository's `df`) is at most the
/// quota; `setup` is the shell commands of the task's setup.
fn task_set(dir: &Path, setup: &str, disk_mib: u64) -> RepoTaskSet {
    std::fs::create_dir_all(dir.join("repo")).expect("repo");
    std::fs::write(dir.join("repo/a.txt"), "a\n").expect("a");
    std::fs::create_dir_all(dir.join("hidden")).expect("hidden");
    std::fs::write(dir.join("hidden/h.txt"), "h\n").expect("h");
    std::fs::write(dir.join("fix.diff"), "").expect("patch");
    let test = format!(
        "kib=$(df -k . | awk 'NR==2 {{print $2}}'); echo \"copy of $kib KiB\" >&2; \
         if [ \"$kib\" -le {} ]; then r='<testcase classname=\"q\" name=\"quota\"/>'; s=0; \
         else r='<testcase classname=\"q\" name=\"quota\"><failure message=\"x\"/></testcase>'; s=1; fi; \
         echo \"<testsuite>$r</testsuite>\" > \"$CODEGYM_JUNIT\"; exit $s",
        disk_mib * 1024
    );
    let line = serde_json::json!({
        "version": 1, "id": "quota", "repository": "repo", "setup": [setup],
        "problem_statement": "p", "test_command": test, "hidden_tests": "hidden",
        "fail_to_pass": ["q::quota"], "patch": "fix.diff",
        "limits": {"disk_mib": disk_mib, "setup_wall_ms": 30000, "test_wall_ms": 30000},
    });
    let path = dir.join("tasks.jsonl");
    std::fs::write(&path, format!("{line}\n")).expect("tasks");
    RepoTaskSet::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_copy_of_a_task_has_its_quota() {
    let dir = tempfile::tempdir().expect("tmp");
    let repo = scorer();
    let set = task_set(
        dir.path(),
        "head -c 8388608 /dev/zero > built.bin",
        QUOTA_MIB,
    );
    let prepared = repo
        .prepare(Arc::new(set.tasks[0].clone()))
        .await
        .expect("prepare");
    let ws = repo.episode(&prepared).expect("episode");
    // Far past the quota: the command fails with ENOSPC, an outcome.
    let fill = repo
        .run(
            &ws,
            &prepared,
            "for i in $(seq 1 8); do head -c 16777216 /dev/zero > big$i || exit 3; done",
            None,
        )
        .await
        .expect("an outcome, not an error");
    assert_eq!(fill.exit_code, Some(3), "{fill:?}");
    assert!(
        fill.stderr.contains("No space left on device"),
        "{}",
        fill.stderr
    );
    // The episode goes on: deleting frees the space.
    let again = repo
        .run(
            &ws,
            &prepared,
            "rm big*; head -c 16777216 /dev/zero > again && echo WROTE",
            None,
        )
        .await
        .expect("run");
    assert_eq!(again.stdout.trim(), "WROTE", "{}", again.stderr);
    // The scoring copy has the task's quota (its test checks its own file system's size).
    let verdict = repo.score(&prepared, "").await.expect("score");
    assert!(verdict.resolved, "{verdict:?}");
    drop(ws);

    // A setup that hits the quota is an error, never a verdict.
    let dir = tempfile::tempdir().expect("tmp");
    let set = task_set(
        dir.path(),
        "for i in 1 2 3 4; do head -c 16777216 /dev/zero > big$i; done",
        QUOTA_MIB,
    );
    let err = repo
        .prepare(Arc::new(set.tasks[0].clone()))
        .await
        .expect_err("a setup past its quota");
    assert!(matches!(err, RepoError::Setup { .. }), "{err}");
    assert!(err.to_string().contains("No space left on device"), "{err}");

    // A task may not ask for more than the sandbox's maximum.
    let dir = tempfile::tempdir().expect("tmp");
    let set = task_set(dir.path(), "true", 1 << 20);
    let err = repo
        .prepare(Arc::new(set.tasks[0].clone()))
        .await
        .expect_err("a quota above the maximum");
    assert!(err.to_string().contains("workspace_disk_max_mib"), "{err}");
}
