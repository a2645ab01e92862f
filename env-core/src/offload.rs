//! Synchronous envs behind the asynchronous API: the one adapter, driven by [`CallCost`].
//!
//! A [`CallCost::Cheap`] env (pure computation of microseconds, e.g. CartPole) is called in place:
//! handing it to another thread would cost more than the call. Any other synchronous env is called on a
//! thread that may block, obtained from an [`Offload`]: env-core owns no runtime, so whoever builds the
//! [`crate::Registry`] says where blocking calls go (the `codegym` binary: tokio's blocking pool). The
//! default starts a thread per call, which is correct anywhere and fast enough for tests.

use std::sync::Arc;

use futures::channel::oneshot;

use crate::{
    AsyncEnv, CallCost, DynEnv, EnvError, EnvFuture, Info, Options, Result, Space, Step, Value,
};

/// Where synchronous env calls that may block are run.
pub trait Offload: Send + Sync {
    /// Runs `job` on a thread that may block. If the job cannot be started it is dropped, and the
    /// caller sees the call fail.
    fn offload(&self, job: Box<dyn FnOnce() + Send>);
}

/// The default [`Offload`]: a new thread for every call.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadOffload;

impl Offload for ThreadOffload {
    fn offload(&self, job: Box<dyn FnOnce() + Send>) {
        if let Err(e) = std::thread::Builder::new()
            .name("env-call".into())
            .spawn(job)
        {
            tracing::warn!(error = %e, "cannot start a thread for an env call");
        }
    }
}

/// Runs `f` through `offload` and waits for it without blocking. A panic in `f` (or a job that never
/// started) is [`EnvError::Panicked`].
pub(crate) async fn run_offloaded<T: Send + 'static>(
    offload: &dyn Offload,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    let (tx, rx) = oneshot::channel();
    offload.offload(Box::new(move || {
        // The receiver may be gone (the caller gave up); the result is then dropped here.
        let _ = tx.send(f());
    }));
    rx.await.map_err(|_| {
        EnvError::Panicked("the env call panicked on its thread (or could not be started)".into())
    })
}

/// A synchronous env (already wrapped by `make`) seen through [`AsyncEnv`].
pub(crate) struct SyncAdapter {
    /// `None` while a call runs on another thread, after a call was abandoned there, or after `close`.
    env: Option<Box<dyn DynEnv>>,
    cost: CallCost,
    offload: Arc<dyn Offload>,
    spaces: (Space, Space),
}

impl SyncAdapter {
    pub(crate) fn boxed(
        env: Box<dyn DynEnv>,
        cost: CallCost,
        offload: Arc<dyn Offload>,
    ) -> Box<dyn AsyncEnv> {
        let spaces = (env.observation_space(), env.action_space());
        Box::new(SyncAdapter {
            env: Some(env),
            cost,
            offload,
            spaces,
        })
    }

    /// Runs `f` on the env where its cost says. A blocking call moves the env to the other thread and
    /// back; if the caller stops waiting, the env is dropped there once `f` returns and later calls
    /// fail with [`EnvError::ClosedEnvironment`].
    fn call<T: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut dyn DynEnv) -> Result<T> + Send + 'static,
    ) -> EnvFuture<'_, T> {
        if self.cost == CallCost::Cheap {
            let out = match self.env.as_mut() {
                Some(env) => f(env.as_mut()),
                None => Err(EnvError::ClosedEnvironment),
            };
            return Box::pin(std::future::ready(out));
        }
        let Some(mut env) = self.env.take() else {
            return Box::pin(std::future::ready(Err(EnvError::ClosedEnvironment)));
        };
        let offload = self.offload.clone();
        Box::pin(async move {
            let (env, out) = run_offloaded(offload.as_ref(), move || {
                let out = f(env.as_mut());
                (env, out)
            })
            .await?;
            self.env = Some(env);
            out
        })
    }
}

impl AsyncEnv for SyncAdapter {
    fn reset(&mut self, seed: Option<u64>, options: Options) -> EnvFuture<'_, (Value, Info)> {
        self.call(move |env| env.reset(seed, &options))
    }

    fn step(&mut self, action: Value) -> EnvFuture<'_, Step<Value>> {
        self.call(move |env| env.step(action))
    }

    fn close(&mut self) -> EnvFuture<'_, ()> {
        if self.env.is_none() {
            return Box::pin(std::future::ready(Ok(())));
        }
        self.call(|env| env.close())
    }

    fn observation_space(&self) -> Space {
        self.spaces.0.clone()
    }

    fn action_space(&self) -> Space {
        self.spaces.1.clone()
    }
}
