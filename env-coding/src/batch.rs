//! The `BatchEvaluator` of `codegym/Python-v0` (the `Evaluate` RPC): independent one-step episodes,
//! all in flight at once on the sandbox (whose own concurrency limit paces them).
//!
//! Each item is scored as the first step of a script-mode episode (a `session` kwarg makes no
//! difference for a single step), through the same [`crate::Scorer`] as the env's steps.
//!
//! Also the `TaskLister` behind `ListTasks`: the task sets that `make` would draw from, listed.

use std::sync::Arc;

use env_core::{
    BatchEvaluator, ChaCha8Rng, EnvError, EnvFuture, EvalItem, EvalStream, Kwargs, Result, Step,
    TaskInfo, TaskLister, TaskPage, Value,
};
use futures::stream::{FuturesUnordered, StreamExt};

use crate::action::{Action, decode_action};
use crate::config::Mode;
use crate::env::step_info;
use crate::scoring::Submission;
use crate::shared::{Settings, Shared};

pub(crate) struct CodingEvaluator {
    pub shared: Arc<Shared>,
}

impl CodingEvaluator {
    /// One item: a one-step script-mode episode, scored by the env's [`crate::Scorer`] (whose
    /// verdict cache lets identical submissions share one run).
    async fn one(&self, settings: &Settings, item: EvalItem) -> Result<Step<Value>> {
        let mut rng: ChaCha8Rng = match item.seed {
            Some(s) => env_core::seeded_rng(s),
            None => env_core::entropy_rng(),
        };
        let task = settings.choose_task(&item.options, &mut rng)?;
        let task = settings.graded(self.shared.scorer.prepare(task).await?);
        let language = settings.choose_language(&item.options, &task)?;
        let submission = match decode_action(item.action, settings.extract, language)? {
            Action::Code(run) => {
                settings.script_submission(settings.script_program(run, &serde_json::Map::new()))
            }
            Action::NoCode => Submission::NoCode(language),
            Action::WriteFile { .. } | Action::ReadFile { .. } => {
                return Err(EnvError::InvalidAction(
                    "file tools are not available in Evaluate".into(),
                ));
            }
        };
        let scored = self
            .shared
            .scorer
            .score(task.clone(), submission, settings.eval_options())
            .await?;
        let info = step_info(&task, &scored, 1, Mode::Script);
        Ok(Step {
            obs: Value::Execution(scored.execution),
            reward: scored.outcome.reward,
            terminated: scored.outcome.solved,
            truncated: false,
            info,
        })
    }
}

impl BatchEvaluator for CodingEvaluator {
    fn evaluate_each(
        &self,
        mut kwargs: Kwargs,
        items: Vec<EvalItem>,
    ) -> EnvFuture<'_, EvalStream<'_>> {
        Box::pin(async move {
            // A time limit cannot cut a one-step evaluation short.
            kwargs.remove(env_core::MAX_EPISODE_STEPS_KWARG);
            let settings = Arc::new(Settings::from_kwargs(&self.shared, &kwargs).await?);
            let runs: FuturesUnordered<_> = items
                .into_iter()
                .enumerate()
                .map(|(index, item)| {
                    let settings = settings.clone();
                    async move { (index, self.one(&settings, item).await) }
                })
                .collect();
            Ok(runs.boxed())
        })
    }
}

/// The `TaskLister` of `codegym/Python-v0` (the `ListTasks` RPC): the task set that `make` with the
/// same kwargs would draw from (`tasks` kwarg, else the configured default).
pub(crate) struct CodingTaskLister {
    pub shared: Arc<Shared>,
}

impl TaskLister for CodingTaskLister {
    fn list(&self, kwargs: Kwargs, offset: usize, limit: usize) -> EnvFuture<'_, TaskPage> {
        Box::pin(async move {
            let settings = Settings::from_kwargs(&self.shared, &kwargs).await?;
            let tasks = settings
                .tasks
                .iter()
                .skip(offset)
                .take(limit)
                .map(|t| TaskInfo {
                    id: t.id.clone(),
                    prompt: t.prompt.clone(),
                    completion_prefix: t.completion_prefix.clone(),
                    metadata: t.metadata.clone(),
                    language: Some(t.language.name().to_string()),
                })
                .collect();
            Ok(TaskPage {
                tasks,
                total: settings.tasks.len(),
            })
        })
    }
}
