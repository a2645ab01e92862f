//! Stateless batch scoring behind the `Evaluate` RPC: many independent one-step episodes at once.
//!
//! The primitive is [`BatchEvaluator::evaluate_each`], which yields each item's result as it
//! finishes (the streaming `EvaluateStream` RPC forwards them as they come); `evaluate` collects them
//! in item order. Dropping the stream drops the items still running.

use futures::stream::{BoxStream, FuturesUnordered, StreamExt};

use super::{AsyncMaker, Kwargs};
use crate::{AsyncEnv, EnvError, EnvFuture, Options, Result, Step, Value};

/// One independent `reset(seed, options)` + `step(action)`.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalItem {
    pub seed: Option<u64>,
    pub options: Options,
    pub action: Value,
}

/// Results of a batch as they finish: `(index of the item, its result)`, each index exactly once.
pub type EvalStream<'a> = BoxStream<'a, (usize, Result<Step<Value>>)>;

/// Stateless batch scoring behind the `Evaluate` RPC. Implementations run the items concurrently; a
/// bad item is an `Err` in its slot, never a failure of the batch. The outer `Err` is for the whole
/// call (bad kwargs).
pub trait BatchEvaluator: Send + Sync {
    /// Every item's result as soon as it is known, tagged with the item's index.
    fn evaluate_each(&self, kwargs: Kwargs, items: Vec<EvalItem>) -> EnvFuture<'_, EvalStream<'_>>;

    /// One result per item, in item order.
    fn evaluate(
        &self,
        kwargs: Kwargs,
        items: Vec<EvalItem>,
    ) -> EnvFuture<'_, Vec<Result<Step<Value>>>> {
        Box::pin(async move {
            let mut slots: Vec<Option<Result<Step<Value>>>> = items.iter().map(|_| None).collect();
            let mut results = self.evaluate_each(kwargs, items).await?;
            while let Some((index, result)) = results.next().await {
                if let Some(slot) = slots.get_mut(index) {
                    *slot = Some(result);
                }
            }
            Ok(slots
                .into_iter()
                .map(|slot| {
                    slot.unwrap_or_else(|| {
                        Err(EnvError::Infrastructure(
                            "the evaluator yielded no result for an item".into(),
                        ))
                    })
                })
                .collect())
        })
    }
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

    async fn run(&self, kwargs: Kwargs, items: Vec<EvalItem>) -> Result<EvalStream<'_>> {
        // One env is created up front so that bad kwargs fail the whole call (the outer `Err`)
        // instead of every slot; it then serves the first item.
        let mut first = Some((self.maker)(&kwargs).await?);
        let runs: FuturesUnordered<_> = items
            .into_iter()
            .enumerate()
            .map(|(index, item)| {
                let reused = first.take();
                let kwargs = kwargs.clone();
                async move {
                    let mut env = match reused {
                        Some(env) => env,
                        None => match (self.maker)(&kwargs).await {
                            Ok(env) => env,
                            Err(e) => return (index, Err(e)),
                        },
                    };
                    let out = run_item(env.as_mut(), item).await;
                    if let Err(e) = env.close().await {
                        tracing::warn!(error = %e, "closing an evaluation env failed");
                    }
                    (index, out)
                }
            })
            .collect();
        Ok(runs.boxed())
    }
}

impl BatchEvaluator for ResetStepEvaluator {
    fn evaluate_each(&self, kwargs: Kwargs, items: Vec<EvalItem>) -> EnvFuture<'_, EvalStream<'_>> {
        Box::pin(self.run(kwargs, items))
    }
}

async fn run_item(env: &mut dyn AsyncEnv, item: EvalItem) -> Result<Step<Value>> {
    env.reset(item.seed, item.options).await?;
    env.step(item.action).await
}
