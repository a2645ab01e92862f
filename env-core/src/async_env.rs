//! The asynchronous environment API: Gymnasium's `reset`/`step`/`close` returning futures.
//!
//! Environments that wait on the outside world (a sandboxed process, a remote server) implement
//! [`AsyncEnv`] natively, so a waiting step holds no thread. Synchronous [`crate::Env`]s are adapted
//! once, in [`crate::Registry::make_async`] (see `offload.rs`): cheap ones run in place, the others on a
//! thread that may block. Servers and rollout engines call every env through this trait.
//!
//! A trait whose methods return futures needs no runtime: env-core still does no IO. The futures are
//! boxed (`EnvFuture`) so that the trait is object-safe; one allocation per call is noise next to what
//! an env call costs.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;

use futures::FutureExt;

use crate::{EnvError, Info, Options, Result, Space, Step, Value};

/// The future of one env call.
pub type EnvFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// Gymnasium's environment API over [`Value`]s, with calls that return futures.
///
/// The contract is [`crate::Env`]'s. Callers await one call at a time per env (`&mut self`). Dropping a
/// call's future cancels it; an env whose state a cancelled call could leave half-changed must say so,
/// and callers that may give up on a call (a client deadline) should let it finish in the background.
pub trait AsyncEnv: Send {
    /// Starts a new episode: `(obs, info)`.
    fn reset(&mut self, seed: Option<u64>, options: Options) -> EnvFuture<'_, (Value, Info)>;

    /// Advances the episode by one action.
    fn step(&mut self, action: Value) -> EnvFuture<'_, Step<Value>>;

    /// Releases resources; later calls fail with [`EnvError::ClosedEnvironment`].
    fn close(&mut self) -> EnvFuture<'_, ()>;

    fn observation_space(&self) -> Space;

    fn action_space(&self) -> Space;
}

impl AsyncEnv for Box<dyn AsyncEnv> {
    fn reset(&mut self, seed: Option<u64>, options: Options) -> EnvFuture<'_, (Value, Info)> {
        (**self).reset(seed, options)
    }

    fn step(&mut self, action: Value) -> EnvFuture<'_, Step<Value>> {
        (**self).step(action)
    }

    fn close(&mut self) -> EnvFuture<'_, ()> {
        (**self).close()
    }

    fn observation_space(&self) -> Space {
        (**self).observation_space()
    }

    fn action_space(&self) -> Space {
        (**self).action_space()
    }
}

/// The outermost layer of every env from [`crate::Registry::make_async`]: a panic inside a call fails
/// that call with [`EnvError::Panicked`], and every later call with [`EnvError::ClosedEnvironment`]
/// (the env's state is unknown; it is dropped at the next call). Nothing else is affected: one env's
/// bug costs one session.
pub(crate) struct PanicGuard {
    env: Option<Box<dyn AsyncEnv>>,
    panicked: bool,
    spaces: (Space, Space),
}

impl PanicGuard {
    pub(crate) fn boxed(env: Box<dyn AsyncEnv>) -> Box<dyn AsyncEnv> {
        let spaces = (env.observation_space(), env.action_space());
        Box::new(PanicGuard {
            env: Some(env),
            panicked: false,
            spaces,
        })
    }

    fn guarded<'a, T: Send + 'a>(
        &'a mut self,
        call: impl FnOnce(&'a mut Box<dyn AsyncEnv>) -> EnvFuture<'a, T>,
    ) -> EnvFuture<'a, T> {
        if self.panicked {
            self.env = None;
        }
        let Some(env) = self.env.as_mut() else {
            return Box::pin(std::future::ready(Err(EnvError::ClosedEnvironment)));
        };
        // Disjoint borrows: the call's future holds the env, this future the flag.
        let panicked = &mut self.panicked;
        let fut = match std::panic::catch_unwind(AssertUnwindSafe(|| call(env))) {
            Ok(fut) => fut,
            Err(payload) => {
                *panicked = true;
                let err = EnvError::Panicked(panic_message(payload.as_ref()));
                return Box::pin(std::future::ready(Err(err)));
            }
        };
        Box::pin(async move {
            match AssertUnwindSafe(fut).catch_unwind().await {
                Ok(result) => result,
                Err(payload) => {
                    *panicked = true;
                    Err(EnvError::Panicked(panic_message(payload.as_ref())))
                }
            }
        })
    }
}

/// The text of a panic payload (`&str` or `String`), for the error message.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_string())
}

impl AsyncEnv for PanicGuard {
    fn reset(&mut self, seed: Option<u64>, options: Options) -> EnvFuture<'_, (Value, Info)> {
        self.guarded(move |env| env.reset(seed, options))
    }

    fn step(&mut self, action: Value) -> EnvFuture<'_, Step<Value>> {
        self.guarded(move |env| env.step(action))
    }

    fn close(&mut self) -> EnvFuture<'_, ()> {
        if self.env.is_none() || self.panicked {
            // Closing twice, or after a panic, is not an error.
            self.env = None;
            return Box::pin(std::future::ready(Ok(())));
        }
        self.guarded(|env| env.close())
    }

    fn observation_space(&self) -> Space {
        self.spaces.0.clone()
    }

    fn action_space(&self) -> Space {
        self.spaces.1.clone()
    }
}
