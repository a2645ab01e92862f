//! Coding environments (`codegym/Code-v0`, formerly `codegym/Python-v0`, still an alias): every
//! step runs LLM-written code in a real sandbox and computes an honest reward from the exit code and
//! the output.
//!
//! - [`register`] creates one shared `codegym_sandbox::Sandbox` and registers the env and its
//!   batch evaluator in an `env_core::Registry`; [`new_sandbox`] is how everything else makes one
//!   (it hands the sandbox the trusted programs the rewards run).
//! - [`tasks`] loads task sets (native JSONL, HumanEval, MBPP); [`reward`] scores programs;
//!   [`completions`] scores completion files with pass@k and checks reference solutions. Finding
//!   the code in model text is the `code-extract` crate's (shared with the rollout engine).
//! - [`judge`] judges programs in any language the sandbox runs on stdin/stdout tests.
//!
//! Running programs is the `codegym-sandbox` crate's: this crate never starts a process.

mod action;
mod batch;
pub mod completions;
mod config;
pub mod data;
pub mod differential;
mod env;
pub mod host_tools;
pub mod judge;
mod register;
pub mod reward;
mod shared;
pub mod tasks;
pub mod tools;
mod verdicts;

pub use code_extract::ExtractMode;
pub use config::{CodingConfig, Mode};
pub use env::{CodingEnv, MAX_TEXT_LEN};
pub use register::{CODE_ENV_ID, CodingError, PYTHON_ENV_ID, new_sandbox, register};
