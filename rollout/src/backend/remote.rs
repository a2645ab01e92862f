//! The remote backend: sessions on a [`Pool`] of `codegym serve` instances, each episode on one
//! `Session` stream (see [`pool`](super::pool)).
//!
//! Tasks can travel inline: when the caller hands the backend the run's tasks (their native JSON,
//! [`RemoteBackend::with_inline_tasks`]), `reset` sends `{"task": {...}}` instead of a task id, so
//! the servers need neither the task file nor a shared file system (`--tasks-dir`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use env_core::{EnvError, Kwargs, Options};

use super::pool::{EnvPoolConfig, Pool, PooledSession};

/// A pool of `codegym serve` servers, and optionally the tasks to send inline.
#[derive(Debug, Clone)]
pub struct RemoteBackend {
    pool: Arc<Pool>,
    inline_tasks: Option<Arc<HashMap<String, serde_json::Value>>>,
}

impl RemoteBackend {
    /// Resolves the `http://host:port` addresses and checks the servers' health once (see
    /// [`Pool::connect`]).
    pub async fn connect(addresses: &[String], config: EnvPoolConfig) -> Result<Self, EnvError> {
        Ok(RemoteBackend {
            pool: Arc::new(Pool::connect(addresses, config).await?),
            inline_tasks: None,
        })
    }

    /// Sends these tasks (task id -> the task's native JSON, as the env's `reset` option `task`
    /// takes it) inline at every `reset`, instead of their ids.
    pub fn with_inline_tasks(mut self, tasks: HashMap<String, serde_json::Value>) -> Self {
        self.inline_tasks = Some(Arc::new(tasks));
        self
    }

    /// Makes `env_id` with `kwargs` on each server and closes it (see [`Pool::make_on_each`]): the
    /// server that refused, and why.
    pub async fn make_on_each(
        &self,
        env_id: &str,
        kwargs: &Kwargs,
    ) -> Result<(), (SocketAddr, EnvError)> {
        self.pool.make_on_each(env_id, kwargs).await
    }

    /// The pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Number of servers known now.
    pub fn server_count(&self) -> usize {
        self.pool.servers().len()
    }

    pub(super) async fn make(
        &self,
        env_id: &str,
        kwargs: &Kwargs,
        avoid: Option<SocketAddr>,
    ) -> Result<PooledSession, EnvError> {
        self.pool.open(env_id, kwargs, avoid).await
    }

    /// The `reset` options selecting `task_id`: the task itself when it is inline.
    pub(super) fn task_options(&self, task_id: &str) -> Result<Options, EnvError> {
        let mut options = Options::new();
        match &self.inline_tasks {
            Some(tasks) => {
                let task = tasks.get(task_id).ok_or_else(|| {
                    EnvError::InvalidOptions(format!("task {task_id:?} has no inline definition"))
                })?;
                options.insert("task".into(), task.clone());
            }
            None => {
                options.insert("task_id".into(), serde_json::json!(task_id));
            }
        }
        Ok(options)
    }
}
