//! Cross-checks of rewarded programs: the program that earned a step's reward compared with its
//! task's reference solution on inputs derived from the task's own tests ([`crate::inputs`]:
//! EvalPlus-style type-aware mutations of the tests' inputs, the reference's outputs on them).
//!
//! One [`Checker`] serves `codegym rollout --cross-check` (behind the rollout engine's
//! `CrossCheck` trait, which the binary implements with it) and `codegym rescore --cross-check`
//! ([`crate::rescore`]), so a run and a rescoring of its dataset compare the same way. The inputs
//! of a task are derived once (its packages prepared, its seeds recovered, the reference run on
//! every input) and kept for every later check of the task; a machinery failure is not kept, so
//! the next check tries again. Identical programs (task, language, source; deterministic tasks
//! only) share a comparison, as identical submissions share a verdict: those checked at once wait
//! for one run, and one that agreed is remembered, so the same program later agrees without
//! running. Only agreements are remembered: a disagreement may come from a time limit missed
//! under load, and must not be copied onto later steps. Which steps are checked and what a
//! disagreement does are the trajectory crate's rules (`trajectory::cross_check`); this module
//! only compares.

use std::collections::HashMap;
use std::sync::Arc;

use env_core::EnvError;
use moka::future::Cache;
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;
use trajectory::record::{CrossCheckRecord, DisagreementRecord};

use crate::inputs::{self, Derived};
use crate::scoring::Scorer;
use crate::tasks::{Task, TaskSet};
use codegym_sandbox::SandboxError;
use codegym_sandbox::lang::Language;

/// Why a check could not be made: the machinery failed (recorded as outcome `error`, never a
/// verdict).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("sandbox: {0}")]
    Sandbox(#[from] SandboxError),
    #[error("preparing task {task:?}: {source}")]
    Prepare { task: String, source: EnvError },
    /// The failure of a comparison that identical programs shared.
    #[error(transparent)]
    Shared(Arc<CheckError>),
}

/// Why a comparison did not agree: an outcome (`disagree`, `unavailable`), or a failure. Shared
/// by the identical programs compared at once, never kept.
#[derive(Clone)]
enum NotAgreed {
    Outcome(CrossCheckRecord),
    Failed(Arc<CheckError>),
}

/// The key of `program` for `task`: SHA-256 of the task id, its language and the source.
fn key(task: &Task, program: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [task.id.as_str(), task.language.name(), program] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().into()
}

/// A task ready to compare programs with: its packages resolved, its inputs derived.
struct Prepared {
    task: Arc<Task>,
    derived: Derived,
}

/// Compares programs with their tasks' references, deriving each task's inputs once.
pub struct Checker {
    scorer: Arc<Scorer>,
    tasks: TaskSet,
    /// Per task with a reference: its derivation, or why it has none (an outcome, kept).
    prepared: HashMap<String, OnceCell<Result<Prepared, String>>>,
    /// Programs that agreed (SHA-256 of task, language and source), with the inputs compared.
    agreed: Cache<[u8; 32], u64>,
}

/// Agreeing programs remembered at most.
const AGREED: u64 = 100_000;

impl std::fmt::Debug for Checker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checker")
            .field("tasks", &self.tasks.source())
            .field("with_reference", &self.prepared.len())
            .finish_non_exhaustive()
    }
}

impl Checker {
    /// A checker of programs for `tasks`, running everything in `scorer`'s sandbox.
    pub fn new(scorer: Arc<Scorer>, tasks: TaskSet) -> Checker {
        let prepared = tasks
            .iter()
            .filter(|t| t.reference_solution.is_some())
            .map(|t| (t.id.clone(), OnceCell::new()))
            .collect();
        Checker {
            scorer,
            tasks,
            prepared,
            agreed: Cache::new(AGREED),
        }
    }

