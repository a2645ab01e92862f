//! `Autoreset`: Gymnasium 1.x's next-step autoreset.

use crate::{Env, Info, Options, Result, Space, Step};

/// After a terminated or truncated step, the *next* `step` ignores its action, resets the inner env
/// (continuing its random stream, no seed) and returns the reset observation and info with reward 0,
/// `terminated = false` and `truncated = false`. This is Gymnasium 1.x's `Autoreset` (next-step mode).
#[derive(Debug)]
pub struct Autoreset<E> {
    env: E,
    autoreset: bool,
}

impl<E: Env> Autoreset<E> {
    pub fn new(env: E) -> Self {
        Self {
            env,
            autoreset: false,
        }
    }

    pub fn inner(&self) -> &E {
        &self.env
    }

    pub fn into_inner(self) -> E {
        self.env
    }
}

impl<E: Env> Env for Autoreset<E> {
    type Obs = E::Obs;
    type Action = E::Action;

    fn reset(&mut self, seed: Option<u64>, options: &Options) -> Result<(E::Obs, Info)> {
        self.autoreset = false;
        self.env.reset(seed, options)
    }

    fn step(&mut self, action: E::Action) -> Result<Step<E::Obs>> {
        let step = if self.autoreset {
            let (obs, info) = self.env.reset(None, &Options::new())?;
            Step {
                obs,
                reward: 0.0,
                terminated: false,
                truncated: false,
                info,
            }
        } else {
            self.env.step(action)?
        };
        self.autoreset = step.is_final();
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
