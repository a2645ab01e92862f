//! `codegym tasks synth` (`repo::synth`) on small projects written by the tests, with the real
//! sandbox and a real pytest: the tasks it writes pass `tasks check` (each reference patch resolves
//! its task, the empty patch does not) and store the project once; the same seed gives the same
//! tasks; a project whose own tests fail is an error naming it; an sdist with an entry escaping its
//! root is refused before anything is written outside.

use std::io::Write;
use std::path::Path;

use env_coding::repo::RepoScorer;
use env_coding::repo::check_repo_tasks;
use env_coding::repo::synth::{SynthError, SynthOptions, synthesize};
use env_coding::tasks::RepoTaskSet;

#[path = "support/repo.rs"]
mod repo_support;

fn scorer(n: u32) -> RepoScorer {
    repo_support::scorer(6_000_000, n)
}

/// A small project: a module of arithmetic helpers and a pytest file with a test per helper.
fn project(dir: &Path, broken_tests: bool) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("mathx.py"),
        "\"\"\"Small helpers.\"\"\"\n\n\ndef clamp(x, lo, hi):\n    # keep x within [lo, hi]\n    if x < lo:\n        return lo\n    if x > hi:\n        return hi\n    return x\n\n\ndef mean(xs):\n    return sum(xs) / len(xs)\n\n\ndef evens(n):\n    return [i for i in range(n) if i % 2 == 0]\n\n\ndef last(xs):\n    return xs[-1]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("test_mathx.py"),
        "from mathx import clamp, mean, evens, last\n\n\ndef test_clamp_low():\n    assert clamp(-3, 0, 10) == 0\n\n\ndef test_clamp_high():\n    assert clamp(30, 0, 10) == 10\n\n\ndef test_clamp_inside():\n    assert clamp(5, 0, 10) == 5\n\n\ndef test_mean():\n    assert mean([1, 2, 3, 6]) == 3\n\n\ndef test_evens():\n    assert evens(7) == [0, 2, 4, 6]\n\n\ndef test_last():\n    assert last([4, 5, 6]) == 6\n\n\ndef test_clamp_edges():\n    assert clamp(0, 0, 10) == 0 and clamp(10, 0, 10) == 10\n",
    )
    .unwrap();
    if broken_tests {
        // Every test fails on the clean source.
        let text = std::fs::read_to_string(dir.join("test_mathx.py")).unwrap();
        std::fs::write(
            dir.join("test_mathx.py"),
            text.replace("assert ", "assert not "),
        )
        .unwrap();
    }
}

fn opts(seed: u64) -> SynthOptions {
    SynthOptions {
        max_tasks: 3,
        seed,
        ..SynthOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synthesized_tasks_pass_the_check_and_the_same_seed_gives_the_same_tasks() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("mathx");
    project(&src, false);
    let repo = scorer(0);
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let report = synthesize(&repo, &src, &a, &opts(7))
        .await
        .unwrap_or_else(|e| panic!("synth: {e}"));
    assert!(!report.tasks.is_empty(), "{report:?}");
    assert_eq!(report.passing, 7, "{report:?}");

    // Every task passes the check as `codegym tasks check` runs it, loaded from the file.
    let set = RepoTaskSet::load(&a.join("tasks.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(set.tasks.len(), report.tasks.len());
    for c in check_repo_tasks(&repo, &set).await {
        assert!(c.passed, "{}: {:?}", c.task_id, c.error);
        assert_eq!(c.reference.as_ref().map(|v| v.reward), Some(1.0));
        assert_eq!(c.empty.as_ref().map(|v| v.reward), Some(0.0));
    }
    for task in &set.tasks {
        // The broken project is the clean one plus the task's setup: one stored copy.
        assert!(
            task.repository.ends_with("repos/mathx"),
            "{:?}",
            task.repository
        );
        assert!(task.setup[0].starts_with("git apply"), "{:?}", task.setup);
        // The statement names the failing tests and never the module's lines or the change.
        for id in &task.fail_to_pass {
            assert!(
                task.problem_statement.contains(id.as_str()),
                "{}",
                task.problem_statement
            );
        }
        let by_line = (0..10).any(|d| {
            task.problem_statement.contains(&format!(" mathx.py:{d}"))
                || task.problem_statement.contains(&format!("/mathx.py:{d}"))
                || task.problem_statement.starts_with(&format!("mathx.py:{d}"))
        });
        assert!(!by_line, "{}", task.problem_statement);
        for changed in task
            .patch
            .lines()
            .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
        {
            let code = changed[1..].trim();
            assert!(
                !task.problem_statement.contains(code),
                "{code:?} in {}",
                task.problem_statement
            );
        }
    }
    let repos: Vec<_> = std::fs::read_dir(a.join("repos")).unwrap().collect();
    assert_eq!(repos.len(), 1);

    // The same input and seed: the same tasks, byte for byte.
    let again = synthesize(&repo, &src, &b, &opts(7))
        .await
        .unwrap_or_else(|e| panic!("synth: {e}"));
    assert_eq!(again.tasks, report.tasks);
    let read = |dir: &Path, rel: &str| std::fs::read(dir.join(rel)).unwrap();
    assert_eq!(read(&a, "tasks.jsonl"), read(&b, "tasks.jsonl"));
    for task in &set.tasks {
        let rel = format!("patches/{}.diff", task.id.rsplit('/').next().unwrap());
        assert_eq!(read(&a, &rel), read(&b, &rel));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_whose_tests_fail_on_its_clean_source_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("failing-project");
    project(&src, true);
    let err = synthesize(&scorer(1), &src, &tmp.path().join("out"), &opts(0))
        .await
        .expect_err("a suite that does not pass");
    assert!(matches!(err, SynthError::Suite { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("failing-project"), "{text}");
    assert!(text.contains("none passed"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdist_with_an_entry_escaping_its_root_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let sdist = tmp.path().join("evil-1.0.tar.gz");
    let gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&sdist).unwrap(),
        flate2::Compression::default(),
    );
    let mut tar = tar::Builder::new(gz);
    let entry = |tar: &mut tar::Builder<_>, name: &[u8], body: &[u8]| {
        let mut header = tar::Header::new_old();
        // Written raw: the builder itself refuses `..` in a path.
        header.as_old_mut().name[..name.len()].copy_from_slice(name);
        header.set_size(body.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        tar.append(&header, body).unwrap();
    };
    entry(&mut tar, b"evil-1.0/evil.py", b"x = 1\n");
    entry(
        &mut tar,
        b"evil-1.0/test_evil.py",
        b"def test_x():\n    pass\n",
    );
    entry(&mut tar, b"evil-1.0/../../escaped.py", b"owned = True\n");
    tar.into_inner().unwrap().finish().unwrap().flush().unwrap();
    let out = tmp.path().join("out");
    let err = synthesize(&scorer(2), &sdist, &out, &opts(0))
        .await
        .expect_err("an escaping entry");
    assert!(matches!(err, SynthError::Source(_)), "{err}");
    assert!(
        err.to_string().contains("leaves the archive's root"),
        "{err}"
    );
    for place in [tmp.path().join("escaped.py"), out.join("escaped.py")] {
        assert!(!place.exists(), "{} was written", place.display());
    }
}
