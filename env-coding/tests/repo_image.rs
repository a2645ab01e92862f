//! A repository task whose `environment` is an OCI image (task format version 2): podman builds
//! a small image from a rootfs made here (a static busybox and the host's git with its
//! libraries) and saves it as an oci-archive; the task's setup, an episode's commands and
//! scoring then run in that image's filesystem, with no podman process running, and see nothing
//! of the host's. The gold patch resolves the task, the unpatched repository does not; through
//! `codegym/Repo-v0`, an agent's `bash` calls run in the image and its submission is scored there.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use env_coding::repo::REPO_ENV_ID;
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

const CALC: &str = "add() { echo $(( $1 - $2 )); }\nsub() { echo $(( $1 - $2 )); }\n";

const TEST: &str = r#". ./calc.sh
case_of() {
  if [ "$2" = "$3" ]; then echo "<testcase classname=\"calc\" name=\"$1\"/>"
  else echo "<testcase classname=\"calc\" name=\"$1\"><failure message=\"$2\"/></testcase>"; fi
}
{ echo '<testsuite>'; case_of test_add "$(add 2 3)" 5; case_of test_sub "$(sub 5 3)" 2
  echo '</testsuite>'; } > "$CODEGYM_JUNIT"
"#;

const PATCH: &str = "diff --git a/calc.sh b/calc.sh\n--- a/calc.sh\n+++ b/calc.sh\n@@ -1,2 +1,2 @@\n-add() { echo $(( $1 - $2 )); }\n+add() { echo $(( $1 + $2 )); }\n sub() { echo $(( $1 - $2 )); }\n";

/// Whether a podman process of this test (`name`) is running.
fn podman_running(name: &str) -> bool {
    let tag = format!("codegym-repo-image-{name}:{}", std::process::id());
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&tag))
        })
}

/// The task set in `dir`; `name` keeps the podman tags of tests in one process apart.
fn task_set(dir: &Path, name: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("repo")).expect("repo");
    std::fs::write(dir.join("repo/calc.sh"), CALC).expect("calc");
    std::fs::create_dir_all(dir.join("hidden")).expect("hidden");
    std::fs::write(dir.join("hidden/test_calc.sh"), TEST).expect("test");
    std::fs::write(dir.join("fix.diff"), PATCH).expect("patch");
    image_support::rootfs_tar(&dir.join("rootfs.tar"), &[]);
    podman::save(
        &dir.join("rootfs.tar"),
        &dir.join("image.tar"),
        name,
        "oci-archive",
    );
    let line = serde_json::json!({
        "version": 2, "id": "calc/add", "repository": "repo", "environment": "image.tar",
        "setup": ["echo set-up > .setup-done"],
        "problem_statement": "add subtracts", "test_command": "sh test_calc.sh",
        "hidden_tests": "hidden", "fail_to_pass": ["calc::test_add"],
        "pass_to_pass": ["calc::test_sub"], "patch": "fix.diff",
        "limits": {"test_wall_ms": 20000, "setup_wall_ms": 20000}
    });
    let path = dir.join("tasks.jsonl");
    std::fs::write(&path, format!("{line}\n")).expect("tasks");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_with_an_image_environment_is_set_up_run_and_scored_in_it() {
    let dir = tempfile::Builder::new()
        .prefix("codegym-repo-image-")
        .tempdir()
        .expect("tmp");
    let set = RepoTaskSet::load(&task_set(dir.path(), "scorer")).expect("task set");
    assert!(!podman_running("scorer"), "podman is still running");
    let scorer = repo_support::scorer(2_900_000, 0);
    let task = Arc::new(set.tasks[0].clone());
    let prepared = scorer.prepare(task.clone()).await.expect("prepare");

    let ws = scorer.episode(&prepared).expect("episode");
    let seen = scorer
        .run(
            &ws,
            &prepared,
            "cat /etc/os-release; cat .setup-done; ls /; pwd; \
             ls /usr/lib/python3* /work 2>/dev/null || echo no-host-files",
            None,
        )
        .await
        .expect("run");
    assert_eq!(
        seen.stdout,
        "ID=codegym-env-test\nset-up\nbin\ncodegym\ndev\netc\nlib\nlib64\nproc\ntmp\nusr\n\
         /codegym/repo\nno-host-files\n",
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
        .expect("readable diff");
    assert!(diff.contains("+add() { echo $(( $1 + $2 )); }"), "{diff}");

    let fixed = scorer
        .score(&prepared, &diff)
        .await
        .expect("score the episode");
    assert!(fixed.resolved && fixed.reward == 1.0, "{fixed:?}");
    let gold = scorer
        .score(&prepared, &task.patch)
        .await
        .expect("score the gold patch");
    assert!(gold.resolved, "{gold:?}");
    let unpatched = scorer.score(&prepared, "").await.expect("score nothing");
    assert!(
        !unpatched.resolved && unpatched.reward == 0.0,
        "{unpatched:?}"
    );
}

fn kwargs(v: serde_json::Value) -> Kwargs {
    v.as_object().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repo_v0_runs_an_agents_tools_and_scores_it_in_the_image() {
    let dir = tempfile::Builder::new()
        .prefix("codegym-repo-image-")
        .tempdir()
        .expect("tmp");
    let tasks = task_set(dir.path(), "env");
    assert!(!podman_running("env"), "podman is still running");
    let mut reg = Registry::new();
    let config = CodingConfig {
        task_dirs: vec![dir.path().canonicalize().expect("dir")],
        ..repo_support::config(2_900_000, 1)
    };
    register(&mut reg, config).unwrap_or_else(|e| panic!("register: {e}"));
    let args = kwargs(json!({"tasks": tasks.display().to_string()}));
    let mut env = reg.make_async(REPO_ENV_ID, &args).await.expect("make");
    env.reset(None, kwargs(json!({"task_id": "calc/add"})))
        .await
        .expect("reset");
    let call = json!({"tool": "bash", "command": "cat /etc/os-release; sed -i '1s/-/+/' calc.sh"});
    let step = env.step(Value::Json(call)).await.expect("bash");
    let Value::Text(obs) = step.obs else {
        panic!("text observation")
    };
    assert!(obs.contains("ID=codegym-env-test"), "{obs}");
    let done = env
        .step(Value::Json(json!({"tool": "submit"})))
        .await
        .expect("submit");
    assert!(done.terminated && done.reward == 1.0, "{:?}", done.info);
}
