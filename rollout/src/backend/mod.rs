//! Where environments run: in this process (a [`Registry`]) or in `codegym serve` processes reached
//! over gRPC. Episodes see the same [`EnvSession`] API either way, so trajectories do not depend on
//! the backend. In process, envs are made with [`Registry::make_async`]: asynchronous envs (the coding
//! env) hold no thread while they wait, and synchronous ones are adapted by their
//! [`env_core::CallCost`] (in place when cheap, else on the registry's blocking offload). How many
//! programs run at once is the sandbox's own limit, not the engine's. Remotely, a [`pool`] of
//! servers places, health-checks and retries sessions.

pub mod pool;
mod remote;

use std::net::SocketAddr;
use std::sync::Arc;

use env_core::{AsyncEnv, EnvError, Info, Kwargs, Options, Registry, Step, Value};

pub use remote::RemoteBackend;

/// A source of environment sessions.
#[derive(Debug, Clone)]
pub enum EnvBackend {
    /// `Registry::make_async` in this process.
    InProcess(Arc<Registry>),
    /// One or more `codegym serve` instances.
    Remote(RemoteBackend),
}

impl EnvBackend {
    /// Environments from `registry`, in this process.
    pub fn in_process(registry: Arc<Registry>) -> Self {
        EnvBackend::InProcess(registry)
    }

    /// Creates a session of `env_id`. Remotely it goes to the least-loaded healthy server other
    /// than `avoid` (the server a restarted episode lost), and the episode keeps it for its whole
    /// life.
    pub async fn make(
        &self,
        env_id: &str,
        kwargs: &Kwargs,
        avoid: Option<SocketAddr>,
    ) -> Result<EnvSession, EnvError> {
        observed("make", async {
            match self {
                EnvBackend::InProcess(registry) => Ok(EnvSession::Local(
                    registry.make_async(env_id, kwargs).await?,
                )),
                EnvBackend::Remote(remote) => Ok(EnvSession::Remote(Box::new(
                    remote.make(env_id, kwargs, avoid).await?,
                ))),
            }
        })
        .await
    }

    /// The `reset` options that select `task_id`: `{"task_id": ...}`, or the task itself where
    /// the remote backend sends tasks inline.
    pub fn task_options(&self, task_id: &str) -> Result<Options, EnvError> {
        match self {
            EnvBackend::InProcess(_) => {
                let mut options = Options::new();
                options.insert("task_id".into(), serde_json::json!(task_id));
                Ok(options)
            }
            EnvBackend::Remote(remote) => remote.task_options(task_id),
        }
    }

    /// How often an episode may restart after losing its env server (0 in process: nothing to
    /// lose).
    pub fn max_restarts(&self) -> u32 {
        match self {
            EnvBackend::InProcess(_) => 0,
            EnvBackend::Remote(remote) => remote.pool().config().max_restarts,
        }
    }
}

/// One environment instance for one episode. Dropping a call's future (a deadline, cancellation)
/// abandons the env: the episode ends with it.
pub enum EnvSession {
    Local(Box<dyn AsyncEnv>),
    // Boxed: a stream's state is large, and an episode holds its session for its whole life.
    Remote(Box<pool::PooledSession>),
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
    /// The env server the session lives on (remote sessions).
    pub fn server(&self) -> Option<SocketAddr> {
        match self {
            EnvSession::Local(_) => None,
            EnvSession::Remote(r) => Some(r.server()),
        }
    }

    /// The server and why, when the session was lost with its server (the episode may restart).
    pub fn lost(&self) -> Option<(SocketAddr, String)> {
        match self {
            EnvSession::Local(_) => None,
            EnvSession::Remote(r) => r.lost().map(|why| (r.server(), why.to_string())),
        }
    }

    /// Gymnasium's `reset(seed, options) -> (obs, info)`.
    pub async fn reset(
        &mut self,
        seed: Option<u64>,
        options: Options,
    ) -> Result<(Value, Info), EnvError> {
        observed("reset", async {
            match self {
                EnvSession::Local(env) => env.reset(seed, options).await,
                EnvSession::Remote(r) => r.reset(seed, &options).await,
            }
        })
        .await
    }

    /// Gymnasium's `step(action) -> (obs, reward, terminated, truncated, info)`.
    pub async fn step(&mut self, action: Value) -> Result<Step<Value>, EnvError> {
        observed("step", async {
            match self {
                EnvSession::Local(env) => env.step(action).await,
                EnvSession::Remote(r) => r.step(action).await,
            }
        })
        .await
    }

    /// Releases the environment (its sandbox, or the server's session).
    pub async fn close(self) -> Result<(), EnvError> {
        observed("close", async {
            match self {
                EnvSession::Local(mut env) => env.close().await,
                EnvSession::Remote(r) => r.close().await,
            }
        })
        .await
    }
}

/// One env call in an `env_call` span (a child of the episode's), counted and timed in the
/// rollout metrics.
async fn observed<T>(
    op: &'static str,
    call: impl std::future::Future<Output = Result<T, EnvError>>,
) -> Result<T, EnvError> {
    use tracing::Instrument;
    let start = std::time::Instant::now();
    let out = call.instrument(tracing::debug_span!("env_call", op)).await;
    crate::metrics::env_call(op, out.is_ok(), start.elapsed());
    out
}

#[cfg(test)]
mod tests {
    use std::thread::ThreadId;

    use env_core::{CallCost, DynEnv, Env, EnvSpec, Info, Options, Space, Step, Value};

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
            metadata: Default::default(),
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
                .make("test/Probe-v0", &Kwargs::new(), None)
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
                .make("test/Probe-v0", &Kwargs::new(), None)
                .await
                .unwrap();
            session.reset(None, Options::new()).await.unwrap();
            step_thread(&mut session).await.unwrap();
            let err = step_thread(&mut session).await.unwrap_err();
            assert!(matches!(&err, EnvError::Panicked(_)), "{cost:?}: {err:?}");
            let again = step_thread(&mut session).await.unwrap_err();
            assert!(
                matches!(again, EnvError::ClosedEnvironment),
                "{cost:?}: {again:?}"
            );
            session.close().await.unwrap();
        }
    }
}
