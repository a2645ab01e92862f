//! Mutation testing repository tasks (`tasks check --audit --mutants N`): how strong a task's
//! tests are, as a number. The reference patch is the fix under test; its near misses are
//! mutants of the lines each of its hunks leaves in a source module (the changed lines and the
//! hunk's context: the code the tests are there to pin down), made by the audit's generator with
//! the module's own text kept around the change. Each mutant, applied on top of the reference
//! fix, is scored like any agent's diff, by the one scoring engine ([`RepoScorer::score`]), under
//! limits a few times the reference's run. The tests reject it (not resolved): killed. They
//! resolve it: it survives, a wrong fix the reward pays for, unless it happens to be equivalent
//! (no test could tell it apart; the survivors are listed so that a person can tell). The score is
//! `killed / mutants`; a mutant whose run failed in the machinery counts in neither.
//!
//! Modules are the reference patch's `.py` files that the patch may change (not a protected
//! path: tests and test configuration are not the code under test).

use std::sync::Arc;

use futures::StreamExt;
use serde::Serialize;

use super::{Prepared, RepoCheck, RepoScorer, protected, shell_quote};
use crate::audit::mutants::python::mutants_of_lines;
use crate::tasks::RepoTask;

/// Mutants of one task scored at once (the sandbox bounds the runs themselves).
const IN_FLIGHT: usize = 4;

/// One mutant of a task's reference fix and what the tests made of it.
#[derive(Debug, Clone, Serialize)]
pub struct RepoMutant {
    pub module: String,
    pub line: usize,
    pub operator: String,
    pub what: String,
    /// The tests rejected it (it did not resolve the task).
    pub killed: bool,
    /// Why it was not resolved (for a killed mutant).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The machinery failed: neither killed nor survived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One task's mutation test.
#[derive(Debug, Clone, Serialize)]
pub struct RepoTaskMutation {
    pub task_id: String,
    /// `killed / mutants scored`; `None` when no mutant was scored.
    pub score: Option<f64>,
    pub mutants: Vec<RepoMutant>,
    /// Why the task was not mutation-tested (its check failed, no module to mutate...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RepoTaskMutation {
    pub fn killed(&self) -> usize {
        self.mutants.iter().filter(|m| m.killed).count()
    }

    /// The mutants the tests resolved.
    pub fn survivors(&self) -> impl Iterator<Item = &RepoMutant> {
        self.mutants
            .iter()
            .filter(|m| !m.killed && m.error.is_none())
    }
}

/// A task set's mutation test.
#[derive(Debug, Clone, Serialize)]
pub struct RepoMutationReport {
    /// Mutants asked for per task.
    pub mutants_per_task: usize,
    /// The lowest score that passes (`--min-mutation-score`).
    pub gate: Option<f64>,
    pub tasks: Vec<RepoTaskMutation>,
}

impl RepoMutationReport {
    /// Whether a task scores below the gate or could not be mutation-tested for a machinery
    /// failure of a mutant.
    pub fn failed(&self) -> bool {
        self.tasks.iter().any(|t| {
            t.mutants.iter().any(|m| m.error.is_some())
                || matches!((self.gate, t.score), (Some(g), Some(s)) if s < g)
        })
    }

