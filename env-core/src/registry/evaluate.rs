//! Stateless batch scoring behind the `Evaluate` RPC.

use std::sync::Mutex;

use rayon::prelude::*;

use super::{EnvCreator, Kwargs};
use crate::{DynEnv, Options, Result, Step, Value};

/// One independent `reset(seed, options)` + `step(action)`.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalItem {
    pub seed: Option<u64>,
    pub options: Options,
    pub action: Value,
}

/// Stateless batch scoring behind the `Evaluate` RPC. Called from a blocking thread (never from async
/// code); implementations parallelise internally. One result per item, in order; a bad item is an
/// `Err` in its slot, never a failure of the batch. The outer `Err` is for the whole call (bad kwargs).
pub trait BatchEvaluator: Send + Sync {
    fn evaluate(&self, kwargs: &Kwargs, items: Vec<EvalItem>) -> Result<Vec<Result<Step<Value>>>>;
}

/// The generic path: for each item make an env with the creator, reset, step; items in parallel on
/// rayon.
pub struct ResetStepEvaluator {
    creator: EnvCreator,
}

impl std::fmt::Debug for ResetStepEvaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResetStepEvaluator").finish_non_exhaustive()
    }
}

impl ResetStepEvaluator {
    pub fn new(creator: EnvCreator) -> Self {
        Self { creator }
    }
}

impl BatchEvaluator for ResetStepEvaluator {
    fn evaluate(&self, kwargs: &Kwargs, items: Vec<EvalItem>) -> Result<Vec<Result<Step<Value>>>> {
        // One env is created up front so that bad kwargs fail the whole call (the outer `Err`)
        // instead of every slot; it then serves the first item.
        let probe: Mutex<Option<Box<dyn DynEnv>>> = Mutex::new(Some((self.creator)(kwargs)?));
        let results = items
            .into_par_iter()
            .map(|item| {
                let reused = probe.lock().ok().and_then(|mut p| p.take());
                let mut env = match reused {
                    Some(env) => env,
                    None => (self.creator)(kwargs)?,
                };
                let out = run_item(env.as_mut(), item);
                if let Err(e) = env.close() {
                    tracing::warn!(error = %e, "closing an evaluation env failed");
                }
                out
            })
            .collect();
        Ok(results)
    }
}

fn run_item(env: &mut dyn DynEnv, item: EvalItem) -> Result<Step<Value>> {
    env.reset(item.seed, &item.options)?;
    env.step(item.action)
}
