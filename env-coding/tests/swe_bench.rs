//! Repository task format version 3 end to end, with real git, pytest and the sandbox: a small
//! Python project made a git repository here (a base commit with a bug, then the fix with its
//! tests), bundled by the host's git, described as SWE-bench instances, imported
//! (`import_swe_bench`) and checked (`check_repo_tasks`: the gold patch resolves, the empty patch
//! does not); the same project as a tarball; the inputs that must fail before anything is scored
//! (each naming its file and line, or its task); and an agent that cannot see the test patch's
//! files nor keep its edits to them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use env_coding::repo::junit::TestStatus;
use env_coding::repo::{RepoScorer, check_repo_tasks};
use env_coding::tasks::{RepoTaskSet, RepositoryKind, SweBenchImport, TaskError, import_swe_bench};

#[path = "support/repo.rs"]
mod repo_support;

fn scorer(n: u32) -> RepoScorer {
    repo_support::scorer(3_100_000, n)
}

const CALC_BUGGY: &str = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n";
const TEST_CALC: &str = "from calc import mul\n\n\ndef test_mul():\n    assert mul(3, 4) == 12\n";
const TEST_CALC_MORE: &str = "from calc import add, mul\n\n\ndef test_mul():\n    assert mul(3, 4) == 12\n\n\ndef test_add():\n    assert add(2, 3) == 5\n";
const TEST_NEW: &str = "from calc import add\nfrom helpers import NEGATIVE\n\n\n\
    def test_add_negative():\n    assert add(*NEGATIVE) == -5\n";
/// A test helper the test patch adds: no test id names its file.
const HELPERS: &str = "NEGATIVE = (-2, -3)\n";

/// The host's git in `dir` (the test's input: the repository a user would bundle).
#[allow(clippy::disallowed_methods)] // the test builds its input with the host's git
fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The project: `calc` (at the base, `add` subtracts) with `tests/test_calc.py`; a second commit
/// fixes `add` and adds tests (to `tests/test_calc.py`, and a new `tests/test_new.py` using a
/// new `tests/helpers.py`).
struct Project {
    dir: PathBuf,
    base: String,
    /// The fix (`calc.py`), the gold patch.
    patch: String,
    /// The tests the fix came with (`tests/`), the test patch.
    test_patch: String,
}

fn project(root: &Path) -> Project {
    let dir = root.join("calc-src");
    std::fs::create_dir_all(dir.join("tests")).expect("dir");
    std::fs::write(dir.join("calc.py"), CALC_BUGGY).expect("calc");
    std::fs::write(dir.join("tests/test_calc.py"), TEST_CALC).expect("test");
    git(&dir, &["init", "-q"]);
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "-q", "-m", "calc with a bug"]);
    let base = git(&dir, &["rev-parse", "HEAD"]).trim().to_string();
    std::fs::write(dir.join("calc.py"), CALC_BUGGY.replace("a - b", "a + b")).expect("fix");
    std::fs::write(dir.join("tests/test_calc.py"), TEST_CALC_MORE).expect("test");
    std::fs::write(dir.join("tests/test_new.py"), TEST_NEW).expect("test");
    std::fs::write(dir.join("tests/helpers.py"), HELPERS).expect("helpers");
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "-q", "-m", "fix add, with tests"]);
    let patch = git(&dir, &["diff", &base, "HEAD", "--", "calc.py"]);
    let test_patch = git(&dir, &["diff", &base, "HEAD", "--", "tests"]);
    Project {
        dir,
        base,
        patch,
        test_patch,
    }
}

/// `REPOS/acme__calc.bundle` (every ref: the fix is in it too) and one SWE-bench instance a line.
fn swe_bench_input(
    root: &Path,
    p: &Project,
    instances: &[serde_json::Value],
) -> (PathBuf, PathBuf) {
    let repos = root.join("repos-in");
    std::fs::create_dir_all(&repos).expect("repos");
    let bundle = repos.join("acme__calc.bundle");
    git(
        &p.dir,
        &["bundle", "create", bundle.to_str().expect("path"), "--all"],
    );
    let file = root.join("instances.jsonl");
    let text: Vec<String> = instances.iter().map(|i| i.to_string()).collect();
    std::fs::write(&file, text.join("\n") + "\n").expect("instances");
    (file, repos)
}

