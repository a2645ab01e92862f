//! The project's data files, and the one way they reach disk.
//!
//! - [`record`]: the trajectory record, one JSON line per episode of a rollout dataset, and its
//!   [`SCHEMA_VERSION`]. Writers (the rollout engine) and readers (the trainer bridge's exports)
//!   share these types, so neither depends on the other.
//! - [`atomic`]: every dataset file we write whole (exports, evaluation results and metrics,
//!   manifests and summaries) replaces its target atomically through [`atomic::write_atomic`] or
//!   [`atomic::write_atomic_with`]: readers see the old file or the new one, never half of one.
//! - [`pass_at_k`] and [`mean_pass_at_k`]: the one pass@k of the project (HumanEval's rule), used by
//!   `codegym evaluate` and by the rollout summary.
//!
//! Nothing here does IO besides [`atomic`], and nothing here knows about models, environments or
//! sandboxes.

pub mod atomic;
mod pass_at_k;
pub mod record;

pub use pass_at_k::{mean_pass_at_k, pass_at_k};
pub use record::{OLDEST_READABLE_VERSION, SCHEMA_VERSION, TrajectoryRecord};
