//! Where environments run: in this process (a [`Registry`], env calls on blocking threads) or in
//! `codegym serve` processes reached over gRPC. Episodes see the same [`EnvSession`] API either way,
//! so trajectories do not depend on the backend.

mod remote;

use std::sync::Arc;

use env_core::{DynEnv, EnvError, Info, Kwargs, Options, Registry, Step, Value};

pub use remote::RemoteBackend;

/// A source of environment sessions.
#[derive(Debug, Clone)]
pub enum EnvBackend {
    /// `Registry::make` in this process.
    InProcess(Arc<Registry>),
    /// One or more `codegym serve` instances.
    Remote(RemoteBackend),
}

impl EnvBackend {
    /// Creates a session of `env_id`; `route` picks the server when there are several (an episode
    /// keeps its server for its whole life).
    pub async fn make(
        &self,
        env_id: &str,
        kwargs: &Kwargs,
        route: usize,
    ) -> Result<EnvSession, EnvError> {
        match self {
            EnvBackend::InProcess(registry) => {
                let (registry, id, kwargs) = (registry.clone(), env_id.to_string(), kwargs.clone());
                let env = blocking(move || registry.make(&id, &kwargs)).await?;
                Ok(EnvSession::Local(Some(env)))
            }
            EnvBackend::Remote(remote) => Ok(EnvSession::Remote(
                remote.make(env_id, kwargs, route).await?,
            )),
        }
    }
}

/// One environment instance for one episode.
pub enum EnvSession {
    /// `None` while a call is running on a blocking thread (or after `close`).
    Local(Option<Box<dyn DynEnv>>),
    Remote(remote::RemoteSession),
}

impl std::fmt::Debug for EnvSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnvSession::Local(_) => f.write_str("EnvSession::Local"),
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
            EnvSession::Local(slot) => with_env(slot, move |env| env.reset(seed, &options)).await,
            EnvSession::Remote(r) => r.reset(seed, &options).await,
        }
    }

    /// Gymnasium's `step(action) -> (obs, reward, terminated, truncated, info)`.
    pub async fn step(&mut self, action: Value) -> Result<Step<Value>, EnvError> {
        match self {
            EnvSession::Local(slot) => with_env(slot, move |env| env.step(action)).await,
            EnvSession::Remote(r) => r.step(action).await,
        }
    }

    /// Releases the environment (its sandbox, or the server's session).
    pub async fn close(self) -> Result<(), EnvError> {
        match self {
            EnvSession::Local(Some(mut env)) => blocking(move || env.close()).await,
            EnvSession::Local(None) => Ok(()),
            EnvSession::Remote(r) => r.close().await,
        }
    }
}

/// Runs `f` on the env on a blocking thread and puts the env back. If the caller is dropped meanwhile
/// (deadline, cancellation), the env is dropped on that thread once `f` returns.
async fn with_env<T: Send + 'static>(
    slot: &mut Option<Box<dyn DynEnv>>,
    f: impl FnOnce(&mut Box<dyn DynEnv>) -> Result<T, EnvError> + Send + 'static,
) -> Result<T, EnvError> {
    let mut env = slot.take().ok_or(EnvError::ClosedEnvironment)?;
    let (env, result) = tokio::task::spawn_blocking(move || {
        let r = f(&mut env);
        (env, r)
    })
    .await
    .map_err(|e| EnvError::Infrastructure(format!("env call panicked or was aborted: {e}")))?;
    *slot = Some(env);
    result
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EnvError> + Send + 'static,
) -> Result<T, EnvError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| EnvError::Infrastructure(format!("env call panicked or was aborted: {e}")))?
}
