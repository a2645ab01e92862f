//! Registering the coding env (`codegym/Code-v0`, also answering to its former id
//! `codegym/Python-v0`), its batch evaluator and its task lister, all scoring through one
//! [`Scorer`] built from the [`CodingConfig`]; and the repository env (`codegym/Repo-v0`,
//! `crate::repo`) over the same sandbox.

use std::sync::Arc;

use env_core::{AsyncEnv, AsyncEnvCreator, CallCost, EnvError, EnvSpec, Kwargs, Registry};

use crate::batch::{CodingEvaluator, CodingTaskLister};
use crate::config::{CodingConfig, Mode};
use crate::env::{CodingEnv, text_space};
use crate::scoring::{Scorer, ScorerError};
use crate::shared::{Settings, Shared};
use crate::tasks::{TaskError, TaskSet};
use codegym_sandbox::Sandbox;

/// The id of the coding environment: programs in Python or any other language of the sandbox.
pub const CODE_ENV_ID: &str = "codegym/Code-v0";

/// The coding environment's former id, from when it ran Python only: an alias of [`CODE_ENV_ID`]
/// that keeps working (`make`, `Evaluate`, `ListTasks`, OpenEnv routes).
pub const PYTHON_ENV_ID: &str = "codegym/Python-v0";

/// Why `register` failed.
#[derive(Debug, thiserror::Error)]
pub enum CodingError {
    #[error(transparent)]
    Scorer(#[from] ScorerError),
    #[error("default task set: {0}")]
    Tasks(#[from] TaskError),
    #[error("registry: {0}")]
    Registry(#[from] EnvError),
}

/// The env's metadata: what its sandbox offers (isolation level and layers, backend, languages),
/// so that a client sees what it trains on.
fn sandbox_metadata(sandbox: &Sandbox) -> Kwargs {
    let mut metadata = Kwargs::new();
    metadata.insert(
        "sandbox".into(),
        serde_json::to_value(sandbox.info()).unwrap_or_default(),
    );
    metadata
}

/// Builds one [`Scorer`] from `config` and registers `codegym/Code-v0` (an asynchronous env: make
/// it with `Registry::make_async`) with its `BatchEvaluator`, both scoring through it, and
/// `codegym/Python-v0` as its alias. Returns the scorer (the HTTP facade's `/run_code` runs in
/// its sandbox, and cross-checks of the env's rewarded programs run there too).
///
/// The env's futures drive sandboxed processes with tokio: poll them on a tokio runtime.
/// `Sandbox::new` blocks for tens of milliseconds: call this at start-up, outside async code.
pub fn register(registry: &mut Registry, config: CodingConfig) -> Result<Arc<Scorer>, CodingError> {
    let scorer = Arc::new(Scorer::new(&config)?);
    let sandbox = scorer.sandbox().clone();
    let default_tasks = TaskSet::load(&config.tasks)?;
    let spec = EnvSpec {
        id: CODE_ENV_ID.to_string(),
        description: "Write a program (Python, or any language of the sandbox) that solves a \
                      task; every step runs in a sandbox and is rewarded by the task's tests \
                      (script or persistent-session mode)"
            .to_string(),
        max_episode_steps: Some(config.max_episode_steps.max(1)),
        reward_threshold: Some(1.0),
        nondeterministic: true,
        observation_space: text_space(),
        action_space: text_space(),
        default_kwargs: Kwargs::new(),
        // Not consulted: the env is asynchronous (this is the safe default for readers of the spec).
        call_cost: CallCost::Blocking,
        metadata: sandbox_metadata(&sandbox),
    };
    let shared = Arc::new(Shared::new(scorer.clone(), config, default_tasks));
    let for_creator = shared.clone();
    let creator: AsyncEnvCreator = Arc::new(move |kwargs: Kwargs| {
        let shared = for_creator.clone();
        Box::pin(async move {
            let settings = Settings::from_kwargs(&shared, &kwargs).await?;
            if !settings.observe && settings.mode == Mode::Session {
                return Err(EnvError::InvalidKwargs(
                    "observe: false needs mode \"script\": a session's observation is its interpreter's output".into(),
                ));
            }
            Ok(Box::new(CodingEnv::new(shared, settings)) as Box<dyn AsyncEnv>)
        })
    });
    registry.register_async(spec, creator)?;
    registry.register_alias(PYTHON_ENV_ID, CODE_ENV_ID)?;
    registry.register_evaluator(
        CODE_ENV_ID,
        Arc::new(CodingEvaluator {
            shared: shared.clone(),
        }),
    )?;
    registry.register_task_lister(
        CODE_ENV_ID,
        Arc::new(CodingTaskLister {
            shared: shared.clone(),
        }),
    )?;
    // Repository tasks share the sandbox, package cache and allowed task directories.
    crate::repo::register_repo(registry, shared)?;
    Ok(scorer)
}
