//! The `--config` file of `codegym serve`: one JSON document with a section per component.

use std::path::Path;

use serde::Deserialize;

/// `{"server": {...}, "coding": {...}}`; every section and field is optional, unknown ones are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: crate::server::ServerConfig,
    pub coding: env_coding::CodingConfig,
}

/// Errors name the file and, for syntax and schema errors, the line and column.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
}

pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: shown.clone(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| ConfigError::Parse {
        path: shown,
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })
}
