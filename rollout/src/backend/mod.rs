//! Where environments run: in this process (a [`Registry`], env calls on blocking threads) or in
//! `codegym serve` processes reached over gRPC. Episodes see the same [`EnvSession`] API either way,
//! so trajectories do not depend on the backend.

mod remote;

use std::sync::Arc;

use env_core::{DynEnv, EnvError, Info, Kwargs, Options, Registry, Step, Value};
use tokio::sync::Semaphore;

pub use remote::RemoteBackend;

/// Default cap on env calls running at once in process (see [`EnvBackend::in_process`]).
pub const DEFAULT_IN_PROCESS_ENV_CALLS: usize = 64;

/// A source of environment sessions.
#[derive(Debug, Clone)]
pub enum EnvBackend {
    /// `Registry::make` in this process; env calls run on blocking threads, at most `calls`
    /// permits' worth at once.
    InProcess {
        registry: Arc<Registry>,
        calls: Arc<Semaphore>,
    },
    /// One or more `codegym serve` instances.
    Remote(RemoteBackend),
}

impl EnvBackend {
    /// Environments from `registry`, with at most [`DEFAULT_IN_PROCESS_ENV_CALLS`] env calls at
    /// once. The cap keeps thousands of episodes from holding thousands of blocking threads (each
    /// with its stack) while they wait for the sandbox, which runs only a few programs at a time
    /// anyway.
    pub fn in_process(registry: Arc<Registry>) -> Self {
        Self::in_process_with_limit(registry, DEFAULT_IN_PROCESS_ENV_CALLS)
    }

    /// Like [`EnvBackend::in_process`] with an explicit cap (at least 1).
    pub fn in_process_with_limit(registry: Arc<Registry>, max_calls: usize) -> Self {
        EnvBackend::InProcess {
            registry,
            calls: Arc::new(Semaphore::new(max_calls.max(1))),
        }
    }

    /// Creates a session of `env_id`; `route` picks the server when there are several (an episode
    /// keeps its server for its whole life).
    pub async fn make(
        &self,
        env_id: &str,
        kwargs: &Kwargs,
        route: usize,
    ) -> Result<EnvSession, EnvError> {
        match self {
            EnvBackend::InProcess { registry, calls } => {
                let (registry, id, kwargs) = (registry.clone(), env_id.to_string(), kwargs.clone());
                let env = blocking(calls, move || registry.make(&id, &kwargs)).await?;
                Ok(EnvSession::Local {
                    env: Some(env),
                    calls: calls.clone(),
                })
            }
            EnvBackend::Remote(remote) => Ok(EnvSession::Remote(
                remote.make(env_id, kwargs, route).await?,
            )),
        }
    }
}

/// One environment instance for one episode.
pub enum EnvSession {
    Local {
        /// `None` while a call is running on a blocking thread (or after `close`).
        env: Option<Box<dyn DynEnv>>,
        calls: Arc<Semaphore>,
    },
    Remote(remote::RemoteSession),
}

impl std::fmt::Debug for EnvSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnvSession::Local { .. } => f.write_str("EnvSession::Local"),
            EnvSession::Remote(r) => write!(f, "EnvSession::Remote({r:?})"),
        }
    }
}

impl EnvSession {
    /// Gymnasium's `reset(seed, options) -> (obs, info)`.
    pub async fn reset(
        &mut self,
        seed: Option<u64>,
        options: Options,
    ) -> Result<(Value, Info), EnvError> {
        match self {
            EnvSession::Local { env, calls } => {
                with_env(env, calls, move |e| e.reset(seed, &options)).await
            }
            EnvSession::Remote(r) => r.reset(seed, &options).await,
        }
    }

    /// Gymnasium's `step(action) -> (obs, reward, terminated, truncated, info)`.
    pub async fn step(&mut self, action: Value) -> Result<Step<Value>, EnvError> {
        match self {
            EnvSession::Local { env, calls } => with_env(env, calls, move |e| e.step(action)).await,
            EnvSession::Remote(r) => r.step(action).await,
        }
    }

    /// Releases the environment (its sandbox, or the server's session).
    pub async fn close(self) -> Result<(), EnvError> {
        match self {
            EnvSession::Local {
                env: Some(mut env),
                calls,
            } => blocking(&calls, move || env.close()).await,
            EnvSession::Local { env: None, .. } => Ok(()),
            EnvSession::Remote(r) => r.close().await,
        }
    }
}

/// Runs `f` on the env on a blocking thread and puts the env back. If the caller is dropped meanwhile
/// (deadline, cancellation), the env is dropped on that thread once `f` returns.
async fn with_env<T: Send + 'static>(
    slot: &mut Option<Box<dyn DynEnv>>,
    calls: &Arc<Semaphore>,
    f: impl FnOnce(&mut Box<dyn DynEnv>) -> Result<T, EnvError> + Send + 'static,
) -> Result<T, EnvError> {
    let permit = calls
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| EnvError::ClosedEnvironment)?;
    let mut env = slot.take().ok_or(EnvError::ClosedEnvironment)?;
    let (env, result) = tokio::task::spawn_blocking(move || {
        // Held until the call returns, even if the episode stopped waiting for it.
        let _permit = permit;
        let r = f(&mut env);
        (env, r)
    })
    .await
    .map_err(|e| EnvError::Infrastructure(format!("env call panicked or was aborted: {e}")))?;
    *slot = Some(env);
    result
}

async fn blocking<T: Send + 'static>(
    calls: &Arc<Semaphore>,
    f: impl FnOnce() -> Result<T, EnvError> + Send + 'static,
) -> Result<T, EnvError> {
    let permit = calls
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| EnvError::ClosedEnvironment)?;
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        f()
    })
    .await
    .map_err(|e| EnvError::Infrastructure(format!("env call panicked or was aborted: {e}")))?
}
