//! `TransformReward`: applies a function to every reward.

use crate::{Env, Info, Options, Result, Space, Step};

/// Replaces each step's reward `r` with `f(r)`.
pub struct TransformReward<E, F> {
    env: E,
    f: F,
}

impl<E, F> std::fmt::Debug for TransformReward<E, F>
where
    E: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransformReward")
            .field("env", &self.env)
            .finish_non_exhaustive()
    }
}

impl<E, F> TransformReward<E, F>
where
    E: Env,
    F: Fn(f64) -> f64 + Send,
{
    pub fn new(env: E, f: F) -> Self {
        Self { env, f }
    }

    pub fn inner(&self) -> &E {
        &self.env
    }

    pub fn into_inner(self) -> E {
        self.env
    }
}

impl<E, F> Env for TransformReward<E, F>
where
    E: Env,
    F: Fn(f64) -> f64 + Send,
{
    type Obs = E::Obs;
    type Action = E::Action;

    fn reset(&mut self, seed: Option<u64>, options: &Options) -> Result<(E::Obs, Info)> {
        self.env.reset(seed, options)
    }

    fn step(&mut self, action: E::Action) -> Result<Step<E::Obs>> {
        let mut step = self.env.step(action)?;
        step.reward = (self.f)(step.reward);
        Ok(step)
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
