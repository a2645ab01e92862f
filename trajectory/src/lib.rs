//! The project's data files, and the one way they reach disk and come back.
//!
//! - [`record`]: the trajectory record, one JSON line per episode of a rollout dataset, and its
//!   [`SCHEMA_VERSION`] (every change listed in the crate's `CHANGELOG.md`). Writers (the rollout
//!   engine) and readers share these types, so neither depends on the other.
//! - [`read`]: the one reader of rollout datasets (schema-version check, torn last line, corrupt
//!   lines, latest attempt per episode), used by resume, export, report and `codegym run`.
//! - [`aggregate`]: the one aggregation of outcomes (solved rate, pass@k, mean rewards, with
//!   errored episodes out), used by the rollout summary, `codegym report` and `codegym evaluate`.
//! - [`cross_check`]: which rewarded steps a cross-check covers and what its outcome does to the
//!   record, for the rollout engine and `codegym rescore` alike.
//! - [`pass_at_k`] and [`mean_pass_at_k`]: the one pass@k of the project (HumanEval's rule).
//! - [`atomic`]: every dataset file we write whole (exports, evaluation results and metrics,
//!   manifests and summaries) replaces its target atomically through [`atomic::write_atomic`] or
//!   [`atomic::write_atomic_with`]: readers see the old file or the new one, never half of one.
//!
//! Nothing here knows about models, environments or sandboxes.

pub mod aggregate;
pub mod atomic;
pub mod cross_check;
pub mod mix;
mod pass_at_k;
pub mod read;
pub mod record;

pub use aggregate::{Aggregate, Outcome, Tally};
pub use pass_at_k::{mean_pass_at_k, pass_at_k};
pub use record::{OLDEST_READABLE_VERSION, SCHEMA_VERSION, TrajectoryRecord};
