//! Where environments run: in this process (a [`Registry`]) or in `codegym serve` processes reached
//! over gRPC. Episodes see the same [`EnvSession`] API either way, so trajectories do not depend on
//! the backend. In process, calls of envs whose spec says [`CallCost::Cheap`] run in place; all
//! others run on blocking threads, at most a fixed number at once.

mod remote;

use std::sync::Arc;

use env_core::{CallCost, DynEnv, EnvError, Info, Kwargs, Options, Registry, Step, Value};
use tokio::sync::Semaphore;

pub use remote::RemoteBackend;

/// Default cap on env calls running at once in process (see [`EnvBackend::in_process`]).
pub const DEFAULT_IN_PROCESS_ENV_CALLS: usize = 64;

/// A source of environment sessions.
#[derive(Debug, Clone)]
pub enum EnvBackend {
    /// `Registry::make` in this process; env calls run on blocking threads, at most `calls`
    /// permits' worth at once (calls of `CallCost::Cheap` envs run in place and need none).
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
                // An unknown id gets the default here and its error from `make`.
                let cost = registry
                    .spec(env_id)
                    .map(|s| s.call_cost)
                    .unwrap_or_default();
                let (registry, id, kwargs) = (registry.clone(), env_id.to_string(), kwargs.clone());
                let env = call(calls, cost, move || registry.make(&id, &kwargs)).await?;
                Ok(EnvSession::Local {
                    env: Some(env),
                    calls: calls.clone(),
                    cost,
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
        cost: CallCost,
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
            EnvSession::Local { env, calls, cost } => {
                with_env(env, calls, *cost, move |e| e.reset(seed, &options)).await
            }
            EnvSession::Remote(r) => r.reset(seed, &options).await,
        }
    }

    /// Gymnasium's `step(action) -> (obs, reward, terminated, truncated, info)`.
    pub async fn step(&mut self, action: Value) -> Result<Step<Value>, EnvError> {
        match self {
            EnvSession::Local { env, calls, cost } => {
                with_env(env, calls, *cost, move |e| e.step(action)).await
            }
            EnvSession::Remote(r) => r.step(action).await,
        }
    }

    /// Releases the environment (its sandbox, or the server's session).
    pub async fn close(self) -> Result<(), EnvError> {
        match self {
            EnvSession::Local {
                env: Some(mut env),
                calls,
                cost,
            } => call(&calls, cost, move || env.close()).await,
            EnvSession::Local { env: None, .. } => Ok(()),
            EnvSession::Remote(r) => r.close().await,
        }
    }
}

/// Runs `f` on the env (see [`call`]) and puts the env back. If the caller is dropped meanwhile
/// (deadline, cancellation), the env is dropped on the blocking thread once `f` returns; after a
/// panic the env is gone and later calls fail with `ClosedEnvironment`.
async fn with_env<T: Send + 'static>(
    slot: &mut Option<Box<dyn DynEnv>>,
    calls: &Arc<Semaphore>,
    cost: CallCost,
    f: impl FnOnce(&mut Box<dyn DynEnv>) -> Result<T, EnvError> + Send + 'static,
) -> Result<T, EnvError> {
    let mut env = slot.take().ok_or(EnvError::ClosedEnvironment)?;
    let (env, result) = call(calls, cost, move || {
        let r = f(&mut env);
        Ok((env, r))
    })
    .await?;
    *slot = Some(env);
    result
}

/// Runs an env call where its cost says: in place for cheap envs (no thread hand-off), else on a
/// blocking thread holding one of `calls`' permits. A panic is the call's error either way.
async fn call<T: Send + 'static>(
    calls: &Arc<Semaphore>,
    cost: CallCost,
    f: impl FnOnce() -> Result<T, EnvError> + Send + 'static,
) -> Result<T, EnvError> {
    let panicked =
        |what: &dyn std::fmt::Display| EnvError::Infrastructure(format!("env call {what}"));
    if cost == CallCost::Cheap {
        return std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .map_err(|_| panicked(&"panicked"))?;
    }
    let permit = calls
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| EnvError::ClosedEnvironment)?;
    tokio::task::spawn_blocking(move || {
        // Held until the call returns, even if the episode stopped waiting for it.
        let _permit = permit;
        f()
    })
    .await
    .map_err(|e| panicked(&format_args!("panicked or was aborted: {e}")))?
}

