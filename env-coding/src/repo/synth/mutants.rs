//! The mutants a synthesis tries, and which of them become tasks: made module by module with the
//! audit's generator and taken round robin ([`candidates`]), run under limits a few times the
//! clean suite's ([`quick`]), judged by what their test run shows ([`judge`]), and a written task
//! checked as `codegym tasks check` checks it ([`check_line`]).

use std::collections::BTreeSet;
use std::path::Path;

use super::{SynthError, TASK_TEST_WALL_MS};
use crate::audit::mutants::python::mutants_in_place;
use crate::repo::junit::TestStatus;
use crate::repo::{Prepared, RepoScorer, TestRun, check_repo_tasks};
use crate::tasks::RepoTaskSet;

/// A mutant failing more than this share of the passing tests is too easy to find.
const MAX_FAILING_SHARE: f64 = 0.2;

/// One mutant of one module.
pub(super) struct Candidate {
    pub module: String,
    pub clean: String,
    pub broken: String,
}

/// Up to `per_module` mutants of each of `modules` (paths under `root`), seeded by `seed` and
/// the module's path, taken round robin so that a few tasks still come from several modules.
pub(super) async fn candidates(
    scorer: &RepoScorer,
    root: &Path,
    modules: &[String],
    per_module: usize,
    seed: u64,
) -> Result<Vec<Candidate>, SynthError> {
    let mut lists = Vec::new();
    for module in modules {
        let path = root.join(module);
        let text = std::fs::read_to_string(&path).map_err(|source| SynthError::Io {
            path: path.clone(),
            source,
        })?;
        let seed = format!("{seed}:{module}");
        let made = match mutants_in_place(&scorer.sandbox, &text, 1, per_module, &seed).await? {
            Ok(m) => m,
            Err(why) => {
                tracing::warn!(module, why, "module not mutated");
                continue;
            }
        };
        lists.push(made.into_iter().map(move |m| Candidate {
            module: module.clone(),
            clean: text.clone(),
            broken: m.source,
        }));
    }
    let mut candidates = Vec::new();
    while !lists.is_empty() {
        lists.retain_mut(|l| l.next().map(|c| candidates.push(c)).is_some());
    }
    Ok(candidates)
}

/// The tests of `passing` that fail or error under the mutant (sorted), or why it makes no task.
pub(super) fn judge(
    run: &TestRun,
    passing: &BTreeSet<String>,
) -> Result<Vec<String>, &'static str> {
    if run.reason.is_some() {
        return Err("the tests left no report");
    }
    if run.timed_out {
        return Err("the tests hit their wall limit");
    }
    if passing.iter().any(|id| !run.results.contains_key(id)) {
        return Err("collection or import broke");
    }
    let failing: Vec<String> = passing
        .iter()
        .filter(|id| matches!(run.results[*id], TestStatus::Failed | TestStatus::Error))
        .cloned()
        .collect();
    if failing.is_empty() {
        return Err("no test fails");
    }
    if failing.len() as f64 > passing.len() as f64 * MAX_FAILING_SHARE {
        return Err("more than a fifth of the suite fails");
    }
    Ok(failing)
}

/// The clean project's prepared state with the wall and CPU limits of mutant runs: a few times the
/// clean suite's time (a mutant that loops forever is common, and would spend the task's limit).
pub(super) fn quick(prepared: &Prepared, clean_wall_ms: u64) -> Prepared {
    prepared.with_test_wall((clean_wall_ms * 4).clamp(10_000, TASK_TEST_WALL_MS))
}

/// The task file one candidate is checked from (removed at the end).
pub(super) const CANDIDATE_FILE: &str = ".candidate.jsonl";

/// Checks one written task line as `codegym tasks check` does: `None` when it passes.
pub(super) async fn check_line(
    scorer: &RepoScorer,
    out: &Path,
    line: &str,
) -> Result<Option<String>, SynthError> {
    let path = out.join(CANDIDATE_FILE);
    std::fs::write(&path, format!("{line}\n")).map_err(|source| SynthError::Io {
        path: path.clone(),
        source,
    })?;
    let set = RepoTaskSet::load(&path)?;
    let check = check_repo_tasks(scorer, &set).await;
    Ok(check
        .into_iter()
        .find(|c| !c.passed)
        .map(|c| c.error.unwrap_or_default()))
}