fn instance(p: &Project) -> serde_json::Value {
    serde_json::json!({
        "instance_id": "acme__calc-1",
        "repo": "acme/calc",
        "base_commit": p.base,
        "patch": p.patch,
        "test_patch": p.test_patch,
        "problem_statement": "`calc.add(2, 3)` returns -1.",
        // As the dataset stores them: JSON strings holding lists (and a real list).
        "FAIL_TO_PASS": "[\"tests/test_calc.py::test_add\", \"tests/test_new.py::test_add_negative\"]",
        "PASS_TO_PASS": ["tests/test_calc.py::test_mul"],
        "version": "1.0",
        "environment_setup_commit": p.base,
        "hints_text": "",
        "created_at": "2024-01-01T00:00:00Z",
        "repo_url_nobody_reads": 1,
    })
}

fn import(root: &Path, instances: &Path, repos: &Path) -> Result<(PathBuf, usize), TaskError> {
    import_swe_bench(&SweBenchImport {
        instances: instances.to_path_buf(),
        repos: repos.to_path_buf(),
        out: root.join("out"),
        test_command: None,
        environment: None,
        requirements: vec!["pytest==8.3.4".into()],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_swe_bench_instance_resolves_with_its_gold_patch_only() {
    let tmp = tempfile::tempdir().expect("tmp");
    let p = project(tmp.path());
    let (instances, repos) = swe_bench_input(tmp.path(), &p, &[instance(&p)]);
    let (tasks, n) = import(tmp.path(), &instances, &repos).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(n, 1);
    let written = std::fs::read_to_string(&tasks).expect("tasks");
    let wanted = format!(
        "{{\"version\":4,\"id\":\"acme__calc-1\",\"repository\":\"repos/acme__calc.bundle\",\"commit\":\"{}\",\"requirements\":[\"pytest==8.3.4\"],",
        p.base
    );
    assert!(
        written
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with(&wanted)),
        "{written}"
    );
    let set = RepoTaskSet::load(&tasks).unwrap_or_else(|e| panic!("{e}"));
    let task = &set.tasks[0];
    assert_eq!(task.repository_kind, RepositoryKind::Bundle);
    assert_eq!(task.commit.as_deref(), Some(p.base.as_str()));
    assert!(task.hidden_tests.is_empty());
    assert_eq!(
        task.test_patch_paths,
        [
            "tests/helpers.py",
            "tests/test_calc.py",
            "tests/test_new.py"
        ]
    );
    assert!(
        task.test_command
            .ends_with("'tests/helpers.py' 'tests/test_calc.py' 'tests/test_new.py'"),
        "{}",
        task.test_command
    );
    let checks = check_repo_tasks(&scorer(0), &set).await;
    let c = &checks[0];
    assert!(c.passed, "{:?}", c.error);
    let gold = c.reference.as_ref().expect("gold verdict");
    assert!(gold.resolved && gold.dropped.is_empty(), "{gold:?}");
    let empty = c.empty.as_ref().expect("empty verdict");
    assert_eq!(empty.reward, 0.0);
    // The empty patch fails exactly the new tests, which exist only through the test patch.
    assert!(
        empty
            .fail_to_pass
            .values()
            .all(|s| *s == TestStatus::Failed),
        "{empty:?}"
    );
    assert_eq!(
        empty.pass_to_pass["tests/test_calc.py::test_mul"],
        TestStatus::Passed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tarball_repository_resolves_the_same() {
    let tmp = tempfile::tempdir().expect("tmp");
    let p = project(tmp.path());
    // As `git archive --prefix` writes a release: everything under one top-level dir (stripped).
    let set_dir = tmp.path().join("set");
    std::fs::create_dir_all(&set_dir).expect("set");
    let archive = set_dir.join("calc-1.0.tar.gz");
    git(
        &p.dir,
        &[
            "archive",
            "--prefix=calc-1.0/",
            "-o",
            archive.to_str().expect("path"),
            &p.base,
        ],
    );
    std::fs::write(set_dir.join("fix.diff"), &p.patch).expect("patch");
    std::fs::write(set_dir.join("tests.diff"), &p.test_patch).expect("test patch");
    let line = serde_json::json!({
        "version": 3, "id": "calc/add", "repository": "calc-1.0.tar.gz",
        "requirements": ["pytest==8.3.4"], "problem_statement": "add subtracts",
        "test_command": "python -m pytest -q -p no:cacheprovider -o junit_family=xunit1 --junitxml=\"$CODEGYM_JUNIT\" tests",
        "test_patch": "tests.diff", "patch": "fix.diff",
        "fail_to_pass": ["tests/test_calc.py::test_add", "tests/test_new.py::test_add_negative"],
        "pass_to_pass": ["tests/test_calc.py::test_mul"],
    });
    let tasks = set_dir.join("tasks.jsonl");
    std::fs::write(&tasks, format!("{line}\n")).expect("tasks");
    let set = RepoTaskSet::load(&tasks).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(set.tasks[0].repository_kind, RepositoryKind::Archive);
    let repo = scorer(1);
    let checks = check_repo_tasks(&repo, &set).await;
    assert!(checks[0].passed, "{:?}", checks[0].error);
    // The top-level dir was stripped: the repository's files are at the copy's root.
    let prepared = repo
        .prepare(Arc::new(set.tasks[0].clone()))
        .await
        .expect("prepare");
    let ws = repo.episode(&prepared).expect("episode");
    let ls = repo.run(&ws, &prepared, "ls", None).await.expect("ls");
    assert_eq!(
        ls.stdout.split_whitespace().collect::<Vec<_>>(),
        ["calc.py", "tests"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_never_sees_the_test_patch_nor_keeps_edits_to_its_files() {
    let tmp = tempfile::tempdir().expect("tmp");
    let p = project(tmp.path());
    let (instances, repos) = swe_bench_input(tmp.path(), &p, &[instance(&p)]);
    let (tasks, _) = import(tmp.path(), &instances, &repos).unwrap_or_else(|e| panic!("{e}"));
    let set = RepoTaskSet::load(&tasks).unwrap_or_else(|e| panic!("{e}"));
    let repo = scorer(2);
    let prepared = repo
        .prepare(Arc::new(set.tasks[0].clone()))
        .await
        .expect("prepare");
    let ws = repo.episode(&prepared).expect("episode");
    // The test patch's new file is absent, its changed file is the base's, and the bundle's later
    // commit (the fix and its tests) is nowhere in the copy's history.
    let fixed = git(&p.dir, &["rev-parse", "HEAD"]).trim().to_string();
    let look = repo
        .run(
            &ws,
            &prepared,
            &format!(
                "cat tests/test_new.py; echo ---; cat tests/test_calc.py; echo ---; \
                 git log --all --format=%s; git cat-file -e {fixed} && echo FIX-PRESENT; \
                 ls -a; find / -name 'test_new.py' 2>/dev/null; true"
            ),
            None,
        )
        .await
        .expect("run");
    assert!(look.stdout.contains("calc with a bug"), "{}", look.stdout);
    assert!(!look.stdout.contains("FIX-PRESENT"), "{}", look.stdout);
    assert!(
        look.stderr.contains("tests/test_new.py: No such file"),
        "{}",
        look.stderr
    );
    assert!(!look.stdout.contains("test_add"), "{}", look.stdout);
    assert!(!look.stdout.contains("fix add"), "{}", look.stdout);
    assert!(!look.stdout.contains(".codegym"), "{}", look.stdout);
    assert!(!look.stdout.contains("/test_new.py"), "{}", look.stdout);
    // The fix, plus forged versions of the test patch's files (every test trivially passing),
    // including its helper, which no test id names.
    let forge = "sed -i 's/a - b/a + b/' calc.py && echo 'NEGATIVE = (0, 0)' > tests/helpers.py && \
        printf 'def test_add_negative():\\n    pass\\n' > tests/test_new.py && \
        printf 'def test_mul():\\n    pass\\n\\ndef test_add():\\n    pass\\n' > tests/test_calc.py";
    let ran = repo.run(&ws, &prepared, forge, None).await.expect("run");
    assert_eq!(ran.exit_code, Some(0), "{}", ran.stderr);
    let diff = repo
        .diff(&ws, &prepared)
        .await
        .expect("diff")
        .expect("readable");
    let verdict = repo.score(&prepared, &diff).await.expect("score");
    assert_eq!(
        verdict.dropped,
        [
            "tests/helpers.py",
            "tests/test_calc.py",
            "tests/test_new.py"
        ],
        "{verdict:?}"
    );
    assert!(verdict.resolved, "{verdict:?}");
    // Forged tests alone (no fix): dropped, and the real tests fail.
    let ran = repo
        .run(&ws, &prepared, "sed -i 's/a + b/a - b/' calc.py", None)
        .await
        .expect("run");
    assert_eq!(ran.exit_code, Some(0), "{}", ran.stderr);
    let diff = repo
        .diff(&ws, &prepared)
        .await
        .expect("diff")
        .expect("readable");
    let verdict = repo.score(&prepared, &diff).await.expect("score");
    assert!(!verdict.resolved, "{verdict:?}");
    assert_eq!(
        verdict.fail_to_pass["tests/test_new.py::test_add_negative"],
        TestStatus::Failed
    );
}

/// A task line over `repository` (bundle or archive) in `dir`, its patches empty.
fn bad_task(dir: &Path, fields: serde_json::Value) -> PathBuf {
    std::fs::write(dir.join("empty.diff"), "").expect("patch");
    let mut line = serde_json::json!({
        "version": 3, "id": "bad", "problem_statement": "p", "test_command": "true",
        "fail_to_pass": ["tests/test_calc.py::test_add"], "patch": "empty.diff",
        "requirements": ["pytest==8.3.4"],
    });
    for (k, v) in fields.as_object().expect("object") {
        line[k] = v.clone();
    }
    let path = dir.join("tasks.jsonl");
    std::fs::write(&path, format!("// bad\n{line}\n")).expect("tasks");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_repositories_and_test_patches_fail_before_any_reward() {
    let tmp = tempfile::tempdir().expect("tmp");
    let p = project(tmp.path());
    let (_, repos) = swe_bench_input(tmp.path(), &p, &[instance(&p)]);
    let set_dir = tmp.path().join("bad");
    std::fs::create_dir_all(&set_dir).expect("dir");
    std::fs::copy(repos.join("acme__calc.bundle"), set_dir.join("calc.bundle")).expect("bundle");
    std::fs::write(set_dir.join("tests.diff"), &p.test_patch).expect("test patch");
    let load_err = |fields| {
        let path = bad_task(&set_dir, fields);
        let err = RepoTaskSet::load(&path).expect_err("refused").to_string();
        assert!(err.starts_with(&format!("{}:2: ", path.display())), "{err}");
        err
    };
    // At load, naming the file and line.
    let err =
        load_err(serde_json::json!({"repository": "calc.bundle", "test_patch": "tests.diff"}));
    assert!(err.contains("`commit` is required with a bundle"), "{err}");
    let err = load_err(
        serde_json::json!({"repository": "calc.bundle", "commit": "HEAD", "test_patch": "tests.diff"}),
    );
    assert!(err.contains("not a full commit id"), "{err}");
    let err = load_err(
        serde_json::json!({"repository": "calc.bundle", "commit": p.base, "version": 2, "test_patch": "tests.diff"}),
    );
    assert!(err.contains("`commit` needs `\"version\": 3`"), "{err}");
    let err = load_err(serde_json::json!({"repository": "calc.bundle", "commit": p.base}));
    assert!(
        err.contains("needs `hidden_tests`, `test_patch` or both"),
        "{err}"
    );
    std::fs::write(set_dir.join("not.bundle"), "PK\u{3}\u{4}").expect("zip");
    let err = load_err(
        serde_json::json!({"repository": "not.bundle", "commit": p.base, "test_patch": "tests.diff"}),
    );
    assert!(err.contains("is not a git bundle"), "{err}");

    // At preparation, naming the task (and `tasks check` says so; never a verdict).
    let repo = scorer(3);
    let prepare_err = |fields| {
        let path = bad_task(&set_dir, fields);
        let set = RepoTaskSet::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let repo = repo.clone();
        async move {
            let checks = check_repo_tasks(&repo, &set).await;
            let c = &checks[0];
            assert!(
                !c.passed && c.reference.is_none() && c.empty.is_none(),
                "{c:?}"
            );
            c.error.clone().expect("an error")
        }
    };
    let missing = "0123456789abcdef0123456789abcdef01234567";
    let err = prepare_err(serde_json::json!({"repository": "calc.bundle", "commit": missing, "test_patch": "tests.diff"})).await;
    assert!(
        err.starts_with("task bad: repository: ")
            && err.contains(&format!("commit {missing} is not in the bundle")),
        "{err}"
    );
    // A test patch that does not apply to the prepared state: the test patch's files already
    // there (the fix's commit checked out).
    let fixed = git(&p.dir, &["rev-parse", "HEAD"]).trim().to_string();
    let err = prepare_err(serde_json::json!({"repository": "calc.bundle", "commit": fixed, "test_patch": "tests.diff"})).await;
    assert!(
        err.starts_with("task bad: the test patch does not apply to the prepared repository: ")
            && err.contains("tests/test_new.py"),
        "{err}"
    );
    // A tar entry escaping the archive's root.
    let evil = set_dir.join("evil.tar");
    std::fs::write(&evil, tar_with(b"../escaped.txt", tar::EntryType::Regular)).expect("tar");
    let err =
        prepare_err(serde_json::json!({"repository": "evil.tar", "test_patch": "tests.diff"}))
            .await;
    assert!(
        err.starts_with("task bad: repository: ")
            && err.contains("\"../escaped.txt\" leaves the archive's root"),
        "{err}"
    );
    assert!(!set_dir.join("escaped.txt").exists());
    // A device node in an archive (an image's layer drops one; a repository has none).
    let dev = set_dir.join("dev.tar");
    std::fs::write(&dev, tar_with(b"calc/null", tar::EntryType::Char)).expect("tar");
    let err =
        prepare_err(serde_json::json!({"repository": "dev.tar", "test_patch": "tests.diff"})).await;
    assert!(
        err.starts_with("task bad: repository: ")
            && err.contains("\"calc/null\" is a device node or FIFO"),
        "{err}"
    );

    // The importer: an instance's errors name the input file and line.
    let mut second = instance(&p);
    second["instance_id"] = "acme__calc-2".into();
    second["repo"] = "acme/nothing".into();
    let (instances, _) = swe_bench_input(tmp.path(), &p, &[instance(&p), second]);
    let err = import(tmp.path(), &instances, &repos)
        .expect_err("no bundle")
        .to_string();
    assert!(
        err.starts_with(&format!(
            "{}:2: instance acme__calc-2: no bundle ",
            instances.display()
        )),
        "{err}"
    );
    let mut third = instance(&p);
    third.as_object_mut().expect("object").remove("test_patch");
    let (instances, _) = swe_bench_input(tmp.path(), &p, &[third]);
    let err = import(tmp.path(), &instances, &repos)
        .expect_err("no test patch")
        .to_string();
    assert!(
        err.starts_with(&format!(
            "{}:1: missing field `test_patch`",
            instances.display()
        )),
        "{err}"
    );
}

/// A one-entry tar whose entry's name is `name` as given (the `tar` crate refuses to write `..`).
fn tar_with(name: &[u8], kind: tar::EntryType) -> Vec<u8> {
    let mut header = tar::Header::new_old();
    header.as_old_mut().name[..name.len()].copy_from_slice(name);
    let size = if kind == tar::EntryType::Regular {
        3
    } else {
        0
    };
    header.set_size(size);
    header.set_mode(0o644);
    header.set_entry_type(kind);
    header.set_cksum();
    let mut out = header.as_bytes().to_vec();
    if size > 0 {
        let mut data = b"hi\n".to_vec();
        data.resize(512, 0);
        out.extend(data);
    }
    out.extend([0u8; 1024]);
    out
}
