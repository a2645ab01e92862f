//! A policy against repository rewards: the patched code runs inside pytest's process, so it can
//! destroy or forge the report or change how the tests run. Each test scores a real attack derived
//! from a shipped task (`repo::attacks`) through the real sandbox and pytest: a report the patch
//! destroys is a verdict of 0 (not an infrastructure error), a report that disagrees with pytest's
//! exit status is a verdict of 0, and the patch's changes to what configures the test run
//! (`conftest.py`, the task's test files, ...) are dropped before the tests run.

use std::sync::Arc;

use env_coding::repo::junit::TestStatus;
use env_coding::repo::{Prepared, RepoScorer, RepoVerdict, attacks, audit_repo_tasks, protected};
use env_coding::tasks::RepoTaskSet;

#[path = "support/repo.rs"]
mod repo_support;

use repo_support::shipped;

fn scorer(n: u32) -> RepoScorer {
    repo_support::scorer(2_800_000, n)
}

async fn prepared(repo: &RepoScorer) -> Arc<Prepared> {
    let set = RepoTaskSet::load(&shipped()).unwrap_or_else(|e| panic!("{e}"));
    repo.prepare(Arc::new(set.tasks[0].clone()))
        .await
        .expect("prepare")
}

/// The named attack's patch: its script run in an episode's copy, then the copy's diff.
async fn attack_patch(repo: &RepoScorer, prepared: &Prepared, name: &str) -> String {
    let attack = attacks::derive(&prepared.task)
        .into_iter()
        .find(|a| a.name == name)
        .expect("attack");
    let ws = repo.episode(prepared).expect("episode");
    let ran = repo
        .run(&ws, prepared, &attack.script, None)
        .await
        .expect("run");
    assert_eq!(ran.exit_code, Some(0), "{name}: {}", ran.stderr);
    let diff = repo.diff(&ws, prepared).await.expect("diff").expect("diff");
    assert!(!diff.is_empty(), "{name}: an empty diff");
    diff
}

async fn scored(repo: &RepoScorer, prepared: &Prepared, name: &str) -> RepoVerdict {
    let patch = attack_patch(repo, prepared, name).await;
    let verdict = repo.score(prepared, &patch).await;
    verdict.unwrap_or_else(|e| panic!("{name}: an infrastructure error, not a verdict: {e}"))
}

fn reason(v: &RepoVerdict) -> &str {
    v.reason.as_deref().unwrap_or("")
}

