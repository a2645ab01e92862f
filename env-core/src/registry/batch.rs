//! Stateless batch scoring behind the `Evaluate` RPC: many independent one-step episodes at once.

use futures::future::join_all;

use super::{AsyncMaker, Kwargs};
use crate::{AsyncEnv, EnvFuture, Options, Result, Step, Value};

/// One independent `reset(seed, options)` + `step(action)`.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalItem {
    pub seed: Option<u64>,
    pub options: Options,
    pub action: Value,
}

/// Stateless batch scoring behind the `Evaluate` RPC. Implementations run the items concurrently.
/// One result per item, in order; a bad item is an `Err` in its slot, never a failure of the batch.
/// The outer `Err` is for the whole call (bad kwargs).
pub trait BatchEvaluator: Send + Sync {
    fn evaluate(
        &self,
        kwargs: Kwargs,
        items: Vec<EvalItem>,
    ) -> EnvFuture<'_, Vec<Result<Step<Value>>>>;
}

/// The generic batch evaluator: for each item an env made as [`super::Registry::make_async`] makes it,
/// `reset`, `step`, `close`, with every item in flight at once.
pub struct ResetStepEvaluator {
    maker: AsyncMaker,
}

impl std::fmt::Debug for ResetStepEvaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResetStepEvaluator").finish_non_exhaustive()
    }
}

impl ResetStepEvaluator {
    /// Evaluates with envs from `maker` (see [`super::Registry::async_maker`]).
    pub fn new(maker: AsyncMaker) -> Self {
        Self { maker }
    }

    async fn run(&self, kwargs: Kwargs, items: Vec<EvalItem>) -> Result<Vec<Result<Step<Value>>>> {
        // One env is created up front so that bad kwargs fail the whole call (the outer `Err`)
        // instead of every slot; it then serves the first item.
        let mut first = Some((self.maker)(&kwargs).await?);
        let runs = items.into_iter().map(|item| {
            let reused = first.take();
            let kwargs = &kwargs;
            async move {
                let mut env = match reused {
                    Some(env) => env,
                    None => (self.maker)(kwargs).await?,
                };
                let out = run_item(env.as_mut(), item).await;
                if let Err(e) = env.close().await {
                    tracing::warn!(error = %e, "closing an evaluation env failed");
                }
                out
            }
        });
        Ok(join_all(runs).await)
    }
}

impl BatchEvaluator for ResetStepEvaluator {
    fn evaluate(
        &self,
        kwargs: Kwargs,
        items: Vec<EvalItem>,
    ) -> EnvFuture<'_, Vec<Result<Step<Value>>>> {
        Box::pin(self.run(kwargs, items))
    }
}

async fn run_item(env: &mut dyn AsyncEnv, item: EvalItem) -> Result<Step<Value>> {
    env.reset(item.seed, item.options).await?;
    env.step(item.action).await
}
