//! `OrderEnforcing`: rejects calls made in an order Gymnasium forbids.

use crate::{AsyncEnv, Env, EnvError, EnvFuture, Info, Options, Result, Space, Step, Value};

/// Enforces the call order of an episode:
/// - `step` before the first `reset` fails with [`EnvError::ResetNeeded`];
/// - `step` after a terminated or truncated step, without a `reset` in between, fails with
///   [`EnvError::EpisodeEnded`] (stricter than Gymnasium, which silently steps a finished episode);
/// - `reset` or `step` after `close` fails with [`EnvError::ClosedEnvironment`]; `close` is idempotent.
#[derive(Debug)]
pub struct OrderEnforcing<E> {
    env: E,
    has_reset: bool,
    episode_ended: bool,
    closed: bool,
}

impl<E> OrderEnforcing<E> {
    pub fn new(env: E) -> Self {
        Self {
            env,
            has_reset: false,
            episode_ended: false,
            closed: false,
        }
    }

    /// Whether `reset` has been called successfully at least once.
    pub fn has_reset(&self) -> bool {
        self.has_reset
    }

    pub fn inner(&self) -> &E {
        &self.env
    }

    pub fn into_inner(self) -> E {
        self.env
    }
}

impl<E> OrderEnforcing<E> {
    /// Whether a call may go through to the env now; `step` also needs a live episode.
    fn check(&self, stepping: bool) -> Result<()> {
        if self.closed {
            return Err(EnvError::ClosedEnvironment);
        }
        if stepping && !self.has_reset {
            return Err(EnvError::ResetNeeded);
        }
        if stepping && self.episode_ended {
            return Err(EnvError::EpisodeEnded);
        }
        Ok(())
    }

    fn after_reset(&mut self) {
        self.has_reset = true;
        self.episode_ended = false;
    }
}

impl<E: Env> Env for OrderEnforcing<E> {
    type Obs = E::Obs;
    type Action = E::Action;

    fn reset(&mut self, seed: Option<u64>, options: &Options) -> Result<(E::Obs, Info)> {
        self.check(false)?;
        let out = self.env.reset(seed, options)?;
        self.after_reset();
        Ok(out)
    }

    fn step(&mut self, action: E::Action) -> Result<Step<E::Obs>> {
        self.check(true)?;
        let step = self.env.step(action)?;
        self.episode_ended = step.is_final();
        Ok(step)
    }

    fn close(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.closed, true) {
            return Ok(());
        }
        self.env.close()
    }

    fn observation_space(&self) -> Space {
        self.env.observation_space()
    }

    fn action_space(&self) -> Space {
        self.env.action_space()
    }
}

/// The same rules for asynchronous envs.
impl<E: AsyncEnv> AsyncEnv for OrderEnforcing<E> {
    fn reset(&mut self, seed: Option<u64>, options: Options) -> EnvFuture<'_, (Value, Info)> {
        Box::pin(async move {
            self.check(false)?;
            let out = self.env.reset(seed, options).await?;
            self.after_reset();
            Ok(out)
        })
    }

    fn step(&mut self, action: Value) -> EnvFuture<'_, Step<Value>> {
        Box::pin(async move {
            self.check(true)?;
            let step = self.env.step(action).await?;
            self.episode_ended = step.is_final();
            Ok(step)
        })
    }

    fn close(&mut self) -> EnvFuture<'_, ()> {
        Box::pin(async move {
            if std::mem::replace(&mut self.closed, true) {
                return Ok(());
            }
            self.env.close().await
        })
    }

    fn observation_space(&self) -> Space {
        self.env.observation_space()
    }

    fn action_space(&self) -> Space {
        self.env.action_space()
    }
}
