//! Configuration files: [`load_json`], the one loader of every JSON config file the CLI reads
//! (`serve --config`, `rollout --config`, `export --config`), and [`Config`], the file of
//! `codegym serve` with a section per component.

use std::path::Path;

use serde::Deserialize;
use serde::de::DeserializeOwned;

/// `{"server": {...}, "http": {...}, "coding": {...}}`; every section and field is optional, unknown ones are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: crate::server::ServerConfig,
    /// The optional HTTP listener (SandboxFusion and OpenEnv facades).
    pub http: crate::http::HttpConfig,
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

/// Loads the `codegym serve` config file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    load_json(path)
}

/// Reads the JSON config file at `path` as a `T`. Errors name the file, and for syntax and schema
/// errors (unknown fields included, since config structs deny them) the line and column, as
/// `FILE:LINE:COLUMN: message`.
pub fn load_json<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serve.json");
        std::fs::write(
            &path,
            "{\n  \"server\": {\"max_sessions\": 8},\n  \"servre\": {}\n}\n",
        )
        .unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:3:", path.display())), "{err}");
        assert!(err.contains("servre"), "{err}");

        std::fs::write(
            &path,
            r#"{"server": {"max_sessions": 8, "idle_timeout_ms": 1500}}"#,
        )
        .unwrap();
        let config = load(&path).unwrap();
        assert_eq!(config.server.max_sessions, 8);
        assert_eq!(
            config.server.idle_timeout(),
            std::time::Duration::from_millis(1500)
        );
        assert!(
            load(&dir.path().join("missing.json"))
                .unwrap_err()
                .to_string()
                .contains("missing.json")
        );
    }

    #[test]
    fn any_config_type_gets_file_and_line() {
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Other {
            #[allow(dead_code)]
            samples: u32,
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other.json");
        std::fs::write(&path, "{\n\n  \"samples\": \"four\"\n}\n").unwrap();
        let err = load_json::<Other>(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:3:", path.display())), "{err}");
    }
}
