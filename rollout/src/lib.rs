//! Rollouts: many multi-turn episodes of an LLM writing code against codegym environments, run
//! concurrently against OpenAI-compatible endpoints, written as a resumable JSONL dataset of
//! [`dataset::record::TrajectoryRecord`]s.
//!
//! Layers, bottom up: [`dataset`] (the append-only file of records whose schema is the `trajectory`
//! crate's, and its manifest), [`client`] (the chat completions client with retries, and its
//! settings), [`backend`] (in-process or remote environments), [`config`] (a run's settings; the
//! prompt templates are the `prompts` crate's), [`episode`] (one episode: one module per mode over
//! shared primitives), [`cross_check`] (rewarded programs compared with the tasks' references,
//! off the episodes' critical path), [`runner`] (scheduling, seeds, cancellation) and
//! [`summary`]; [`metrics`]
//! names what the engine reports to the `metrics` facade. No module imports one that imports it
//! (`tests/module_graph.rs`). The engine knows no environment: code is found in model text by the
//! `code-extract` crate, as the coding env does. Tests and benchmarks talk to the `fake-llm`
//! crate's server instead of a paid endpoint.

pub mod backend;
pub mod client;
pub mod config;
pub mod cross_check;
pub mod dataset;
pub mod episode;
// Issue 12: the host tools the engine serves its in-process envs (program-of-thought mode).
pub mod host_tools;
pub mod metrics;
pub mod progress;
pub mod runner;
pub mod seed;
pub mod summary;

pub use backend::EnvBackend;
pub use config::RolloutConfig;
pub use cross_check::CrossCheck;
pub use runner::{RolloutError, run, run_checked};
pub use summary::Summary;
