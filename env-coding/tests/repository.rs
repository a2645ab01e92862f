//! Repository (SWE-style) tasks end to end on the shipped set (`env-coding/tasks/repository/`,
//! inflection with three bugs put in): the format's errors, `tasks check` (each reference patch
//! resolves its task, the empty patch does not), and an episode: an agent's commands in its own
//! copy, its diff, scored in a fresh copy with the hidden tests, which the agent never sees.
//! pytest comes from the package cache (built once from the package index into a shared dir).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use env_coding::repo::junit::TestStatus;
use env_coding::repo::{RepoScorer, check_repo_tasks};
use env_coding::tasks::{RepoTaskSet, TaskError};

#[path = "support/repo.rs"]
mod repo_support;

use repo_support::shipped;

fn scorer(n: u32) -> RepoScorer {
    repo_support::scorer(2_700_000, n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reference_patch_resolves_and_the_empty_patch_does_not() {
    let set = RepoTaskSet::load(&shipped()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(set.tasks.len(), 3);
    let checks = check_repo_tasks(&scorer(0), &set).await;
    for c in &checks {
        assert!(c.passed, "{}: {:?}", c.task_id, c.error);
        let reference = c.reference.as_ref().expect("reference verdict");
        assert_eq!(reference.reward, 1.0);
        assert!(
            reference
                .fail_to_pass
                .values()
                .all(|s| *s == TestStatus::Passed)
        );
        let empty = c.empty.as_ref().expect("empty verdict");
        assert_eq!(empty.reward, 0.0);
        // The empty patch fails exactly the tests the fix is for.
        assert!(
            empty
                .fail_to_pass
                .values()
                .all(|s| *s == TestStatus::Failed),
            "{}: {:?}",
            c.task_id,
            empty.fail_to_pass
        );
        assert!(
            empty
                .pass_to_pass
                .values()
                .all(|s| *s == TestStatus::Passed)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_episode_is_scored_by_its_diff_in_a_fresh_copy() {
    let set = RepoTaskSet::load(&shipped()).unwrap_or_else(|e| panic!("{e}"));
    let task = Arc::new(set.tasks[0].clone());
    let repo = scorer(1);
    let prepared = repo.prepare(task.clone()).await.expect("prepare");
    let ws = repo.episode(&prepared).expect("episode");
    // The agent looks around: the hidden tests are nowhere in its copy.
    let look = repo
        .run(
            &ws,
            &prepared,
            "ls; git status --short; find / -name 'test_hidden_*' 2>/dev/null; true",
            None,
        )
        .await
        .expect("run");
    assert!(!look.stdout.contains("test_hidden"), "{}", look.stdout);
    assert!(
        look.stdout.contains("inflection"),
        "{} {}",
        look.stdout,
        look.stderr
    );
    // A fix in two steps (the first step's edit persists), plus a stray file and a deletion.
    let fix = "sed -i 's/    if number in (11, 12, 13):/    if number % 100 in (11, 12, 13):/' inflection/__init__.py";
    let ran = repo.run(&ws, &prepared, fix, None).await.expect("run");
    assert_eq!(ran.exit_code, Some(0), "{}", ran.stderr);
    let ran = repo
        .run(&ws, &prepared, "grep -c 'number % 100 in' inflection/__init__.py && echo notes > NOTES.txt && rm README.rst", None)
        .await
        .expect("run");
    assert_eq!(ran.stdout.lines().next(), Some("1"), "{}", ran.stderr);
    let diff = repo
        .diff(&ws, &prepared)
        .await
        .expect("diff")
        .expect("readable");
    assert!(
        diff.contains("+    if number % 100 in (11, 12, 13):"),
        "{diff}"
    );
    assert!(
        diff.contains("+++ b/NOTES.txt") && diff.contains("deleted file mode"),
        "{diff}"
    );
    let verdict = repo.score(&prepared, &diff).await.expect("score");
    assert!(verdict.resolved, "{verdict:?}");
    // The episode's copy is unchanged by its diff and by scoring (no index, no test files).
    let after = repo
        .run(&ws, &prepared, "git status --short; ls", None)
        .await
        .expect("run");
    assert!(!after.stdout.contains("test_hidden"), "{}", after.stdout);
    // A patch that plants its own versions of the hidden tests (all passing, under the listed
    // names) does not resolve the task: the hidden tests replace them.
    let forged = "diff --git a/test_hidden_ordinal.py b/test_hidden_ordinal.py\nnew file mode 100644\n\
        --- /dev/null\n+++ b/test_hidden_ordinal.py\n@@ -0,0 +1,3 @@\n\
        +def test_ordinal_of_small_numbers(): pass\n\
        +def test_ordinal_of_teens_above_one_hundred(): pass\n\
        +def test_ordinal_of_negative_teens(): pass\n";
    let verdict = repo.score(&prepared, forged).await.expect("score");
    assert!(verdict.applied && !verdict.resolved, "{verdict:?}");
    assert_eq!(
        verdict.fail_to_pass["test_hidden_ordinal.py::test_ordinal_of_teens_above_one_hundred"],
        TestStatus::Failed
    );
    // A directory where a hidden test goes is replaced too: the fix still resolves the task.
    let ran = repo
        .run(
            &ws,
            &prepared,
            "mkdir test_hidden_ordinal.py && echo x > test_hidden_ordinal.py/x",
            None,
        )
        .await
        .expect("run");
    assert_eq!(ran.exit_code, Some(0), "{}", ran.stderr);
    let diff = repo
        .diff(&ws, &prepared)
        .await
        .expect("diff")
        .expect("readable");
    let verdict = repo.score(&prepared, &diff).await.expect("score");
    assert!(verdict.resolved, "{verdict:?}");
    // A patch that does not apply is a verdict of 0 with git's reason.
    let verdict = repo
        .score(
            &prepared,
            "--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n",
        )
        .await
        .expect("score");
    assert!(!verdict.applied && verdict.reward == 0.0, "{verdict:?}");
    assert!(
        verdict.reason.as_deref().unwrap_or("").contains("nope.py"),
        "{verdict:?}"
    );
}

fn write_set(dir: &Path, line: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("repo")).expect("repo");
    std::fs::create_dir_all(dir.join("hidden")).expect("hidden");
    std::fs::write(dir.join("hidden/test_h.py"), "def test_h(): pass\n").expect("h");
    std::fs::write(dir.join("fix.diff"), "").expect("patch");
    let path = dir.join("tasks.jsonl");
    std::fs::write(&path, format!("// a comment\n\n{line}\n")).expect("tasks");
    path
}

#[test]
fn format_errors_name_the_file_and_line() {
    let dir = tempfile::tempdir().expect("tmp");
    let ok = r#"{"version": 1, "id": "t", "repository": "repo", "problem_statement": "p", "test_command": "true", "hidden_tests": "hidden", "fail_to_pass": ["test_h.py::test_h"], "patch": "fix.diff"}"#;
    let set = RepoTaskSet::load(&write_set(dir.path(), ok)).expect("valid set");
    assert_eq!(
        set.tasks[0].hidden_tests.keys().collect::<Vec<_>>(),
        ["test_h.py"]
    );
    // A file without the optional `disk_mib` reads as before (the sandbox's default quota).
    assert_eq!(set.tasks[0].limits.disk_mib, None);
    let with = ok.replace("}", ", \"limits\": {\"disk_mib\": 64}}");
    let set = RepoTaskSet::load(&write_set(dir.path(), &with)).expect("valid set");
    assert_eq!(set.tasks[0].limits.disk_mib, Some(64));
    for (line, wanted) in [
        (
            ok.replace("\"version\": 1", "\"version\": 5"),
            "version 5 is not supported",
        ),
        (
            ok.replace("\"id\"", "\"environment\": \"repo\", \"id\""),
            "`environment` needs `\"version\": 2`",
        ),
        (
            ok.replace("\"version\": 1", "\"version\": 2").replace(
                "\"id\"",
                "\"environment\": \"repo\", \"requirements\": [\"pytest\"], \"id\"",
            ),
            "the image brings the task's packages",
        ),
        (
            ok.replace("\"version\": 1", "\"version\": 2")
                .replace("\"id\"", "\"environment\": \"../image\", \"id\""),
            "must be a relative path beneath",
        ),
        (ok.replace("\"version\": 1, ", ""), "missing `version`"),
        (
            ok.replace("\"id\"", "\"extra\": 1, \"id\""),
            "unknown field `extra`",
        ),
        (
            ok.replace("\"repo\"", "\"../repo\""),
            "must be a relative path beneath",
        ),
        (
            ok.replace("[\"test_h.py::test_h\"]", "[]"),
            "`fail_to_pass` is empty",
        ),
        (ok.replace("\"hidden\"", "\"nothing\""), "`hidden_tests`"),
        (
            ok.replace("}", ", \"limits\": {\"disk_mib\": 0}}"),
            "`limits.disk_mib` must be at least 1",
        ),
        (
            ok.replace("}", ", \"limits\": {\"disk_gib\": 1}}"),
            "unknown field `disk_gib`",
        ),
        // Version 3's fields need it, and mean something only together.
        (
            ok.replace("\"id\"", "\"test_patch\": \"fix.diff\", \"id\""),
            "`test_patch` needs `\"version\": 3`",
        ),
        (
            ok.replace("\"version\": 1", "\"version\": 3").replace(
                "\"id\"",
                &format!("\"commit\": \"{}\", \"id\"", "a".repeat(40)),
            ),
            "`commit` is only for a bundle `repository`",
        ),
        (
            ok.replace("\"version\": 1", "\"version\": 3")
                .replace("\"hidden_tests\": \"hidden\", ", ""),
            "a task needs `hidden_tests`, `test_patch` or both",
        ),
        (
            ok.replace("\"version\": 1", "\"version\": 3")
                .replace("\"id\"", "\"test_patch\": \"hidden/test_h.py\", \"id\""),
            "is not a unified diff (it names no file)",
        ),
        (
            ok.replace("\"repo\"", "\"hidden/test_h.py\""),
            "is neither a directory, a tar archive",
        ),
    ] {
        let path = write_set(dir.path(), &line);
        let err = RepoTaskSet::load(&path).expect_err(&line);
        assert!(matches!(err, TaskError::Parse { line: 3, .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("{}:3: ", path.display())),
            "{text}"
        );
        assert!(text.contains(wanted), "{text} (wanted {wanted})");
    }
    // Version 2: an environment, resolved against the task file's directory.
    let v2 = ok
        .replace("\"version\": 1", "\"version\": 2")
        .replace("\"id\"", "\"environment\": \"repo\", \"id\"");
    let set = RepoTaskSet::load(&write_set(dir.path(), &v2)).expect("version 2");
    let repo = dir.path().join("repo").canonicalize().expect("repo");
    assert_eq!(set.tasks[0].environment.as_deref(), Some(repo.as_path()));
    let set = RepoTaskSet::load(&write_set(dir.path(), ok)).expect("version 1");
    assert_eq!(set.tasks[0].environment, None);
    // Outside the task file's directory through a link.
    std::os::unix::fs::symlink("/etc", dir.path().join("etc")).expect("link");
    let path = write_set(dir.path(), &ok.replace("\"repo\"", "\"etc\""));
    let err = RepoTaskSet::load(&path).expect_err("escape");
    assert!(err.to_string().contains("leads outside"), "{err}");
}

/// An agent's command runs under the task's limits (what its test command gets), not the
/// sandbox's defaults: here a CPU limit of half a second stops a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_command_runs_under_the_tasks_limits() {
    let set = RepoTaskSet::load(&shipped()).unwrap_or_else(|e| panic!("{e}"));
    let mut task = set.tasks[0].clone();
    task.limits.test_cpu_ms = 500;
    let repo = scorer(2);
    let prepared = repo.prepare(Arc::new(task)).await.expect("prepare");
    let ws = repo.episode(&prepared).expect("episode");
    let spun = repo
        .run(&ws, &prepared, "python3 -c 'while True: pass'", None)
        .await
        .expect("run");
    assert_ne!(spun.exit_code, Some(0), "{spun:?}");
    assert!(
        spun.cpu_ms < 2_000,
        "ran past the task's CPU limit: {spun:?}"
    );
}
