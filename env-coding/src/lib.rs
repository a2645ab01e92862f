//! Coding environments (`codegym/Python-v0`): every step runs LLM-written Python in a real sandbox and
//! computes an honest reward from the exit code and the output.
//!
//! - [`register`] creates one shared [`sandbox::Sandbox`] and registers the env and its batch
//!   evaluator in an `env_core::Registry`.
//! - [`tasks`] loads task sets (native JSONL, HumanEval, MBPP); [`reward`] scores programs;
//!   [`completions`] scores completion files with pass@k and checks reference solutions. Finding
//!   the code in model text is the `code-extract` crate's (shared with the rollout engine).
//! - [`lang`] is the table of the other languages (toolchains from Debian packages, compile and run
//!   commands, the compiled-artifact cache); [`judge`] judges programs in any of them on
//!   stdin/stdout tests (issue 14).

mod batch;
pub mod completions;
mod config;
pub mod data;
pub mod differential;
mod env;
pub mod host_tools;
pub mod judge;
pub mod lang;
pub mod packages;
mod register;
pub mod reward;
pub mod sandbox;
mod shared;
pub mod tasks;
pub mod tools;
mod verdicts;

pub use code_extract::ExtractMode;
pub use config::{CodingConfig, Mode};
pub use env::{CodingEnv, MAX_TEXT_LEN};
pub use register::{CodingError, PYTHON_ENV_ID, register};
