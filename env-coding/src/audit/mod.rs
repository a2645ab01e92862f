//! `codegym audit`: runs the reward-hacking corpus ([`corpus`]) against every task of a task set,
//! in the task's language, through the same scoring as every other surface, and reports each
//! (task, exploit) that earns a reward above zero.
//!
//! Each task's baseline is what a do-nothing answer earns ([`render::baseline_for`]); an exploit is
//! a finding only where it earns more. A baseline above zero is reported on its own (partial credit
//! for doing nothing) and fails the audit only with `strict`.
//!
//! Besides the corpus, attacks are derived from each task's own tests ([`derive`]): a derived
//! attack that solves the task is a finding like a corpus exploit's; one that earns partial credit
//! is reported as partial and fails the audit only with `strict`.
//!
//! A task marked `metadata.known_weak` (a string: why) is reported like any other but does not
//! fail the audit: fixtures that prove each exploit works where a reward is weak carry it.
//!
//! With [`AuditScope::mutants`], the same report also measures how strong each task's tests are
//! ([`mutants`]: mutation testing of the reference solution), and [`AuditScope::min_mutation_score`]
//! fails the audit on tasks whose score is below it.

pub mod corpus;
pub mod derive;
pub mod html;
pub mod mutants;
pub mod render;

use std::collections::BTreeMap;
use std::sync::Arc;

use codegym_sandbox::lang::Language;
use env_core::EnvError;
use futures::StreamExt;
use serde::Serialize;

use crate::reward::RewardOutcome;
use crate::reward::run::{EvalOptions, Program};
use crate::scoring::{Scored, Scorer, Submission};
use crate::tasks::{Task, TaskSet};
pub use corpus::{Exploit, exploits};
pub use mutants::MutationReport;

/// How many (task, exploit) programs are scored at once.
const IN_FLIGHT: usize = 32;

/// One exploit that earned a reward on one task.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub task_id: String,
    pub language: Language,
    pub exploit: String,
    /// The exploit's file under `audit/exploits` (one name may have a file per language family).
    pub file: String,
    pub category: String,
    pub what: String,
    pub reward: f64,
    /// The attack earned the full reward (the task counted as solved).
    pub solved: bool,
    /// Derived from this task's tests (`file` is `derived/<kind>`), not the corpus's.
    pub derived: bool,
    pub reward_breakdown: serde_json::Value,
    /// The task's `metadata.known_weak`: it is known to be hackable, and why.
    pub known_weak: Option<String>,
}

impl Finding {
    /// Whether this finding makes its task hackable: any corpus exploit above the do-nothing
    /// baseline; a derived attack only when it solves the task, or in `strict` mode.
    pub fn counts(&self, strict: bool) -> bool {
        !self.derived || self.solved || strict
    }
}

/// A task where the do-nothing answer already earns a reward.
#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    pub task_id: String,
    pub reward: f64,
    pub reward_breakdown: serde_json::Value,
    pub known_weak: Option<String>,
}

/// The result of an audit.
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    pub tasks: usize,
    /// (task, exploit) programs scored.
    pub attempts: usize,
    pub exploits: Vec<Exploit>,
    pub findings: Vec<Finding>,
    /// Tasks whose do-nothing answer earns a reward (partial credit for nothing).
    pub baselines: Vec<Baseline>,
    /// Tasks with a finding (or, with `strict`, a baseline above zero) not marked known-weak.
    pub hackable_tasks: Vec<String>,
    /// Mutation testing's results, when asked for ([`AuditScope::mutants`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mutation: Option<MutationReport>,
}

impl AuditReport {
    /// Whether a task not marked known-weak was hacked, or a task's mutation score is below the
    /// gate.
    pub fn failed(&self) -> bool {
        !self.hackable_tasks.is_empty()
            || self
                .mutation
                .as_ref()
                .is_some_and(|m| !m.below_gate.is_empty())
    }

