//! The one reader of rollout datasets (JSONL, one [`TrajectoryRecord`] per line). Rollout resume,
//! `codegym export`, `codegym report` and `codegym run --solution` all read through it, so they
//! see the same episodes in the same file.
//!
//! The policy, the same for every tool:
//!
//! - **Schema version.** Every line's `schema_version` must be within
//!   [`OLDEST_READABLE_VERSION`]`..=`[`SCHEMA_VERSION`]. A newer version is an error naming the file
//!   and line (a newer codegym wrote it: this one could misread it), never a skipped line.
//! - **A torn last line** (the final line has no newline and is not a record) is what a run killed
//!   mid-write leaves. It is ignored with a warning and counted in [`Dataset::torn_bytes`]: the
//!   episode simply has no record, and `--resume` runs it again. [`read_and_repair`] (resume, before
//!   it appends) cuts it off, or completes a whole last record with its newline. A last line
//!   without a newline that *is* a whole record counts as a record.
//! - **A corrupt line anywhere else** is an error naming the file and line. The writer appends
//!   each record as one whole line, so only the last line can be torn by a crash; a bad line before
//!   it means the file was damaged or is not a dataset, and skipping it would silently drop an
//!   episode from exports, reports and pass@k. Blank lines are not records and are passed over.
//! - **Latest attempt per episode.** An episode may have several records (an errored episode
//!   re-run by `--resume`): the last line wins, kept at the position of the episode's first line.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::record::{EpisodeKey, OLDEST_READABLE_VERSION, SCHEMA_VERSION, TrajectoryRecord};

/// A dataset file that cannot be read, per the policy above.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: not a trajectory record: {message}")]
    Corrupt {
        path: PathBuf,
        line: u64,
        message: String,
    },
    #[error(
        "{path}:{line}: unsupported schema_version {version} (this build reads {OLDEST_READABLE_VERSION} to {SCHEMA_VERSION}; a newer codegym wrote it)"
    )]
    UnsupportedVersion {
        path: PathBuf,
        line: u64,
        version: u64,
    },
}

impl ReadError {
    /// Whether the file does not exist (a fresh run's output, for resume).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// What a dataset file holds.
#[derive(Debug, Default)]
pub struct Dataset {
    /// The newest record of every episode, in order of the episode's first line.
    pub records: Vec<TrajectoryRecord>,
    /// Record lines read, superseded attempts included.
    pub lines: u64,
    /// Bytes of a torn last line: ignored, and cut off by [`read_and_repair`].
    pub torn_bytes: u64,
}

/// Reads the dataset at `path` without modifying it.
pub fn read(path: &Path) -> Result<Dataset, ReadError> {
    read_file(path, false)
}

/// The newest record of every episode of the dataset at `path`.
pub fn read_latest(path: &Path) -> Result<Vec<TrajectoryRecord>, ReadError> {
    Ok(read(path)?.records)
}

/// Reads the dataset at `path` and repairs its torn last line, so records appended next start on
/// a line of their own: a torn line is cut off, a whole last record gets its newline.
pub fn read_and_repair(path: &Path) -> Result<Dataset, ReadError> {
    read_file(path, true)
}

/// The end of a file whose last line has no newline.
struct Unterminated {
    /// Offset where the last line starts.
    start: u64,
    /// Whether that line is a whole record.
    whole: bool,
}

fn read_file(path: &Path, repair: bool) -> Result<Dataset, ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut dataset = Dataset::default();
    let mut index: HashMap<EpisodeKey, usize> = HashMap::new();
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    let mut offset = 0u64;
    let mut unterminated = None;
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let start = offset;
        offset += n as u64;
        let complete = buf.last() == Some(&b'\n');
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let record = match parse_line(path, line_no, &buf) {
            Ok(record) => record,
            Err(ReadError::Corrupt { message, .. }) if !complete => {
                tracing::warn!(path = %path.display(), line = line_no, bytes = n, %message, "ignoring a torn last line (a run killed mid-write; resume runs the episode again)");
                dataset.torn_bytes = n as u64;
                unterminated = Some(Unterminated {
                    start,
                    whole: false,
                });
                break;
            }
            Err(e) => return Err(e),
        };
        if !complete {
            unterminated = Some(Unterminated { start, whole: true });
        }
        dataset.lines += 1;
        match index.get(&record.key()) {
            Some(&i) => dataset.records[i] = record,
            None => {
                index.insert(record.key(), dataset.records.len());
                dataset.records.push(record);
            }
        }
    }
    if let (true, Some(end)) = (repair, unterminated) {
        repair_end(path, end).map_err(io)?;
    }
    tracing::debug!(path = %path.display(), lines = dataset.lines, episodes = dataset.records.len(), torn_bytes = dataset.torn_bytes, "read rollout dataset");
    Ok(dataset)
}

/// Just the version of a line that is not a record of this build, to tell "newer" from "broken".
#[derive(Deserialize)]
struct VersionProbe {
    schema_version: Option<serde_json::Value>,
}

fn parse_line(path: &Path, line: u64, text: &[u8]) -> Result<TrajectoryRecord, ReadError> {
    let unsupported = |version| ReadError::UnsupportedVersion {
        path: path.to_path_buf(),
        line,
        version,
    };
    let readable = u64::from(OLDEST_READABLE_VERSION)..=u64::from(SCHEMA_VERSION);
    match serde_json::from_slice::<TrajectoryRecord>(text) {
        Ok(record) if readable.contains(&u64::from(record.schema_version)) => Ok(record),
        Ok(record) => Err(unsupported(u64::from(record.schema_version))),
        Err(e) => {
            let version = serde_json::from_slice::<VersionProbe>(text)
                .ok()
                .and_then(|p| p.schema_version);
            match version.as_ref().and_then(serde_json::Value::as_u64) {
                Some(v) if !readable.contains(&v) => Err(unsupported(v)),
                _ => Err(ReadError::Corrupt {
                    path: path.to_path_buf(),
                    line,
                    message: if version.is_none() && e.is_data() {
                        format!("no schema_version ({e})")
                    } else {
                        e.to_string()
                    },
                }),
            }
        }
    }
}

/// Cuts a torn last line off, or ends a whole last record with its newline.
fn repair_end(path: &Path, end: Unterminated) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    if end.whole {
        f.seek(SeekFrom::End(0))?;
        f.write_all(b"\n")?;
    } else {
        f.set_len(end.start)?;
        tracing::warn!(path = %path.display(), "cut a torn last line");
    }
    f.sync_all()
}

#[cfg(test)]
mod tests;
