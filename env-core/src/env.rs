//! The `Env` trait in Gymnasium's vocabulary, and its object-safe dynamic form `DynEnv`.
//!
//! `Env` is typed (CartPole observes an `Array1<f32>` and acts with a `Discrete` index); `DynEnv` speaks
//! [`Value`] so that the registry, the server and wrappers can hold any environment. Every `Env` whose
//! types convert to and from `Value` is a `DynEnv` through a blanket impl, and `Box<dyn DynEnv>` is an
//! `Env` again, so wrappers written once over `Env` apply to both.

use crate::{EnvError, Result, Space, Value};

/// Gymnasium's `info` dict.
pub type Info = serde_json::Map<String, serde_json::Value>;

/// Gymnasium's `options` dict of `reset`.
pub type Options = serde_json::Map<String, serde_json::Value>;

/// The result of one `step`: `(obs, reward, terminated, truncated, info)`.
///
/// `terminated` means the MDP reached a terminal state; `truncated` means the episode was cut short
/// (time limit) though the state is not terminal. There is deliberately no single `done`.
#[derive(Debug, Clone, PartialEq)]
pub struct Step<O> {
    pub obs: O,
    pub reward: f64,
    pub terminated: bool,
    pub truncated: bool,
    pub info: Info,
}

impl<O> Step<O> {
    /// Whether the episode is over, either way.
    pub fn is_final(&self) -> bool {
        self.terminated || self.truncated
    }

    /// Maps the observation, keeping everything else.
    pub fn map_obs<P>(self, f: impl FnOnce(O) -> P) -> Step<P> {
        Step {
            obs: f(self.obs),
            reward: self.reward,
            terminated: self.terminated,
            truncated: self.truncated,
            info: self.info,
        }
    }
}

/// A Gymnasium environment with typed observations and actions.
///
/// Calls are synchronous, as in Gymnasium: async callers run them on a blocking thread or rayon.
pub trait Env: Send {
    type Obs;
    type Action;

    /// Starts a new episode. `seed` reseeds the environment's generator; `None` continues its stream.
    fn reset(&mut self, seed: Option<u64>, options: &Options) -> Result<(Self::Obs, Info)>;

    /// Advances the episode by one action.
    fn step(&mut self, action: Self::Action) -> Result<Step<Self::Obs>>;

    /// Releases resources. Later calls fail with [`EnvError::ClosedEnvironment`] where the env tracks it.
    fn close(&mut self) -> Result<()> {
        Ok(())
    }

    fn observation_space(&self) -> Space;

    fn action_space(&self) -> Space;
}

/// The object-safe form of [`Env`]: observations and actions are [`Value`]s.
pub trait DynEnv: Send {
    fn reset(&mut self, seed: Option<u64>, options: &Options) -> Result<(Value, Info)>;
    fn step(&mut self, action: Value) -> Result<Step<Value>>;
    fn close(&mut self) -> Result<()>;
    fn observation_space(&self) -> Space;
    fn action_space(&self) -> Space;
}

impl<E> DynEnv for E
where
    E: Env,
    E::Obs: Into<Value>,
    E::Action: TryFrom<Value, Error = EnvError>,
{
    fn reset(&mut self, seed: Option<u64>, options: &Options) -> Result<(Value, Info)> {
        let (obs, info) = Env::reset(self, seed, options)?;
        Ok((obs.into(), info))
    }

    fn step(&mut self, action: Value) -> Result<Step<Value>> {
        let action = E::Action::try_from(action)?;
        Ok(Env::step(self, action)?.map_obs(Into::into))
    }

    fn close(&mut self) -> Result<()> {
        Env::close(self)
    }

    fn observation_space(&self) -> Space {
        Env::observation_space(self)
    }

    fn action_space(&self) -> Space {
        Env::action_space(self)
    }
}

/// A boxed dynamic env is an `Env` over `Value`s, so every wrapper applies to it.
impl Env for Box<dyn DynEnv> {
    type Obs = Value;
    type Action = Value;

    fn reset(&mut self, seed: Option<u64>, options: &Options) -> Result<(Value, Info)> {
        (**self).reset(seed, options)
    }

    fn step(&mut self, action: Value) -> Result<Step<Value>> {
        (**self).step(action)
    }

    fn close(&mut self) -> Result<()> {
        (**self).close()
    }

    fn observation_space(&self) -> Space {
        (**self).observation_space()
    }

    fn action_space(&self) -> Space {
        (**self).action_space()
    }
}

/// Adapts an [`Env`] over [`Value`]s (typically a wrapper around a `Box<dyn DynEnv>`) to [`DynEnv`].
///
/// The blanket `DynEnv` impl cannot cover such envs: for `Action = Value`, `Value: TryFrom<Value>` is
/// std's reflexive conversion whose error is `Infallible`, not [`EnvError`].
#[derive(Debug)]
pub struct ValueEnv<E>(pub E);

impl<E> ValueEnv<E>
where
    E: Env<Obs = Value, Action = Value> + 'static,
{
    /// Boxes `env` as a `DynEnv`.
    pub fn boxed(env: E) -> Box<dyn DynEnv> {
        Box::new(ValueEnv(env))
    }
}

impl<E> DynEnv for ValueEnv<E>
where
    E: Env<Obs = Value, Action = Value>,
{
    fn reset(&mut self, seed: Option<u64>, options: &Options) -> Result<(Value, Info)> {
        self.0.reset(seed, options)
    }

    fn step(&mut self, action: Value) -> Result<Step<Value>> {
        self.0.step(action)
    }

    fn close(&mut self) -> Result<()> {
        self.0.close()
    }

    fn observation_space(&self) -> Space {
        self.0.observation_space()
    }

    fn action_space(&self) -> Space {
        self.0.action_space()
    }
}
