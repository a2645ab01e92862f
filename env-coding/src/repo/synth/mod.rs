//! `codegym tasks synth`: repository tasks made from a real Python project and its own tests, the
//! way SWE-smith makes them: break the project on purpose, keep the breaks its tests catch.
//!
//! 1. The project (a directory, or an sdist unpacked in Rust: [`source`]) is stored once under the
//!    output's `repos/NAME/`, and its test suite runs once, through [`RepoScorer`] like any task's
//!    (pytest writing JUnit XML); the tests that pass are the ones a task may use. A suite with no
//!    passing test is an error naming the project.
//! 2. Each source module (not the tests; `--modules` globs narrow them) gets mutants from the
//!    audit's generator ([`crate::audit::mutants::python::mutants_in_place`]: one syntax-tree
//!    change, the module's own text kept around it), seeded by the seed and the module's path, so
//!    the same input gives the same tasks. The candidates of all modules are taken round robin.
//! 3. Each mutant's patch is scored in a fresh copy ([`RepoScorer::test_run`], the one scoring
//!    engine), under a wall limit a few times the clean suite's ([`mutants`]). It is kept when some tests that
//!    passed now fail or error (`fail_to_pass`, the first [`MAX_FAIL_TO_PASS`]) and the rest of
//!    the suite still runs: dropped when a passing test went missing (collection or import broke),
//!    when more than a fifth of the passing tests fail (too easy to find), when no test fails (the
//!    tests cannot tell), and when its failing tests equal an earlier kept mutant's.
//! 4. A kept mutant is a task ([`write`]): the broken project, the revert as its reference patch,
//!    the failing tests' files as hidden tests, `pass_to_pass` the other tests of those files that
//!    still pass, and a problem statement made from the failures. Every task is checked by the path
//!    of `codegym tasks check` (loaded from its written line; the reference patch resolves it, the
//!    empty patch does not) and written only if it passes. `tasks.jsonl` is written last, whole.

mod mutants;
mod source;
mod write;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use serde::Serialize;
use sha2::Digest;

use super::junit::{self, TestStatus};
use super::{RepoError, RepoScorer, TestRun};
use crate::tasks::{RepoLimits, RepoTask};
pub use source::glob_match;
pub use write::unified_diff;

/// `fail_to_pass` tests of one task at most (the first ones, by id).
pub const MAX_FAIL_TO_PASS: usize = 5;
/// Mutants asked for per task wanted (most are dropped: the tests miss them, or they break much).
const CANDIDATES_PER_TASK: usize = 5;
/// Mutants scored at once.
const IN_FLIGHT: usize = 2;
/// The test wall limit of a written task.
const TASK_TEST_WALL_MS: u64 = 60_000;

/// What to synthesize.
#[derive(Debug, Clone)]
pub struct SynthOptions {
    pub max_tasks: usize,
    pub seed: u64,
    /// Source modules to mutate (shell globs over paths relative to the project's root); empty:
    /// every source module.
    pub modules: Vec<String>,
    /// The tasks' `requirements` (pytest).
    pub requirements: Vec<String>,
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions {
            max_tasks: 8,
            seed: 0,
            modules: Vec::new(),
            requirements: vec!["pytest==8.3.4".into()],
        }
    }
}

