//! `FILE.manifest.json`: what produced the dataset (config without secrets, engine, run id) and how
//! far it got. `--resume` takes the run id from it so a resumed dataset stays one run.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::file::{DatasetError, write_json_atomic};
use super::record::{EngineInfo, SCHEMA_VERSION};
use crate::config::RolloutConfig;

/// Version of the manifest's own layout.
pub const MANIFEST_FORMAT_VERSION: u32 = 1;

/// The manifest document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format_version: u32,
    /// [`SCHEMA_VERSION`] of the records in the dataset.
    pub schema_version: u32,
    pub run_id: String,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub engine: EngineInfo,
    /// The run's configuration (it holds no secrets: only the names of API key variables).
    pub config: RolloutConfig,
    pub counts: ManifestCounts,
}

/// Progress of the dataset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestCounts {
    pub tasks: u64,
    pub samples: u32,
    /// `tasks x samples`.
    pub expected_episodes: u64,
    /// Episodes with a record (newest per episode).
    pub episodes: u64,
    /// Episodes whose newest record is `error` or `cancelled` (re-run by `--resume`).
    pub rerun_needed: u64,
    pub solved: u64,
    /// Lines in the file, superseded records included.
    pub records: u64,
    /// True when every expected episode has a final record.
    pub complete: bool,
}

impl Manifest {
    /// A new manifest for `config`.
    pub fn new(run_id: String, config: &RolloutConfig, now_ms: u64) -> Self {
        Manifest {
            format_version: MANIFEST_FORMAT_VERSION,
            schema_version: SCHEMA_VERSION,
            run_id,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            engine: EngineInfo::default(),
            config: config.clone(),
            counts: ManifestCounts::default(),
        }
    }

    /// Reads a manifest; `Ok(None)` when there is none.
    pub fn load(path: &Path) -> Result<Option<Self>, DatasetError> {
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(cause) => {
                return Err(DatasetError::Io {
                    path: path.to_path_buf(),
                    cause,
                });
            }
        };
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|e| DatasetError::Io {
                path: path.to_path_buf(),
                cause: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            })
    }

    /// Writes the manifest atomically.
    pub fn save(&self, path: &Path) -> Result<(), DatasetError> {
        write_json_atomic(path, self)
    }
}
