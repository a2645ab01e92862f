//! Coding environments (`codegym/Python-v0`): every step runs LLM-written Python in a real sandbox and
//! computes an honest reward from the exit code and the output.
//!
//! - [`register`] creates one shared [`sandbox::Sandbox`] and registers the env and its batch
//!   evaluator in an `env_core::Registry`.
//! - [`tasks`] loads task sets (native JSONL, HumanEval, MBPP); [`reward`] scores programs;
//!   [`completions`] scores completion files with pass@k and checks reference solutions. Finding
//!   the code in model text is the `code-extract` crate's (shared with the rollout engine).

mod batch;
pub mod completions;
mod config;
mod env;
pub mod host_tools;
mod register;
pub mod reward;
pub mod sandbox;
mod shared;
pub mod tasks;
pub mod tools;

pub use code_extract::ExtractMode;
pub use config::{CodingConfig, Mode};
pub use env::{CodingEnv, MAX_TEXT_LEN};
pub use register::{CodingError, PYTHON_ENV_ID, register};
