//! The rollout dataset: the append-only JSONL file of trajectory records, and its manifest. The
//! record format and its one reader are the `trajectory` crate's (readers such as the trainer bridge
//! depend on it alone); they are re-exported here as [`record`] and [`read_latest`].

pub mod file;
pub mod manifest;

pub use trajectory::read::read_latest;
pub use trajectory::record;

pub use file::{DatasetError, DatasetWriter, sidecar};
pub use manifest::Manifest;
