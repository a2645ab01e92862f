//! Rollouts: many multi-turn episodes of an LLM writing code against codegym environments, run
//! concurrently against OpenAI-compatible endpoints, written as a resumable JSONL dataset of
//! [`dataset::record::TrajectoryRecord`]s.
//!
//! Layers, bottom up: [`dataset`] (the record format and the append-only file), [`client`] (the chat
//! completions client with retries), [`backend`] (in-process or remote environments), [`episode`]
//! (one episode's loop), [`runner`] (scheduling, seeds, cancellation) and [`summary`]. [`fake_llm`]
//! is a real HTTP server that imitates an OpenAI endpoint for tests and benchmarks.

pub mod backend;
pub mod client;
pub mod config;
pub mod dataset;
pub mod episode;
pub mod fake_llm;
pub mod progress;
pub mod runner;
pub mod seed;
pub mod summary;

pub use backend::EnvBackend;
pub use config::RolloutConfig;
pub use runner::{RolloutError, run};
pub use summary::Summary;
