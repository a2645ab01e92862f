//! The rollout dataset: the append-only JSONL file of trajectory records, and its manifest. The
//! record format itself is the `trajectory` crate's (readers such as the trainer bridge depend on it
//! alone); it is re-exported here as [`record`].

pub mod file;
pub mod manifest;

pub use trajectory::record;

pub use file::{DatasetError, DatasetWriter, read_latest, scan, sidecar};
pub use manifest::Manifest;
