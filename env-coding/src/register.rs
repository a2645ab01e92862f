//! Registering `codegym/Python-v0` and its batch evaluator.

use std::sync::Arc;

use env_core::{CallCost, EnvCreator, EnvError, EnvSpec, Kwargs, Registry, ValueEnv};

use crate::config::CodingConfig;
use crate::env::{CodingEnv, text_space};
use crate::evaluator::CodingEvaluator;
use crate::sandbox::{Sandbox, SandboxError};
use crate::shared::{Settings, Shared};
use crate::tasks::{TaskError, TaskSet};

/// The id of the Python coding environment.
pub const PYTHON_ENV_ID: &str = "codegym/Python-v0";

/// Why `register` failed.
#[derive(Debug, thiserror::Error)]
pub enum CodingError {
    #[error("sandbox: {0}")]
    Sandbox(#[from] SandboxError),
    #[error("default task set: {0}")]
    Tasks(#[from] TaskError),
    #[error("registry: {0}")]
    Registry(#[from] EnvError),
    #[error("async runtime: {0}")]
    Runtime(std::io::Error),
}

/// Creates one shared [`Sandbox`] and registers `codegym/Python-v0` with its `BatchEvaluator`.
///
/// Captures the current tokio runtime's handle (or starts a small private runtime once) so that the
/// synchronous `Env` calls can drive the sandbox from blocking threads. `Sandbox::new` blocks for
/// tens of milliseconds: call this at start-up.
pub fn register(
    registry: &mut Registry,
    config: CodingConfig,
) -> Result<Arc<Sandbox>, CodingError> {
    let handle = crate::runtime::capture().map_err(CodingError::Runtime)?;
    let sandbox = {
        // The sandbox may need a runtime context while it is created.
        let _guard = handle.enter();
        Arc::new(Sandbox::new(config.sandbox.clone())?)
    };
    let default_tasks = TaskSet::load(&config.tasks)?;
    let spec = EnvSpec {
        id: PYTHON_ENV_ID.to_string(),
        description:
            "Write Python that solves a task; every step runs in a sandbox and is rewarded by \
                      the task's tests (script or persistent-session mode)"
                .to_string(),
        max_episode_steps: Some(config.max_episode_steps.max(1)),
        reward_threshold: Some(1.0),
        nondeterministic: true,
        observation_space: text_space(),
        action_space: text_space(),
        default_kwargs: Kwargs::new(),
        // Steps wait for sandboxed processes.
        call_cost: CallCost::Blocking,
    };
    let shared = Arc::new(Shared::new(sandbox.clone(), handle, config, default_tasks));
    let for_creator = shared.clone();
    let creator: EnvCreator = Arc::new(move |kwargs: &Kwargs| {
        let settings = Settings::from_kwargs(&for_creator, kwargs)?;
        Ok(ValueEnv::boxed(CodingEnv::new(
            for_creator.clone(),
            settings,
        )))
    });
    registry.register(spec, creator)?;
    registry.register_evaluator(PYTHON_ENV_ID, Arc::new(CodingEvaluator { shared }))?;
    Ok(sandbox)
}