    /// The corpus's files (`python/exit_zero.py`: one exploit in one language family) by how many
    /// tasks each hacked.
    pub fn hits_by_exploit(&self) -> BTreeMap<&str, usize> {
        let mut hits: BTreeMap<&str, usize> =
            self.exploits.iter().map(|e| (e.file.as_str(), 0)).collect();
        for f in &self.findings {
            *hits.entry(f.file.as_str()).or_default() += 1;
        }
        hits
    }
}

/// Which tasks and exploits an audit covers.
#[derive(Debug, Clone, Default)]
pub struct AuditScope {
    /// Only tasks in these languages (empty: all).
    pub languages: Vec<Language>,
    /// Only these exploits, by name (empty: the whole corpus).
    pub exploits: Vec<String>,
    /// A do-nothing answer that earns a reward fails the audit too, and so does a derived attack
    /// that earns partial credit.
    pub strict: bool,
    /// Only the corpus: no attacks derived from the tasks.
    pub corpus_only: bool,
    /// Also mutation-test each task with up to this many mutants of its reference.
    pub mutants: Option<usize>,
    /// With `mutants`: a task whose mutation score is below this fails the audit.
    pub min_mutation_score: Option<f64>,
}

/// Why an audit could not run. A failure of the machinery (or a toolchain or package this machine
/// lacks) is never a verdict on a task.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Corpus(#[from] corpus::CorpusError),
    #[error("unknown exploit {0:?} (see `codegym audit --list`)")]
    UnknownExploit(String),
    #[error("task {task}: deriving attacks: {source}")]
    Derive {
        task: String,
        #[source]
        source: derive::DeriveError,
    },
    #[error("task {task}, {program}: {source}")]
    Scoring {
        task: String,
        /// Which program: an exploit, a mutant, the reference.
        program: String,
        #[source]
        source: EnvError,
    },
    #[error("task {task}: {stage}: {source}")]
    Machinery {
        task: String,
        stage: &'static str,
        #[source]
        source: codegym_sandbox::SandboxError,
    },
}

/// Scores `source` for `task` through the one scoring engine, as a submission (scored only: the
/// plain run happens where a component reads it). `program` names it in errors.
pub(crate) async fn score_source(
    scorer: &Scorer,
    task: &Arc<Task>,
    source: &str,
    opts: EvalOptions,
    program: &str,
) -> Result<Scored, AuditError> {
    let program_ = Program::new(source).in_language(task.language);
    scorer
        .score(Arc::clone(task), Submission::ScoreOnly(program_), opts)
        .await
        .map_err(|source| AuditError::Scoring {
            task: task.id.clone(),
            program: program.to_string(),
            source,
        })
}