    pub fn summary(&self) -> String {
        let scored: Vec<f64> = self.tasks.iter().filter_map(|t| t.score).collect();
        let (killed, total): (usize, usize) = self.tasks.iter().fold((0, 0), |(k, n), t| {
            let scored = t.mutants.iter().filter(|m| m.error.is_none()).count();
            (k + t.killed(), n + scored)
        });
        let mean = match scored.len() {
            0 => "-".to_string(),
            n => format!("{:.2}", scored.iter().sum::<f64>() / n as f64),
        };
        format!(
            "mutation: {killed} of {total} mutants of the reference fixes killed over {} of {} \
             tasks (mean score {mean}{})",
            scored.len(),
            self.tasks.len(),
            self.gate.map(|g| format!(", gate {g}")).unwrap_or_default()
        )
    }
}

/// Mutation-tests every task whose check passed (`checks`, from [`super::check_repo_tasks`]):
/// up to `n` mutants each.
pub async fn mutation_test_repo_tasks(
    scorer: &RepoScorer,
    set: &crate::tasks::RepoTaskSet,
    checks: &[RepoCheck],
    n: usize,
    gate: Option<f64>,
) -> RepoMutationReport {
    let mut tasks = Vec::new();
    for task in &set.tasks {
        let check = checks.iter().find(|c| c.task_id == task.id);
        let wall_ms = check
            .filter(|c| c.passed)
            .and_then(|c| c.reference.as_ref())
            .map(|r| r.wall_ms);
        let result = match wall_ms {
            None => Err("its check failed: not mutation-tested".to_string()),
            Some(ms) => task_mutation(scorer, task, ms, n).await,
        };
        tasks.push(match result {
            Ok(mutants) => RepoTaskMutation {
                task_id: task.id.clone(),
                score: score(&mutants),
                mutants,
                error: None,
            },
            Err(e) => RepoTaskMutation {
                task_id: task.id.clone(),
                score: None,
                mutants: Vec::new(),
                error: Some(e),
            },
        });
    }
    RepoMutationReport {
        mutants_per_task: n,
        gate,
        tasks,
    }
}

fn score(mutants: &[RepoMutant]) -> Option<f64> {
    let scored = mutants.iter().filter(|m| m.error.is_none()).count();
    let killed = mutants.iter().filter(|m| m.killed).count();
    (scored > 0).then(|| killed as f64 / scored as f64)
}

/// Each `.py` file the reference patch changes and may change, with the new-side line ranges of
/// its hunks.
fn regions(patch: &str, protected: impl Fn(&str) -> bool) -> Vec<(String, Vec<(usize, usize)>)> {
    let mut out: Vec<(String, Vec<(usize, usize)>)> = Vec::new();
    let mut current: Option<usize> = None;
    for line in patch.lines() {
        if line.starts_with("diff --git ") {
            current = None;
        } else if let Some(path) = line.strip_prefix("+++ b/") {
            let path = path.trim_end();
            current = (path.ends_with(".py") && !protected(path)).then(|| {
                out.push((path.to_string(), Vec::new()));
                out.len() - 1
            });
        } else if let (Some(i), Some(hunk)) = (current, line.strip_prefix("@@ -")) {
            // `@@ -a,b +c,d @@`: the new side starts at c and spans d lines (1 when absent).
            let new = hunk
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.strip_prefix('+'));
            let mut parts = new.unwrap_or("").split(',');
            let start = parts.next().and_then(|s| s.parse::<usize>().ok());
            let len = parts.next().map_or(Some(1), |s| s.parse::<usize>().ok());
            if let (Some(start), Some(len)) = (start, len)
                && len > 0
            {
                out[i].1.push((start, start + len - 1));
            }
        }
    }
    out.retain(|(_, r)| !r.is_empty());
    out
}

/// Up to `n` mutants of the reference fix of `task`, scored.
async fn task_mutation(
    scorer: &RepoScorer,
    task: &RepoTask,
    reference_ms: u64,
    n: usize,
) -> Result<Vec<RepoMutant>, String> {
    let modules = regions(&task.patch, |path| protected(task, path));
    if modules.is_empty() {
        return Err("the reference patch changes no source module".into());
    }
    let prepared = scorer
        .prepare(Arc::new(task.clone()))
        .await
        .map_err(|e| e.to_string())?;
    let fixed = fixed_modules(scorer, &prepared, &modules).await?;
    // Round robin over the hunks, so that a few mutants still cover several.
    let mut lists = Vec::new();
    for ((module, hunks), text) in modules.iter().zip(&fixed) {
        for &(first, last) in hunks {
            let seed = format!("{}:{module}:{first}", task.id);
            let made = mutants_of_lines(&scorer.sandbox, text, (first, last), n, &seed)
                .await
                .map_err(|e| e.to_string())?
                .map_err(|why| format!("{module}: {why}"))?;
            lists.push(made.into_iter().map(move |m| (module.clone(), m)));
        }
    }
    let mut picked = Vec::new();
    while picked.len() < n && !lists.is_empty() {
        lists.retain_mut(|l| l.next().map(|m| picked.push(m)).is_some());
    }
    picked.truncate(n);
    // Many mutants loop: a few times the reference's run, not the task's whole limit.
    let quick = prepared.with_test_wall((reference_ms * 4).clamp(10_000, 120_000));
    let runs = picked
        .into_iter()
        .map(|(module, m)| scored(scorer, &quick, module, m));
    Ok(futures::stream::iter(runs)
        .buffered(IN_FLIGHT)
        .collect()
        .await)
}

