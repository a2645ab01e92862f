//! The `BatchEvaluator` of `codegym/Python-v0` (the `Evaluate` RPC): independent one-step episodes,
//! all in flight at once on the sandbox (whose own concurrency limit paces them).
//!
//! Each item is scored as the first step of a script-mode episode (a `session` kwarg makes no
//! difference for a single step).
//!
//! Also the `TaskLister` behind `ListTasks`: the task sets that `make` would draw from, listed.

use std::sync::Arc;

use env_core::{
    BatchEvaluator, ChaCha8Rng, EnvError, EnvFuture, EvalItem, EvalStream, Kwargs, Result, Step,
    TaskInfo, TaskLister, TaskPage, Value,
};
use futures::stream::{FuturesUnordered, StreamExt};

use crate::action::{Action, decode_action, no_code_result};
use crate::config::Mode;
use crate::env::{infra, step_info};
use crate::reward::run::{self, EvalOptions, Program};
use crate::shared::{Settings, Shared};
use crate::tasks::Task;
use crate::verdicts::VerdictCache;

pub(crate) struct CodingEvaluator {
    pub shared: Arc<Shared>,
}

impl CodingEvaluator {
    /// One item: its task and program are resolved first, so that identical submissions share one
    /// verdict (`verdicts.rs`) before anything runs.
    async fn one(&self, settings: &Settings, item: EvalItem) -> Result<Step<Value>> {
        let mut rng: ChaCha8Rng = match item.seed {
            Some(s) => env_core::seeded_rng(s),
            None => env_core::entropy_rng(),
        };
        let task = settings.choose_task(&item.options, &mut rng)?;
        let task = self.shared.with_packages(task).await?;
        let language = settings.choose_language(&item.options, &task)?;
        let code = match decode_action(item.action, settings.extract, language)? {
            Action::Code(run) => Some(run),
            Action::NoCode => None,
            Action::WriteFile { .. } | Action::ReadFile { .. } => {
                return Err(EnvError::InvalidAction(
                    "file tools are not available in Evaluate".into(),
                ));
            }
        };
        let has_code = code.is_some();
        let mut program = match code {
            Some(run) => settings.script_program(run, &serde_json::Map::new()),
            None => Program::default().in_language(language),
        };
        program.data = task.data.clone();
        let options = settings.eval_options();
        let key = VerdictCache::key(&task, has_code.then_some(&program), &options);
        self.shared
            .verdicts
            .get_or_score(key, self.score(&task, program, has_code, options))
            .await
    }

    /// Runs and scores `program` (or scores the absence of code) for `task`.
    async fn score(
        &self,
        task: &Task,
        program: Program,
        has_code: bool,
        options: EvalOptions,
    ) -> Result<Step<Value>> {
        let sandbox = &self.shared.sandbox;
        sandbox.supports(program.language).map_err(infra)?;
        let (result, outcome) = match has_code {
            true => run::run_and_score(sandbox, &task.reward, &program, options)
                .await
                .map_err(infra)?,
            false => {
                let result = no_code_result(program.language);
                let outcome =
                    run::score_program(sandbox, &task.reward, &program, Some(&result), options)
                        .await
                        .map_err(infra)?;
                (result, outcome)
            }
        };
        let info = step_info(task, &outcome, 1, Mode::Script);
        Ok(Step {
            obs: Value::Execution(result),
            reward: outcome.reward,
            terminated: outcome.solved,
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
