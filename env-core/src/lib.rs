//! Gymnasium's API in Rust: the [`Env`] trait and its object-safe [`DynEnv`] form, the asynchronous
//! [`AsyncEnv`] that servers and rollouts call (synchronous envs adapted once, by their
//! [`CallCost`]), spaces, the registry (`make`, `make_async`, `make_vec`), the standard wrappers,
//! vector environments on rayon, and the reference environment `classic/CartPole-v1`.
//!
//! Invariant: env-core does no IO. It spawns nothing, opens no file or socket, and has no async
//! runtime; environments that need IO (the coding envs) live in their own crates.
//!
//! ```
//! use env_core::{Kwargs, Options, Registry, Value};
//!
//! let mut registry = Registry::new();
//! env_core::register_classic(&mut registry)?;
//! let mut env = registry.make("classic/CartPole-v1", &Kwargs::new())?;
//! let (_obs, _info) = env.reset(Some(42), &Options::new())?;
//! let step = env.step(Value::Discrete(1))?;
//! assert_eq!(step.reward, 1.0);
//! assert!(!step.truncated);
//! # Ok::<(), env_core::EnvError>(())
//! ```
//!
//! Note: for a typed env (one implementing [`Env`]) with both [`Env`] and [`DynEnv`] in scope, method
//! calls are ambiguous; import only the trait you call through, or box the env as `Box<dyn DynEnv>`.

mod async_env;
pub mod contract;
mod env;
pub mod envs;
mod error;
mod offload;
mod registry;
mod seeding;
mod space;
mod spec;
mod value;
mod vector;
pub mod wrappers;

pub use async_env::{AsyncEnv, EnvFuture};
pub use env::{DynEnv, Env, Info, Options, Step, ValueEnv};
pub use envs::register_classic;
pub use error::{EnvError, Result};
pub use offload::{Offload, ThreadOffload};
pub use registry::{
    AsyncEnvCreator, AsyncMaker, BatchEvaluator, EnvCreator, EvalItem, EvalStream, Kwargs,
    MAX_EPISODE_STEPS_KWARG, MAX_NUM_ENVS, Registry, ResetStepEvaluator, TaskInfo, TaskLister,
    TaskPage,
};
pub use seeding::{ChaCha8Rng, entropy_rng, seeded_rng};
pub use space::{BoxSpace, DType, Space};
pub use spec::{CallCost, EnvId, EnvSpec};
pub use value::{
    DroppedVariable, ExecutionResult, OutputValue, ProgramError, ReturnValue, Tensor, Value,
    Variables,
};
pub use vector::{VectorEnv, VectorStep, stack_obs};