/// What a synthesis did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SynthReport {
    pub project: String,
    /// The task file written.
    pub tasks_file: PathBuf,
    /// Tests of the clean project, and how many passed.
    pub tests: usize,
    pub passing: usize,
    pub modules: Vec<String>,
    pub candidates: usize,
    /// Task ids written, in order.
    pub tasks: Vec<String>,
    /// Mutants not made into tasks, by reason.
    pub dropped: BTreeMap<String, usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Source(String),
    #[error("{project}: the project's own test suite does not pass on its clean source: {detail}")]
    Suite { project: String, detail: String },
    #[error("{project}: no mutant made a task (dropped: {dropped:?})")]
    NoTasks {
        project: String,
        dropped: BTreeMap<String, usize>,
    },
    #[error(transparent)]
    Repo(#[from] RepoError),
    #[error("the mutant generator: {0}")]
    Sandbox(#[from] codegym_sandbox::SandboxError),
    #[error(transparent)]
    Tasks(#[from] crate::tasks::TaskError),
}

/// Synthesizes repository tasks from `source` (a project directory or an sdist) into `out` (see
/// the module's doc).
pub async fn synthesize(
    scorer: &RepoScorer,
    source: &Path,
    out: &Path,
    opts: &SynthOptions,
) -> Result<SynthReport, SynthError> {
    let name = source::project_name(source);
    let repository = format!("repos/{name}");
    let root = out.join(&repository);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SynthError::Io { path, source }
    };
    // Unpacking and reading the project is blocking IO: off the runtime.
    let (tests, all_modules, test_files) = {
        let (source, at) = (source.to_path_buf(), root.clone());
        tokio::task::spawn_blocking(move || read_project(&source, &at))
            .await
            .map_err(|e| io(&root)(std::io::Error::other(e.to_string())))??
    };
    let modules: Vec<String> = all_modules
        .into_iter()
        .filter(|m| opts.modules.is_empty() || opts.modules.iter().any(|g| glob_match(g, m)))
        .collect();
    if tests.is_empty() || modules.is_empty() {
        return Err(SynthError::Source(format!(
            "{}: {} test files (test_*.py, *_test.py) and {} source modules to mutate: need both",
            source.display(),
            tests.len(),
            modules.len()
        )));
    }
    let mut report = SynthReport {
        project: name.clone(),
        tasks_file: out.join("tasks.jsonl"),
        modules: modules.clone(),
        ..SynthReport::default()
    };

    // 1. The clean suite, once.
    let clean = RepoTask {
        requirements: opts.requirements.clone(),
        test_command: test_command(&tests),
        hidden_tests: test_files.clone(),
        ..RepoTask::directory(
            format!("{name}/clean"),
            root.canonicalize().map_err(io(&root))?,
        )
    };
    let suite_err = |detail: String| SynthError::Suite {
        project: name.clone(),
        detail,
    };
    let prepared = scorer.prepare(Arc::new(clean)).await?;
    let run = match scorer.test_run(&prepared, "").await {
        Err(RepoError::Report { detail, .. }) => return Err(suite_err(detail)),
        other => other?,
    };
    let passing: BTreeSet<String> = run
        .results
        .iter()
        .filter(|(_, s)| **s == TestStatus::Passed)
        .map(|(id, _)| id.clone())
        .collect();
    report.tests = run.results.len();
    report.passing = passing.len();
    if passing.is_empty() {
        let first = first_failure(&run);
        return Err(suite_err(format!(
            "{} tests, none passed{first}",
            run.results.len()
        )));
    }
    tracing::info!(
        project = %name,
        tests = report.tests,
        passing = report.passing,
        wall_ms = run.wall_ms,
        "clean suite"
    );
    let quick = mutants::quick(&prepared, run.wall_ms);

    // 2. Candidates, round robin over the modules.
    let per_module = (opts.max_tasks * CANDIDATES_PER_TASK).div_ceil(modules.len());
    let candidates = mutants::candidates(scorer, &root, &modules, per_module, opts.seed).await?;
    report.candidates = candidates.len();

    // 3-4. Score each, keep, write and check.
    let mut lines = Vec::new();
    let mut seen: BTreeSet<Vec<String>> = BTreeSet::new();
    let mut kept_hidden: BTreeSet<String> = BTreeSet::new();
    let mut scored = futures::stream::iter(candidates)
        .map(|c| {
            let patch = unified_diff(&c.module, &c.clean, &c.broken);
            let quick = &quick;
            async move { (scorer.test_run(quick, &patch).await, c, patch) }
        })
        .buffered(IN_FLIGHT);
    let dropped = |report: &mut SynthReport, why: &str| {
        *report.dropped.entry(why.to_string()).or_default() += 1;
    };
    while let Some((run, c, mutation)) = scored.next().await {
        let run = run?;
        let failing = match mutants::judge(&run, &passing) {
            Ok(f) => f,
            Err(why) => {
                dropped(&mut report, why);
                continue;
            }
        };
        if seen.contains(&failing) {
            dropped(&mut report, "the same failing tests as a kept mutant");
            continue;
        }
        let fail_to_pass: Vec<String> = failing.iter().take(MAX_FAIL_TO_PASS).cloned().collect();
        let files: BTreeSet<&str> = fail_to_pass.iter().map(|id| file_of(id)).collect();
        let pass_to_pass: Vec<String> = passing
            .iter()
            .filter(|id| files.contains(file_of(id)))
            .filter(|id| run.results.get(*id) == Some(&TestStatus::Passed))
            .cloned()
            .collect();
        let hidden: BTreeMap<String, Vec<u8>> = test_files
            .iter()
            .filter(|(f, _)| files.contains(f.as_str()))
            .map(|(f, b)| (f.clone(), b.clone()))
            .collect();
        let cases = run
            .report
            .as_deref()
            .map(junit::cases)
            .and_then(Result::ok)
            .unwrap_or_default();
        let stem = hex8(&mutation);
        // Tasks of the same test files share their hidden tests' directory.
        let hidden_dir = format!(
            "hidden/{}",
            hex8(&hidden.keys().cloned().collect::<Vec<_>>().join("\n"))
        );
        let id = format!("{name}/{stem}");
        let fix = unified_diff(&c.module, &c.broken, &c.clean);
        let statement = write::problem_statement(&fail_to_pass, &cases, &tests);
        let task = write::TaskFiles {
            id: &id,
            stem: &stem,
            repository: &repository,
            requirements: &opts.requirements,
            problem_statement: &statement,
            mutation: &mutation,
            fix: &fix,
            hidden_dir: &hidden_dir,
            test_files: &hidden,
            fail_to_pass: &fail_to_pass,
            pass_to_pass: &pass_to_pass,
            limits: RepoLimits {
                test_wall_ms: TASK_TEST_WALL_MS,
                ..RepoLimits::default()
            },
        };
        let line = task.write(out)?;
        match mutants::check_line(scorer, out, &line).await? {
            None => {
                tracing::info!(task = %id, module = %c.module, "task written");
                report.tasks.push(id);
                lines.push(line);
                kept_hidden.insert(hidden_dir);
                seen.insert(failing);
                if lines.len() >= opts.max_tasks {
                    break;
                }
            }
            Some(why) => {
                tracing::warn!(task = %id, why, "task failed its check");
                task.remove(out);
                dropped(&mut report, "failed the task check");
            }
        }
    }
    let _ = std::fs::remove_file(out.join(mutants::CANDIDATE_FILE));
    // Hidden tests' directories only tasks that failed their check used.
    for entry in std::fs::read_dir(out.join("hidden"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let rel = format!("hidden/{}", entry.file_name().to_string_lossy());
        if !kept_hidden.contains(&rel) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    if lines.is_empty() {
        return Err(SynthError::NoTasks {
            project: name,
            dropped: report.dropped,
        });
    }
    let mut text = format!(
        "// Repository tasks synthesized by `codegym tasks synth` (seed {}) from {name}, whose \
         license is the project's own (repos/{name}/): each task is the project with one change \
         put in, caught by its own tests.\n",
        opts.seed
    );
    for l in &lines {
        text.push_str(l);
        text.push('\n');
    }
    trajectory::atomic::write_atomic(&report.tasks_file, text.as_bytes())
        .map_err(io(&report.tasks_file))?;
    Ok(report)
}

/// The project materialized at `root` (from `source`), its test files and source modules, and
/// the test files' contents.
type Project = (Vec<String>, Vec<String>, BTreeMap<String, Vec<u8>>);

fn read_project(source: &Path, root: &Path) -> Result<Project, SynthError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SynthError::Io { path, source }
    };
    source::materialize(source, root)?;
    let (tests, modules) = source::python_files(root).map_err(io(root))?;
    let mut files = BTreeMap::new();
    for t in &tests {
        let path = root.join(t);
        files.insert(t.clone(), std::fs::read(&path).map_err(io(&path))?);
    }
    Ok((tests, modules, files))
}

fn test_command(files: &[String]) -> String {
    let files: Vec<String> = files.iter().map(|f| write::shell_word(f)).collect();
    format!(
        "python -m pytest -q -p no:cacheprovider -o junit_family=xunit1 \
         --junitxml=\"$CODEGYM_JUNIT\" {}",
        files.join(" ")
    )
}

/// A test id's file (`tests/test_x.py::TestY::test_z` is in `tests/test_x.py`).
fn file_of(id: &str) -> &str {
    id.split("::").next().unwrap_or(id)
}

/// The first failing test of a run and its message, for an error.
fn first_failure(run: &TestRun) -> String {
    let cases = run
        .report
        .as_deref()
        .map(junit::cases)
        .and_then(Result::ok)
        .unwrap_or_default();
    cases
        .iter()
        .find(|c| matches!(c.status, TestStatus::Failed | TestStatus::Error))
        .map(|c| {
            let message: String = c
                .message
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(200)
                .collect();
            format!(" (first: {}: {message})", c.id)
        })
        .unwrap_or_default()
}

/// The first 8 hex digits of `text`'s sha256: a task's id within its project.
fn hex8(text: &str) -> String {
    let digest = sha2::Sha256::digest(text.as_bytes());
    digest.iter().take(4).map(|b| format!("{b:02x}")).collect()
}
