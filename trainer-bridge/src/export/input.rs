//! Reading a rollout dataset: one [`TrajectoryRecord`] per JSON line, deduplicated by episode key.
//!
//! Rollout files are append-only and resumable, so the same episode may appear several times (an
//! errored episode re-run by `--resume`): the last line wins. A crash while appending can leave a
//! torn last line; it is skipped with a warning, since the episode will simply be missing.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;

use trajectory::record::{EpisodeKey, OLDEST_READABLE_VERSION, SCHEMA_VERSION, TrajectoryRecord};

use super::ExportError;

/// Records of the file at `path`, deduplicated (last line wins), in order of first appearance.
pub fn read_records(path: &Path) -> Result<Vec<TrajectoryRecord>, ExportError> {
    let io = |source| ExportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut reader = BufReader::new(file);
    let mut records: Vec<TrajectoryRecord> = Vec::new();
    let mut index: HashMap<EpisodeKey, usize> = HashMap::new();
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let complete = buf.last() == Some(&b'\n');
        let text = String::from_utf8_lossy(&buf);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let record = match parse_line(text) {
            Ok(r) => r,
            // Only the final, unterminated line can be torn by a crash mid-append.
            Err(message) if !complete => {
                tracing::warn!(path = %path.display(), line = line_no, %message, "skipping torn last line");
                break;
            }
            Err(message) => {
                return Err(ExportError::Parse {
                    path: path.to_path_buf(),
                    line: line_no,
                    message,
                });
            }
        };
        match index.get(&record.key()) {
            Some(&i) => records[i] = record,
            None => {
                index.insert(record.key(), records.len());
                records.push(record);
            }
        }
    }
    tracing::debug!(path = %path.display(), lines = line_no, episodes = records.len(), "read rollout dataset");
    Ok(records)
}

fn parse_line(text: &str) -> Result<TrajectoryRecord, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let version = value
        .get("schema_version")
        .and_then(serde_json::Value::as_u64);
    match version {
        Some(v)
            if (u64::from(OLDEST_READABLE_VERSION)..=u64::from(SCHEMA_VERSION)).contains(&v) => {}
        Some(v) => {
            return Err(format!(
                "unsupported schema_version {v} (this build reads {OLDEST_READABLE_VERSION} to {SCHEMA_VERSION})"
            ));
        }
        None => return Err("not a trajectory record: no numeric schema_version".to_string()),
    }
    serde_json::from_value(value).map_err(|e| e.to_string())
}