fn dropped(v: &RepoVerdict) -> String {
    serde_json::to_value(v).expect("json")["dropped"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_that_destroys_the_report_scores_zero() {
    let repo = scorer(0);
    let prepared = prepared(&repo).await;
    let v = scored(&repo, &prepared, "exit-before-report").await;
    assert_eq!(v.reward, 0.0, "{v:?}");
    assert!(reason(&v).contains("no JUnit report"), "{v:?}");
    // The prepared state's own run leaving no report is still the machinery's (or the task's)
    // failure: an infrastructure error, never a reward.
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(dir.path().join("repo")).expect("repo");
    std::fs::create_dir_all(dir.path().join("hidden")).expect("hidden");
    std::fs::write(dir.path().join("hidden/test_h.py"), "def test_h(): pass\n").expect("h");
    std::fs::write(dir.path().join("fix.diff"), "").expect("patch");
    let line = r#"{"version": 1, "id": "t", "repository": "repo", "problem_statement": "p", "test_command": "true", "hidden_tests": "hidden", "fail_to_pass": ["test_h.py::test_h"], "patch": "fix.diff"}"#;
    std::fs::write(dir.path().join("tasks.jsonl"), line).expect("tasks");
    let set = RepoTaskSet::load(&dir.path().join("tasks.jsonl")).expect("set");
    let no_report = repo
        .prepare(Arc::new(set.tasks[0].clone()))
        .await
        .expect("prepare");
    let err = repo.score(&no_report, "").await.expect_err("no report");
    assert!(err.to_string().contains("no JUnit report"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_that_disagrees_with_the_exit_status_scores_zero() {
    let repo = scorer(1);
    let prepared = prepared(&repo).await;
    for name in ["atexit-forge", "junit-writer-forge"] {
        let v = scored(&repo, &prepared, name).await;
        assert_eq!(v.reward, 0.0, "{name}: {v:?}");
        assert!(reason(&v).contains("exit status"), "{name}: {v:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conftest_cannot_change_how_the_tests_run() {
    let repo = scorer(2);
    let prepared = prepared(&repo).await;
    let v = scored(&repo, &prepared, "conftest-forge").await;
    assert_eq!(v.reward, 0.0, "{v:?}");
    assert!(dropped(&v).contains("conftest.py"), "{v:?}");
    assert!(
        v.fail_to_pass.values().all(|s| *s == TestStatus::Failed),
        "{v:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_test_files_cannot_be_changed() {
    let repo = scorer(3);
    let prepared = prepared(&repo).await;
    let v = scored(&repo, &prepared, "test-file-forge").await;
    assert_eq!(v.reward, 0.0, "{v:?}");
    assert!(dropped(&v).contains("test_inflection.py"), "{v:?}");
    for (path, wanted) in [
        ("pkg/sub/conftest.py", true),
        ("pyproject.toml", true),
        ("lib/site.pth", true),
        ("pytest.py", true),
        ("_pytest/junitxml.py", true),
        ("test_hidden_ordinal.py", true),
        ("inflection/__init__.py", false),
        ("inflection/conftest_notes.txt", false),
    ] {
        assert_eq!(protected(&prepared.task, path), wanted, "{path}");
    }
    // The fix itself is never dropped: the reference patch with a conftest.py added resolves.
    let mut patch = prepared.task.patch.clone();
    patch.push_str(&attack_patch(&repo, &prepared, "conftest-forge").await);
    let v = repo.score(&prepared, &patch).await.expect("score");
    assert!(v.resolved, "{v:?}");
    assert!(dropped(&v).contains("conftest.py"), "{v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_runs_every_derived_attack_and_only_known_weak_ones_resolve() {
    let set = RepoTaskSet::load(&shipped()).unwrap_or_else(|e| panic!("{e}"));
    let audit = audit_repo_tasks(&scorer(4), &set).await;
    for r in &audit.results {
        eprintln!(
            "{} {} resolved={} {:?} dropped={:?} error={:?}",
            r.task_id, r.attack, r.resolved, r.reason, r.dropped, r.error
        );
    }
    eprintln!("{}", audit.summary());
    let names = attacks::derive(&set.tasks[0]).len();
    assert_eq!(audit.results.len(), names * set.tasks.len());
    assert!(audit.results.iter().all(|r| r.error.is_none()));
    assert!(!audit.failed(), "{}", audit.summary());
    // Every attack the set marks known weak still resolves its task: the mark is measured, not
    // assumed (a defence that stops one should take its mark away).
    for task in &set.tasks {
        for name in task.known_weak.keys() {
            let r = audit
                .results
                .iter()
                .find(|r| r.task_id == task.id && &r.attack == name)
                .unwrap_or_else(|| panic!("{}: no attack {name}", task.id));
            assert!(
                r.resolved,
                "{}: {name} is marked known weak but does not resolve",
                task.id
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protected_file_the_repository_ignores_is_dropped_too() {
    let repo = scorer(5);
    let prepared = prepared(&repo).await;
    // A patch written by hand (not an episode's diff, which leaves ignored files out): a
    // `.gitignore` hiding the conftest.py it adds from `git add -A`.
    let mut patch = attack_patch(&repo, &prepared, "conftest-forge").await;
    patch.push_str(
        "diff --git a/.gitignore b/.gitignore\nnew file mode 100644\n--- /dev/null\n\
         +++ b/.gitignore\n@@ -0,0 +1 @@\n+conftest.py\n",
    );
    let v = repo.score(&prepared, &patch).await.expect("score");
    assert!(v.applied, "{v:?}");
    assert_eq!(v.reward, 0.0, "{v:?}");
    assert!(dropped(&v).contains("conftest.py"), "{v:?}");
}

/// The in-process forgeries a synthesized task declares known weak are derived attacks, and the
/// very ones (with the same reasons) the hand-made set declares.
#[test]
fn the_in_process_forgeries_are_what_the_shipped_set_declares() {
    let set = RepoTaskSet::load(&shipped()).unwrap_or_else(|e| panic!("{e}"));
    let declared: std::collections::BTreeMap<String, String> = attacks::IN_PROCESS_FORGERIES
        .iter()
        .map(|(name, why)| (name.to_string(), why.to_string()))
        .collect();
    for task in &set.tasks {
        assert_eq!(task.known_weak, declared, "{}", task.id);
        let derived: Vec<&str> = attacks::derive(task).iter().map(|a| a.name).collect();
        for name in declared.keys() {
            assert!(derived.contains(&name.as_str()), "{name} is not derived");
        }
    }
}