/// The modules' text with the reference patch applied.
async fn fixed_modules(
    scorer: &RepoScorer,
    prepared: &Prepared,
    modules: &[(String, Vec<(usize, usize)>)],
) -> Result<Vec<String>, String> {
    let mut script = "set -e\ngit apply \"$HOME/fix.diff\"\n".to_string();
    for (i, (module, _)) in modules.iter().enumerate() {
        script.push_str(&format!("cp -- {} \"$HOME/m{i}\"\n", shell_quote(module)));
    }
    let fetch = (0..modules.len()).map(|i| format!("m{i}")).collect();
    let files = vec![(
        "fix.diff".to_string(),
        prepared.task.patch.as_bytes().to_vec(),
    )];
    let ws = scorer.episode(prepared).map_err(|e| e.to_string())?;
    let (result, fetched) = scorer
        .run_fetching(&ws, prepared, &script, files, fetch)
        .await
        .map_err(|e| e.to_string())?;
    if result.exit_code != Some(0) || fetched.len() != modules.len() {
        return Err(format!(
            "the reference patch did not apply in a copy: {}",
            super::failure(&result)
        ));
    }
    fetched
        .into_iter()
        .map(|(name, bytes)| String::from_utf8(bytes).map_err(|_| format!("{name}: not UTF-8")))
        .collect()
}

/// One mutant over the reference fix, scored as an agent's diff.
async fn scored(
    scorer: &RepoScorer,
    prepared: &Prepared,
    module: String,
    m: crate::audit::mutants::Mutant,
) -> RepoMutant {
    let mut out = RepoMutant {
        module: module.clone(),
        line: m.line,
        operator: m.operator,
        what: m.what,
        killed: false,
        reason: None,
        error: None,
    };
    let verdict = async {
        let ws = scorer.episode(prepared).map_err(|e| e.to_string())?;
        let script = format!(
            "set -e\ngit apply \"$HOME/fix.diff\"\ncat \"$HOME/mutant\" > {}\n",
            shell_quote(&module)
        );
        let files = vec![
            (
                "fix.diff".to_string(),
                prepared.task.patch.as_bytes().to_vec(),
            ),
            ("mutant".to_string(), m.source.into_bytes()),
        ];
        let (ran, _) = scorer
            .run_fetching(&ws, prepared, &script, files, Vec::new())
            .await
            .map_err(|e| e.to_string())?;
        if ran.exit_code != Some(0) {
            return Err(format!("the mutant could not be written: {}", ran.stderr));
        }
        let patch = scorer
            .diff(&ws, prepared)
            .await
            .map_err(|e| e.to_string())??;
        scorer
            .score(prepared, &patch)
            .await
            .map_err(|e| e.to_string())
    };
    match verdict.await {
        Ok(v) => {
            out.killed = !v.resolved;
            out.reason = v.reason;
        }
        Err(e) => out.error = Some(e),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_regions_are_the_hunks_new_lines_in_source_modules() {
        let patch = "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n\
            @@ -10,7 +10,8 @@ def f():\n x\n-y\n+z\n+w\n@@ -40 +41 @@\n-a\n+b\n\
            diff --git a/tests/test_mod.py b/tests/test_mod.py\n--- a/tests/test_mod.py\n\
            +++ b/tests/test_mod.py\n@@ -1,2 +1,3 @@\n a\n+b\n\
            diff --git a/README b/README\n--- a/README\n+++ b/README\n@@ -1 +1 @@\n-a\n+b\n\
            diff --git a/gone.py b/gone.py\n--- a/gone.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n";
        assert_eq!(
            regions(patch, |p| p.starts_with("tests/")),
            [("pkg/mod.py".to_string(), vec![(10, 17), (41, 41)])]
        );
    }

    fn mutant(killed: bool, error: Option<&str>) -> RepoMutant {
        RepoMutant {
            module: "m.py".into(),
            line: 1,
            operator: "comparison".into(),
            what: "< for <=".into(),
            killed,
            reason: None,
            error: error.map(str::to_string),
        }
    }

    #[test]
    fn a_score_below_the_gate_or_a_mutant_the_machinery_lost_fails() {
        let mutants = vec![
            mutant(true, None),
            mutant(false, None),
            mutant(false, Some("gone")),
        ];
        assert_eq!(score(&mutants), Some(0.5));
        let task = |mutants: Vec<RepoMutant>| RepoTaskMutation {
            task_id: "t".into(),
            score: score(&mutants),
            mutants,
            error: None,
        };
        let report = |gate, mutants| RepoMutationReport {
            mutants_per_task: 3,
            gate,
            tasks: vec![task(mutants)],
        };
        let two = || vec![mutant(true, None), mutant(false, None)];
        assert!(!report(Some(0.5), two()).failed());
        assert!(report(Some(0.6), two()).failed());
        assert!(!report(None, two()).failed());
        assert!(report(None, mutants).failed());
        assert_eq!(task(two()).survivors().count(), 1);
        assert!(
            report(Some(0.6), two())
                .summary()
                .contains("1 of 2 mutants"),
            "{}",
            report(Some(0.6), two()).summary()
        );
    }
}
