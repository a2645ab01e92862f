//! Harbor-shaped repository tasks (format version 4): the repository at the image's `/app`
//! (`work_dir`), the hidden tests at `/tests` (`tests_dir`) and the verdict a number the test
//! command writes to `/logs/verifier/reward.txt` (`reward_file`), in a small image podman builds
//! from a busybox + host git rootfs (`support/image.rs`). The reference patch resolves, the empty
//! one does not; a `codegym/Repo-v0` episode that fixes the task gets reward 1; an agent that
//! writes the reward file or the tests dir during its episode gets nothing from it; a missing or
//! bad reward is an infrastructure error from the prepared state and a 0 from a patch; the
//! loader's refusals name the file and line.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use env_coding::repo::{REPO_ENV_ID, RepoError};
use env_coding::tasks::RepoTaskSet;
use env_coding::{CodingConfig, register};
use env_core::{Kwargs, Registry, Value};
use serde_json::json;

#[path = "support/image.rs"]
mod image_support;
#[path = "../../sandbox/tests/support/podman.rs"]
mod podman;
#[path = "support/repo.rs"]
mod repo_support;

const UIDS: u32 = 3_100_000;

const CALC: &str = "add() { echo $(( $1 - $2 )); }\n";

/// Harbor's `tests/test.sh`: the reward, 1 or 0, written where the verifier reads it.
const TEST: &str = ". /app/calc.sh\nmkdir -p /logs/verifier\n\
    if [ \"$(add 2 3)\" = 5 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n";

const PATCH: &str = "diff --git a/calc.sh b/calc.sh\n--- a/calc.sh\n+++ b/calc.sh\n@@ -1 +1 @@\n\
    -add() { echo $(( $1 - $2 )); }\n+add() { echo $(( $1 + $2 )); }\n";

/// The image, once per test (`name` keeps podman's tags apart).
fn image(dir: &Path, name: &str) {
    image_support::rootfs_tar(&dir.join("rootfs.tar"), &[]);
    podman::save(
        &dir.join("rootfs.tar"),
        &dir.join("image.tar"),
        &format!("harbor-{name}"),
        "oci-archive",
    );
}

/// A version 4 task set in `dir` (whose `image.tar` exists) with `test` as the hidden test.
fn task_set(dir: &Path, test: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("repo")).expect("repo");
    std::fs::write(dir.join("repo/calc.sh"), CALC).expect("calc");
    std::fs::create_dir_all(dir.join("tests")).expect("tests");
    std::fs::write(dir.join("tests/test.sh"), test).expect("test");
    std::fs::write(dir.join("fix.diff"), PATCH).expect("patch");
    let line = json!({
        "version": 4, "id": "calc/add", "repository": "repo", "environment": "image.tar",
        "work_dir": "/app", "tests_dir": "/tests", "reward_file": "/logs/verifier/reward.txt",
        "problem_statement": "add subtracts", "test_command": "sh /tests/test.sh",
        "hidden_tests": "tests", "patch": "fix.diff",
        "limits": {"test_wall_ms": 20000, "setup_wall_ms": 20000}
    });
    let path = dir.join("tasks.jsonl");
    std::fs::write(&path, format!("{line}\n")).expect("tasks");
    path
}

fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("codegym-harbor-")
        .tempdir()
        .expect("tmp")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reward_file_task_runs_at_its_work_dir_and_is_scored_by_its_reward() {
    let dir = tmp();
    image(dir.path(), "score");
    let set = RepoTaskSet::load(&task_set(dir.path(), TEST)).expect("task set");
    let scorer = repo_support::scorer(UIDS, 0);
    let task = Arc::new(set.tasks[0].clone());
    let prepared = scorer.prepare(task.clone()).await.expect("prepare");
    let ws = scorer.episode(&prepared).expect("episode");
    let seen = scorer
        .run(
            &ws,
            &prepared,
            "pwd; ls; ls -A /tests /logs/verifier; touch /tests/x /logs/verifier/y && echo writable",
            None,
        )
        .await
        .expect("run");
    assert_eq!(
        seen.stdout, "/app\ncalc.sh\n/logs/verifier:\n\n/tests:\nwritable\n",
        "{seen:?}"
    );
    let edit = scorer
        .run(&ws, &prepared, "sed -i '1s/-/+/' calc.sh", None)
        .await
        .expect("edit");
    assert_eq!(edit.exit_code, Some(0), "{edit:?}");
    let diff = scorer
        .diff(&ws, &prepared)
        .await
        .expect("diff")
        .expect("diff");
    assert!(diff.contains("+add() { echo $(( $1 + $2 )); }"), "{diff}");
    let fixed = scorer.score(&prepared, &diff).await.expect("score");
    assert!(fixed.resolved && fixed.reward == 1.0, "{fixed:?}");
    let gold = scorer.score(&prepared, &task.patch).await.expect("gold");
    assert!(gold.resolved, "{gold:?}");
    let empty = scorer.score(&prepared, "").await.expect("empty");
    assert!(!empty.resolved && empty.reward == 0.0, "{empty:?}");
    assert_eq!(
        empty.reason.as_deref(),
        Some("the reward file holds 0"),
        "{empty:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_cannot_plant_a_reward_or_tests_during_its_episode() {
    let dir = tmp();
    image(dir.path(), "plant");
    let set = RepoTaskSet::load(&task_set(dir.path(), TEST)).expect("task set");
    let scorer = repo_support::scorer(UIDS, 1);
    let prepared = scorer
        .prepare(Arc::new(set.tasks[0].clone()))
        .await
        .expect("prepare");
    let ws = scorer.episode(&prepared).expect("episode");
    // The reward and a test script that only writes one, planted; the repository untouched but
    // for a note, so the answer is a patch of the agent's own.
    let plant = "echo 1 > /logs/verifier/reward.txt; printf 'echo 1 > /logs/verifier/reward.txt\\n' \
        > /tests/test.sh; echo note > notes.txt; cat /logs/verifier/reward.txt";
    let planted = scorer
        .run(&ws, &prepared, plant, None)
        .await
        .expect("plant");
    assert_eq!(planted.stdout, "1\n", "{planted:?}");
    let later = scorer
        .run(&ws, &prepared, "ls -A /logs/verifier /tests", None)
        .await
        .expect("later");
    assert_eq!(later.stdout, "/logs/verifier:\n\n/tests:\n", "{later:?}");
    let diff = scorer
        .diff(&ws, &prepared)
        .await
        .expect("diff")
        .expect("diff");
    assert!(
        diff.contains("notes.txt") && !diff.contains("reward"),
        "{diff}"
    );
    let verdict = scorer.score(&prepared, &diff).await.expect("score");
    assert!(!verdict.resolved && verdict.reward == 0.0, "{verdict:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_bad_reward_is_the_tasks_error_or_the_patchs_zero() {
    let dir = tmp();
    image(dir.path(), "missing");
    // The reward is written only when calc.sh prints something, and then a bad one.
    let test = ". /app/calc.sh\n[ -n \"$(add 2 3)\" ] && echo 7 > /logs/verifier/reward.txt\n";
    let set = RepoTaskSet::load(&task_set(dir.path(), test)).expect("task set");
    let scorer = repo_support::scorer(UIDS, 2);
    let prepared = scorer
        .prepare(Arc::new(set.tasks[0].clone()))
        .await
        .expect("prepare");
    let err = scorer.score(&prepared, "").await.expect_err("bad reward");
    assert!(
        matches!(&err, RepoError::Reward { file, .. } if file == "/logs/verifier/reward.txt")
            && err.to_string().contains("the reward 7 is not in [0, 1]"),
        "{err}"
    );
    // A patch that makes calc.sh print nothing leaves no reward: its own failure.
    let silent = "diff --git a/calc.sh b/calc.sh\n--- a/calc.sh\n+++ b/calc.sh\n@@ -1 +1 @@\n\
        -add() { echo $(( $1 - $2 )); }\n+add() { :; }\n";
    let verdict = scorer.score(&prepared, silent).await.expect("score");
    assert!(!verdict.resolved && verdict.reward == 0.0, "{verdict:?}");
    let reason = verdict.reason.unwrap_or_default();
    assert!(
        reason.starts_with("the test command left no reward in /logs/verifier/reward.txt"),
        "{reason}"
    );
}

fn kwargs(v: serde_json::Value) -> Kwargs {
    v.as_object().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repo_v0_episode_that_fixes_the_task_gets_reward_one() {
    let dir = tmp();
    image(dir.path(), "env");
    let tasks = task_set(dir.path(), TEST);
    let mut reg = Registry::new();
    let config = CodingConfig {
        task_dirs: vec![dir.path().canonicalize().expect("dir")],
        ..repo_support::config(UIDS, 3)
    };
    register(&mut reg, config).unwrap_or_else(|e| panic!("register: {e}"));
    let args = kwargs(json!({"tasks": tasks.display().to_string()}));
    let mut env = reg.make_async(REPO_ENV_ID, &args).await.expect("make");
    env.reset(None, kwargs(json!({"task_id": "calc/add"})))
        .await
        .expect("reset");
    let call = json!({"tool": "bash", "command": "pwd; sed -i '1s/-/+/' /app/calc.sh"});
    let step = env.step(Value::Json(call)).await.expect("bash");
    let Value::Text(obs) = step.obs else {
        panic!("text observation")
    };
    assert!(obs.starts_with("/app\n"), "{obs}");
    let done = env
        .step(Value::Json(json!({"tool": "submit"})))
        .await
        .expect("submit");
    assert!(done.terminated && done.reward == 1.0, "{:?}", done.info);
}

#[test]
fn the_loader_refuses_harbor_fields_where_they_cannot_hold() {
    let dir = tmp();
    std::fs::write(dir.path().join("image.tar"), b"").expect("image");
    let base = task_set(dir.path(), TEST);
    let line: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&base).expect("read").trim()).expect("json");
    let cases: [(&str, serde_json::Value, &str); 6] = [
        (
            "no environment",
            json!({"environment": null}),
            "`work_dir` needs an `environment`",
        ),
        (
            "version 3",
            json!({"version": 3}),
            "`work_dir` needs `\"version\": 4`",
        ),
        (
            "relative",
            json!({"work_dir": "app"}),
            "`work_dir`: \"app\" must be an absolute path",
        ),
        (
            "sandbox's own",
            json!({"tests_dir": "/tmp/tests"}),
            "`tests_dir`: \"/tmp/tests\" must be",
        ),
        (
            "overlap",
            json!({"tests_dir": "/app/tests"}),
            "`tests_dir`: \"/app/tests\" overlaps `work_dir`",
        ),
        (
            "tests and a reward",
            json!({"fail_to_pass": ["calc::test_add"]}),
            "`fail_to_pass` and `pass_to_pass` with a `reward_file`",
        ),
    ];
    for (what, change, expected) in cases {
        let mut line = line.clone();
        for (k, v) in change.as_object().expect("object") {
            match v {
                serde_json::Value::Null => line.as_object_mut().expect("o").remove(k),
                v => line
                    .as_object_mut()
                    .expect("o")
                    .insert(k.clone(), v.clone()),
            };
        }
        let path = dir.path().join("bad.jsonl");
        std::fs::write(&path, format!("// a comment\n{line}\n")).expect("write");
        let err = RepoTaskSet::load(&path).expect_err(what).to_string();
        assert!(
            err.contains("bad.jsonl:2:") && err.contains(expected),
            "{what}: {err}"
        );
    }
}
