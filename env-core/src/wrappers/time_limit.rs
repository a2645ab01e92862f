//! `TimeLimit`: truncates episodes after a fixed number of steps (Gymnasium 1.x semantics).

use crate::{AsyncEnv, Env, EnvError, EnvFuture, Info, Options, Result, Space, Step, Value};

/// Sets `truncated = true` once `max_episode_steps` steps have elapsed since the last `reset`.
///
/// As in Gymnasium 1.x, truncation is set whenever `elapsed >= max`, even on a step that also
/// terminates: the two flags are independent facts about the transition.
#[derive(Debug)]
pub struct TimeLimit<E> {
    env: E,
    max_episode_steps: u32,
    elapsed_steps: u32,
}

impl<E> TimeLimit<E> {
    /// Fails with [`EnvError::InvalidKwargs`] when `max_episode_steps` is 0, which Gymnasium rejects.
    pub fn new(env: E, max_episode_steps: u32) -> Result<Self> {
        if max_episode_steps == 0 {
            return Err(EnvError::InvalidKwargs(
                "max_episode_steps must be a positive integer".into(),
            ));
        }
        Ok(Self {
            env,
            max_episode_steps,
            elapsed_steps: 0,
        })
    }

    pub fn max_episode_steps(&self) -> u32 {
        self.max_episode_steps
    }

    /// Steps taken since the last `reset`.
    pub fn elapsed_steps(&self) -> u32 {
        self.elapsed_steps
    }

    pub fn inner(&self) -> &E {
        &self.env
    }

    pub fn into_inner(self) -> E {
        self.env
    }
}

impl<E> TimeLimit<E> {
    /// Counts a step and truncates it when the budget is spent.
    fn count<O>(&mut self, mut step: Step<O>) -> Step<O> {
        self.elapsed_steps = self.elapsed_steps.saturating_add(1);
        if self.elapsed_steps >= self.max_episode_steps {
            step.truncated = true;
        }
        step
    }
}

impl<E: Env> Env for TimeLimit<E> {
    type Obs = E::Obs;
    type Action = E::Action;

    fn reset(&mut self, seed: Option<u64>, options: &Options) -> Result<(E::Obs, Info)> {
        let out = self.env.reset(seed, options)?;
        self.elapsed_steps = 0;
        Ok(out)
    }

    fn step(&mut self, action: E::Action) -> Result<Step<E::Obs>> {
        let step = self.env.step(action)?;
        Ok(self.count(step))
    }

    fn close(&mut self) -> Result<()> {
        self.env.close()
    }

    fn observation_space(&self) -> Space {
        self.env.observation_space()
    }

    fn action_space(&self) -> Space {
        self.env.action_space()
    }
}

/// The same limit for asynchronous envs.
impl<E: AsyncEnv> AsyncEnv for TimeLimit<E> {
    fn reset(&mut self, seed: Option<u64>, options: Options) -> EnvFuture<'_, (Value, Info)> {
        Box::pin(async move {
            let out = self.env.reset(seed, options).await?;
            self.elapsed_steps = 0;
            Ok(out)
        })
    }

    fn step(&mut self, action: Value) -> EnvFuture<'_, Step<Value>> {
        Box::pin(async move {
            let step = self.env.step(action).await?;
            Ok(self.count(step))
        })
    }

    fn close(&mut self) -> EnvFuture<'_, ()> {
        self.env.close()
    }

    fn observation_space(&self) -> Space {
        self.env.observation_space()
    }

    fn action_space(&self) -> Space {
        self.env.action_space()
    }
}
