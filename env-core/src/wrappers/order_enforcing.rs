//! `OrderEnforcing`: rejects calls made in an order Gymnasium forbids.

use crate::{Env, EnvError, Info, Options, Result, Space, Step};

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

impl<E: Env> OrderEnforcing<E> {
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

impl<E: Env> Env for OrderEnforcing<E> {
    type Obs = E::Obs;
    type Action = E::Action;

    fn reset(&mut self, seed: Option<u64>, options: &Options) -> Result<(E::Obs, Info)> {
        if self.closed {
            return Err(EnvError::ClosedEnvironment);
        }
        let out = self.env.reset(seed, options)?;
        self.has_reset = true;
        self.episode_ended = false;
        Ok(out)
    }

    fn step(&mut self, action: E::Action) -> Result<Step<E::Obs>> {
        if self.closed {
            return Err(EnvError::ClosedEnvironment);
        }
        if !self.has_reset {
            return Err(EnvError::ResetNeeded);
        }
        if self.episode_ended {
            return Err(EnvError::EpisodeEnded);
        }
        let step = self.env.step(action)?;
        self.episode_ended = step.is_final();
        Ok(step)
    }

    fn close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        // Marked closed even if the inner close fails: a half-closed env must not be stepped again.
        self.closed = true;
        self.env.close()
    }

    fn observation_space(&self) -> Space {
        self.env.observation_space()
    }

    fn action_space(&self) -> Space {
        self.env.action_space()
    }
}
