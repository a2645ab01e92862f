//! The rollout dataset: the trajectory record format, the append-only JSONL file holding it, and its
//! manifest.

pub mod file;
pub mod manifest;
pub mod record;

pub use file::{DatasetError, DatasetWriter, read_latest, scan, sidecar};
pub use manifest::Manifest;