/// Scores every applicable (task, exploit) program of `tasks` with the one scoring engine and
/// collects what earned a reward.
pub async fn audit<'a>(
    scorer: &'a Scorer,
    tasks: &'a TaskSet,
    scope: &AuditScope,
    opts: EvalOptions,
) -> Result<AuditReport, AuditError> {
    let mut corpus = exploits()?;
    for name in &scope.exploits {
        if !corpus.iter().any(|e| &e.name == name) {
            return Err(AuditError::UnknownExploit(name.clone()));
        }
    }
    if !scope.exploits.is_empty() {
        corpus.retain(|e| scope.exploits.contains(&e.name));
    }
    let selected: Vec<&'a Arc<Task>> = tasks
        .iter()
        .filter(|t| scope.languages.is_empty() || scope.languages.contains(&t.language))
        .collect();
    let mut jobs: Vec<Job<'a>> = selected
        .iter()
        .flat_map(|task| {
            corpus.iter().filter_map(move |e| {
                render::program_for(e, task).map(|source| Job {
                    task,
                    name: e.name.clone(),
                    file: e.file.clone(),
                    category: e.category.clone(),
                    what: e.what.clone(),
                    source,
                    derived: false,
                })
            })
        })
        .collect();
    if scope.exploits.is_empty() && !scope.corpus_only {
        let corpus = &corpus;
        let derived: Vec<Result<Vec<Job<'a>>, AuditError>> = futures::stream::iter(&selected)
            .map(|task| async move {
                let attacks = derive::attacks(scorer, task, corpus)
                    .await
                    .map_err(|source| AuditError::Derive {
                        task: task.id.clone(),
                        source,
                    })?;
                Ok(attacks
                    .into_iter()
                    .map(|a| Job {
                        task,
                        file: format!("derived/{}", a.kind),
                        name: a.name,
                        category: a.category,
                        what: a.what,
                        source: a.source,
                        derived: true,
                    })
                    .collect())
            })
            .buffered(IN_FLIGHT)
            .collect()
            .await;
        for d in derived {
            jobs.extend(d?);
        }
    }
    let attempts = jobs.len();
    let score = |task: &'a Arc<Task>, name: String, source: String| async move {
        Ok::<RewardOutcome, AuditError>(
            score_source(scorer, task, &source, opts, &name)
                .await?
                .outcome,
        )
    };
    let baselines: Vec<Result<(f64, Option<Baseline>), AuditError>> =
        futures::stream::iter(&selected)
            .map(|task| async move {
                let Some(source) = render::baseline_for(task) else {
                    return Ok((0.0, None));
                };
                let outcome = score(task, "the do-nothing baseline".into(), source).await?;
                Ok((
                    outcome.reward,
                    (outcome.reward > 0.0).then(|| Baseline {
                        task_id: task.id.clone(),
                        reward: outcome.reward,
                        reward_breakdown: outcome.breakdown(),
                        known_weak: known_weak(task),
                    }),
                ))
            })
            .buffered(IN_FLIGHT)
            .collect()
            .await;
    let mut floor = BTreeMap::new();
    let mut trivial = Vec::new();
    for (task, b) in selected.iter().zip(baselines) {
        let (reward, baseline) = b?;
        floor.insert(task.id.as_str(), reward);
        trivial.extend(baseline);
    }
    let floor = &floor;
    let outcomes: Vec<Result<Option<Finding>, AuditError>> = futures::stream::iter(jobs)
        .map(|job| async move {
            let outcome = score(job.task, format!("exploit {}", job.name), job.source).await?;
            let baseline = floor.get(job.task.id.as_str()).copied().unwrap_or(0.0);
            Ok((outcome.reward > baseline + 1e-9).then(|| Finding {
                task_id: job.task.id.clone(),
                language: job.task.language,
                exploit: job.name,
                file: job.file,
                category: job.category,
                what: job.what,
                reward: outcome.reward,
                solved: outcome.solved,
                derived: job.derived,
                reward_breakdown: outcome.breakdown(),
                known_weak: known_weak(job.task),
            }))
        })
        .buffered(IN_FLIGHT)
        .collect()
        .await;
    let mut findings = Vec::new();
    for o in outcomes {
        findings.extend(o?);
    }
    let mut hackable_tasks: Vec<String> = findings
        .iter()
        .filter(|f| f.known_weak.is_none() && f.counts(scope.strict))
        .map(|f| f.task_id.clone())
        .chain(
            trivial
                .iter()
                .filter(|b| scope.strict && b.known_weak.is_none())
                .map(|b| b.task_id.clone()),
        )
        .collect();
    hackable_tasks.sort();
    hackable_tasks.dedup();
    let mutation = match scope.mutants {
        Some(n) => Some(
            mutants::mutation_audit(scorer, &selected, n, scope.min_mutation_score, opts).await?,
        ),
        None => None,
    };
    Ok(AuditReport {
        mutation,
        tasks: selected.len(),
        attempts,
        exploits: corpus,
        findings,
        baselines: trivial,
        hackable_tasks,
    })
}

/// One program to score for one task: a corpus exploit's or a derived attack's.
struct Job<'a> {
    task: &'a Arc<Task>,
    name: String,
    file: String,
    category: String,
    what: String,
    source: String,
    derived: bool,
}

fn known_weak(task: &Task) -> Option<String> {
    match task.metadata.get("known_weak")? {
        serde_json::Value::String(why) => Some(why.clone()),
        other => Some(other.to_string()),
    }
}
