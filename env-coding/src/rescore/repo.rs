//! Rescoring repository episodes (`codegym/Repo-v0`): an episode's answer is the diff its record
//! keeps (`repository.patch`), so its submit step is rescored by scoring that diff again in a
//! fresh copy of the task's prepared state with the current task set and sandbox: the one scoring
//! engine ([`RepoScorer::score`], what the env's `submit` and `tasks check` run), its verdict
//! written into the step's info as the env writes it ([`submit_info`]) and the record's
//! `repository.verdict`. A task is prepared once per rescoring, whatever the number of its
//! episodes. An episode without a recorded diff (one that was never submitted, or whose diff
//! could not be read) is not rescored and says why; so is one whose task left the set.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;
use trajectory::record::{ActionRecord, DriftReason, EnvStepRecord, TrajectoryRecord};

use super::{Failure, StepOutcome, replay_failed};
use crate::repo::{Prepared, RepoScorer, submit_info};
use crate::scoring::Scorer;
use crate::tasks::{RepoTaskSet, TaskError};

/// The current repository task set and its prepared states.
pub(super) struct RepoReplay {
    scorer: RepoScorer,
    tasks: RepoTaskSet,
    prepared: Mutex<HashMap<String, Arc<OnceCell<Arc<Prepared>>>>>,
}

impl RepoReplay {
    /// Blocking (loads the task file).
    pub(super) fn new(scorer: &Scorer, tasks: &str) -> Result<RepoReplay, TaskError> {
        Ok(RepoReplay {
            scorer: RepoScorer::of(scorer),
            tasks: RepoTaskSet::load(Path::new(tasks))?,
            prepared: Mutex::new(HashMap::new()),
        })
    }

    /// The outcome of each selected step: the recorded diff scored again.
    pub(super) async fn replay(
        &self,
        record: &TrajectoryRecord,
        selected: &[(usize, usize)],
    ) -> Vec<StepOutcome> {
        let outcome = self.score(record, selected).await;
        vec![outcome; selected.len()]
    }

    async fn score(&self, record: &TrajectoryRecord, selected: &[(usize, usize)]) -> StepOutcome {
        let Some(task) = self.tasks.tasks.iter().find(|t| t.id == record.task_id) else {
            return Err((
                DriftReason::TaskMissing,
                format!("task {:?} is not in the current task set", record.task_id),
            ));
        };
        let Some(patch) = record.repository.as_ref().and_then(|r| r.patch.as_deref()) else {
            return Err(replay_failed(
                "the record keeps no diff (its episode's changes could not be read)",
            ));
        };
        let prepared = self.prepared(task).await?;
        let verdict = self
            .scorer
            .score(&prepared, patch)
            .await
            .map_err(|e| replay_failed(format!("scoring: {e}")))?;
        // The step's own info, its verdict replaced as the env's submit writes it.
        let mut info = selected
            .last()
            .map(|&(t, i)| record.turns[t].env_steps[i].info.clone())
            .unwrap_or_default();
        let (reward, _) = submit_info(&mut info, &prepared, &verdict);
        Ok((reward, info))
    }

    async fn prepared(&self, task: &crate::tasks::RepoTask) -> Result<Arc<Prepared>, Failure> {
        let cell = self
            .prepared
            .lock()
            .map_err(|_| replay_failed("prepared states"))?
            .entry(task.id.clone())
            .or_default()
            .clone();
        let task = Arc::new(task.clone());
        cell.get_or_try_init(|| async {
            self.scorer
                .prepare(task)
                .await
                .map_err(|e| replay_failed(format!("preparing the task: {e}")))
        })
        .await
        .cloned()
    }
}

/// Whether the rollout's repository env scored `step`: a `submit` that ran (the model's or the
/// engine's).
pub(super) fn is_submit(step: &EnvStepRecord) -> bool {
    step.error.is_none()
        && matches!(&step.action, ActionRecord::RepoTool { tool, .. } if tool == env_core::contract::tool::SUBMIT)
        && step.info.contains_key("verdict")
}

/// The record's `repository.verdict` made the rescored submit step's.
pub(super) fn keep_verdict(record: &mut TrajectoryRecord) {
    let verdict = record
        .turns
        .iter()
        .flat_map(|t| &t.env_steps)
        .rfind(|s| is_submit(s))
        .and_then(|s| s.info.get("verdict").cloned());
    if let (Some(outcome), Some(verdict)) = (record.repository.as_mut(), verdict) {
        outcome.verdict = verdict;
    }
}
