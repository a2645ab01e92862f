//! Gymnasium's API in Rust: the [`Env`] trait and its object-safe [`DynEnv`] form, spaces, the
//! registry (`make`, `make_vec`), the standard wrappers, vector environments on rayon, and the
//! reference environment `classic/CartPole-v1`.
//!
//! Invariant: env-core does no IO. It spawns nothing, opens no file or socket, and has no async
//! runtime; environments that need IO (the coding envs) live in their own crates.

mod env;
mod error;
mod spec;
mod space;
mod value;

pub use env::{DynEnv, Env, Info, Options, Step};
pub use error::{EnvError, Result};
pub use space::{BoxSpace, DType, Space};
pub use spec::{EnvId, EnvSpec};
pub use value::{ExecutionResult, Tensor, Value};