    /// Whether `task_id` is a task of the set with a reference solution (no other is checked).
    pub fn covers(&self, task_id: &str) -> bool {
        self.prepared.contains_key(task_id)
    }

    /// `program` (a whole program in `language`, as the env scored it) compared with the
    /// reference of `task_id`: `agree` or `disagree` on the derived inputs, or `unavailable`
    /// and why. `Err` only when the machinery failed.
    pub async fn check(
        &self,
        task_id: &str,
        program: &str,
        language: &str,
    ) -> Result<CrossCheckRecord, CheckError> {
        let (Some(task), Some(cell)) = (self.tasks.get(task_id), self.prepared.get(task_id)) else {
            return Ok(CrossCheckRecord::unavailable(
                "the task has no reference solution in the task set",
            ));
        };
        match Language::parse(language) {
            Ok(l) if l == task.language => {}
            _ => {
                return Ok(CrossCheckRecord::unavailable(format!(
                    "the program is in {language}, the task's reference in {}",
                    task.language
                )));
            }
        }
        let compare = self.compare(task, cell, program);
        let compared = match task.deterministic.then(|| key(task, program)) {
            None => compare.await,
            // Identical programs share one comparison: at once, and later when it agreed.
            Some(k) => self
                .agreed
                .try_get_with(k, compare)
                .await
                .map_err(|e| (*e).clone()),
        };
        match compared {
            Ok(inputs) => Ok(CrossCheckRecord::compared(inputs, Vec::new())),
            Err(NotAgreed::Outcome(record)) => Ok(record),
            Err(NotAgreed::Failed(e)) => Err(CheckError::Shared(e)),
        }
    }

    /// `program` run on `task`'s derived inputs: the inputs compared when it agrees on all.
    async fn compare(
        &self,
        task: &Arc<Task>,
        cell: &OnceCell<Result<Prepared, String>>,
        program: &str,
    ) -> Result<u64, NotAgreed> {
        let failed = |e: CheckError| NotAgreed::Failed(Arc::new(e));
        let prepared = cell
            .get_or_try_init(|| self.prepare(task.clone()))
            .await
            .map_err(failed)?;
        let p = match prepared {
            Ok(p) => p,
            Err(why) => {
                return Err(NotAgreed::Outcome(CrossCheckRecord::unavailable(
                    why.clone(),
                )));
            }
        };
        if let Some(why) = p.derived.why_none() {
            return Err(NotAgreed::Outcome(CrossCheckRecord::unavailable(why)));
        }
        let found = p
            .derived
            .disagreements(self.scorer.sandbox(), program)
            .await
            .map_err(|e| failed(e.into()))?;
        let inputs = p.derived.len() as u64;
        tracing::debug!(task = %p.task.id, inputs, disagreeing = found.len(), "cross-checked a program");
        if found.is_empty() {
            return Ok(inputs);
        }
        let found = found
            .into_iter()
            .map(|d| DisagreementRecord {
                input: d.input,
                reference: d.reference,
                candidate: d.candidate,
            })
            .collect();
        Err(NotAgreed::Outcome(CrossCheckRecord::compared(
            inputs, found,
        )))
    }

    /// `task`'s packages resolved and its inputs derived; `Ok(Err(why))` when that is an
    /// outcome (a package this deployment refuses).
    async fn prepare(&self, task: Arc<Task>) -> Result<Result<Prepared, String>, CheckError> {
        let id = task.id.clone();
        let task = match self.scorer.prepare(task).await {
            Ok(task) => task,
            Err(EnvError::FailedPrecondition(why)) => return Ok(Err(why)),
            Err(source) => return Err(CheckError::Prepare { task: id, source }),
        };
        let derived = inputs::derive(self.scorer.sandbox(), &task).await?;
        tracing::debug!(task = %id, seeds = derived.seeds, mutated = derived.mutated, kept = derived.len(), "derived a task's inputs for cross-checks");
        Ok(Ok(Prepared { task, derived }))
    }
}
