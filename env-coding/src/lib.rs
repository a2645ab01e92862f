//! Coding environments (`codegym/Code-v0`, formerly `codegym/Python-v0`, still an alias): every
//! step runs LLM-written code in a real sandbox and computes an honest reward from the exit code and
//! the output.
//!
//! - [`scoring`] is the one scoring engine: [`Scorer::score`] turns (task, program) into a reward
//!   and its breakdown for every surface (env steps, `Evaluate`, the CLI); [`new_sandbox`] is how
//!   anything that scores makes its sandbox (it hands it the trusted programs the rewards run).
//! - [`register`] builds one [`Scorer`] and registers the env and its batch evaluator, both
//!   scoring through it, in an `env_core::Registry`.
//! - [`tasks`] loads task sets (native JSONL, HumanEval, MBPP); [`reward`] scores programs;
//!   [`completions`] scores completion files with pass@k and checks reference solutions. Finding
//!   the code in model text is the `code-extract` crate's (shared with the rollout engine).
//! - [`judge`] judges programs in any language the sandbox runs on stdin/stdout tests.
//! - [`provenance`]: what produced each verdict, made by the scorer; [`rescore`]: a stored
//!   rollout's programs scored again, every change explained (`codegym rescore`).
//! - [`inputs`]: inputs derived from a task's tests and where a program disagrees with the
//!   reference on them; [`cross_check`]: rewarded programs compared with their task's reference
//!   (`rollout --cross-check`, `rescore --cross-check`).
//!
//! - [`repo`]: repository (SWE-style) tasks: a repository prepared once, an episode's
//!   copy-on-write copy, its diff, and a patch scored in a fresh copy against hidden tests.
//!
//! Running programs is the `codegym-sandbox` crate's: this crate never starts a process.

mod action;
pub mod audit;
mod batch;
pub mod completions;
mod config;
pub mod cross_check;
pub mod data;
pub mod differential;
mod env;
pub mod host_tools;
pub mod inputs;
pub mod judge;
pub mod provenance;
mod register;
pub mod repo;
pub mod rescore;
pub mod reward;
pub mod scoring;
mod shared;
pub mod tasks;
pub mod timeouts;
pub mod tools;
mod verdicts;

pub use code_extract::ExtractMode;
pub use config::{CodingConfig, Mode};
pub use env::{CodingEnv, MAX_TEXT_LEN};
pub use register::{CODE_ENV_ID, CodingError, PYTHON_ENV_ID, register};
pub use scoring::{Scored, Scorer, ScorerError, Submission, new_sandbox};