#[cfg(test)]
mod tests {
    use std::thread::ThreadId;

    use env_core::{CallCost, Env, EnvSpec, Info, Options, Space, Step, Value};

    use super::*;

    /// Reports the thread each step ran on; panics on the step after `panic_after` steps.
    struct Probe {
        steps: u32,
        panic_after: Option<u32>,
    }

    impl Env for Probe {
        type Obs = Value;
        type Action = String;

        fn reset(
            &mut self,
            _seed: Option<u64>,
            _options: &Options,
        ) -> env_core::Result<(Value, Info)> {
            Ok((Value::Text("ready".into()), Info::new()))
        }

        fn step(&mut self, _action: String) -> env_core::Result<Step<Value>> {
            self.steps += 1;
            assert!(
                self.panic_after.is_none_or(|n| self.steps <= n),
                "probe env told to panic"
            );
            let thread = format!("{:?}", std::thread::current().id());
            Ok(Step {
                obs: Value::Text(thread),
                reward: 0.0,
                terminated: false,
                truncated: false,
                info: Info::new(),
            })
        }

        fn observation_space(&self) -> Space {
            text()
        }

        fn action_space(&self) -> Space {
            text()
        }
    }

    fn text() -> Space {
        Space::Text {
            min_length: 0,
            max_length: 64,
            charset: None,
        }
    }

    fn backend(call_cost: CallCost, panic_after: Option<u32>) -> EnvBackend {
        let mut registry = Registry::new();
        let spec = EnvSpec {
            id: "test/Probe-v0".into(),
            description: String::new(),
            max_episode_steps: None,
            reward_threshold: None,
            nondeterministic: false,
            observation_space: text(),
            action_space: text(),
            default_kwargs: Kwargs::new(),
            call_cost,
        };
        let creator = move |_: &Kwargs| {
            let env = Probe {
                steps: 0,
                panic_after,
            };
            Ok(Box::new(env) as Box<dyn DynEnv>)
        };
        registry
            .register(spec, Arc::new(creator))
            .expect("register the probe env");
        EnvBackend::in_process(Arc::new(registry))
    }

    async fn step_thread(session: &mut EnvSession) -> Result<String, EnvError> {
        match session.step(Value::Text("go".into())).await?.obs {
            Value::Text(t) => Ok(t),
            other => panic!("unexpected observation {other:?}"),
        }
    }

    fn this_thread() -> String {
        let id: ThreadId = std::thread::current().id();
        format!("{id:?}")
    }

    // A current-thread runtime: "in place" is this very thread, a blocking call is any other.
    #[tokio::test]
    async fn cheap_env_calls_run_in_place_and_blocking_ones_on_another_thread() {
        for (cost, in_place) in [(CallCost::Cheap, true), (CallCost::Blocking, false)] {
            let backend = backend(cost, None);
            let mut session = backend
                .make("test/Probe-v0", &Kwargs::new(), 0)
                .await
                .unwrap();
            session.reset(Some(1), Options::new()).await.unwrap();
            let ran_here = step_thread(&mut session).await.unwrap() == this_thread();
            assert_eq!(ran_here, in_place, "{cost:?}");
            session.close().await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_panicking_env_fails_its_call_and_loses_its_session_either_way() {
        for cost in [CallCost::Cheap, CallCost::Blocking] {
            let backend = backend(cost, Some(1));
            let mut session = backend
                .make("test/Probe-v0", &Kwargs::new(), 0)
                .await
                .unwrap();
            session.reset(None, Options::new()).await.unwrap();
            step_thread(&mut session).await.unwrap();
            let err = step_thread(&mut session).await.unwrap_err();
            assert!(
                matches!(&err, EnvError::Infrastructure(m) if m.contains("panicked")),
                "{cost:?}: {err:?}"
            );
            let again = step_thread(&mut session).await.unwrap_err();
            assert!(
                matches!(again, EnvError::ClosedEnvironment),
                "{cost:?}: {again:?}"
            );
            session.close().await.unwrap();
        }
    }
}
