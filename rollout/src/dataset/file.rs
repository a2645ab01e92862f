//! The append-only JSONL file: one record per line, each written with a single `write` so a crash
//! can only tear the last line; [`scan`] detects and repairs that, and [`read_latest`] gives readers
//! the newest record per episode.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::io::AsyncWriteExt;

use super::record::{EpisodeKey, TrajectoryRecord};

/// A dataset file that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: cannot encode a record: {source}")]
    Encode {
        path: PathBuf,
        source: serde_json::Error,
    },
}

impl DatasetError {
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DatasetError + '_ {
        move |source| DatasetError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// `FILE` + `suffix` (e.g. `out.jsonl.manifest.json`).
pub fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// What [`scan`] found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Newest record per episode, in order of first appearance.
    pub latest: Vec<TrajectoryRecord>,
    /// Complete lines read.
    pub lines: u64,
    /// Lines that were not records (skipped).
    pub corrupt_lines: u64,
    /// Bytes of a torn last line that were cut off.
    pub repaired_bytes: u64,
}

/// Reads the whole file, newest record per key winning. With `repair`, a torn last line (a crash
/// mid-write) is cut off, or completed with its newline when it is a whole record.
pub fn scan(path: &Path, repair: bool) -> Result<Scan, DatasetError> {
    let mut scan = Scan::default();
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(scan),
        Err(e) => return Err(DatasetError::io(path)(e)),
    };
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut index: HashMap<EpisodeKey, usize> = HashMap::new();
    let mut line = Vec::new();
    let mut good_end: u64 = 0;
    let mut torn: Option<(u64, bool)> = None;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(DatasetError::io(path))?;
        if n == 0 {
            break;
        }
        let complete = line.last() == Some(&b'\n');
        let parsed = serde_json::from_slice::<TrajectoryRecord>(&line);
        if !complete {
            torn = Some((good_end, parsed.is_ok()));
        }
        if complete || parsed.is_ok() {
            scan.lines += 1;
            match parsed {
                Ok(record) => match index.get(&record.key()) {
                    Some(&i) => scan.latest[i] = record,
                    None => {
                        index.insert(record.key(), scan.latest.len());
                        scan.latest.push(record);
                    }
                },
                Err(e) => {
                    scan.corrupt_lines += 1;
                    tracing::warn!(path = %path.display(), line = scan.lines, error = %e, "skipping a line that is not a record");
                }
            }
        }
        good_end += n as u64;
    }
    if let (Some((end, whole)), true) = (torn, repair) {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(DatasetError::io(path))?;
        if whole {
            f.seek(SeekFrom::End(0)).map_err(DatasetError::io(path))?;
            f.write_all(b"\n").map_err(DatasetError::io(path))?;
        } else {
            scan.repaired_bytes = good_end - end;
            f.set_len(end).map_err(DatasetError::io(path))?;
            tracing::warn!(path = %path.display(), bytes = scan.repaired_bytes, "cut a torn last line");
        }
        f.sync_all().map_err(DatasetError::io(path))?;
    }
    Ok(scan)
}

/// The newest record of every episode (the view exporters should use), without modifying the file.
pub fn read_latest(path: &Path) -> Result<Vec<TrajectoryRecord>, DatasetError> {
    Ok(scan(path, false)?.latest)
}

/// How often appended records are synced to disk in the background, without waiting for it: a
/// machine crash loses at most about this much, and the final [`DatasetWriter::sync`] has little
/// left to flush (syncing a whole run's file at the end took 5-10 ms on our VM's disk).
const BACKGROUND_SYNC: Duration = Duration::from_secs(1);

/// Appends records, one line each.
#[derive(Debug)]
pub struct DatasetWriter {
    path: PathBuf,
    file: tokio::fs::File,
    buf: Vec<u8>,
    /// The same open file, for syncs on a blocking thread while appends go on.
    sync_file: Arc<std::fs::File>,
    last_sync: Instant,
    syncing: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl DatasetWriter {
    /// Opens `path` for appending, creating it if needed.
    pub async fn open(path: &Path) -> Result<Self, DatasetError> {
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .await
            .map_err(DatasetError::io(path))?;
        let sync_file = file
            .try_clone()
            .await
            .map_err(DatasetError::io(path))?
            .into_std()
            .await;
        Ok(DatasetWriter {
            path: path.to_path_buf(),
            file,
            buf: Vec::with_capacity(64 * 1024),
            sync_file: Arc::new(sync_file),
            last_sync: Instant::now(),
            syncing: None,
        })
    }

    /// Writes records as one line each with a single write, and hands them to the OS, so a killed
    /// process loses at most the line being written (a torn last line, repaired on resume).
    pub async fn append(&mut self, records: &[TrajectoryRecord]) -> Result<(), DatasetError> {
        self.buf.clear();
        for record in records {
            serde_json::to_writer(&mut self.buf, record).map_err(|source| {
                DatasetError::Encode {
                    path: self.path.clone(),
                    source,
                }
            })?;
            self.buf.push(b'\n');
        }
        self.file
            .write_all(&self.buf)
            .await
            .map_err(DatasetError::io(&self.path))?;
        self.file
            .flush()
            .await
            .map_err(DatasetError::io(&self.path))?;
        self.sync_in_background()
    }

    /// Starts a sync of what was written so far when the last one is old and finished; reports the
    /// error of a finished one.
    fn sync_in_background(&mut self) -> Result<(), DatasetError> {
        if self.syncing.as_ref().is_some_and(|h| !h.is_finished()) {
            return Ok(());
        }
        if let Some(done) = self.syncing.take().and_then(FutureExt::now_or_never) {
            finished(done).map_err(DatasetError::io(&self.path))?;
        }
        if self.last_sync.elapsed() >= BACKGROUND_SYNC {
            self.last_sync = Instant::now();
            let file = self.sync_file.clone();
            self.syncing = Some(tokio::task::spawn_blocking(move || file.sync_data()));
        }
        Ok(())
    }

    /// Flushes and syncs to disk.
    pub async fn sync(&mut self) -> Result<(), DatasetError> {
        self.file
            .flush()
            .await
            .map_err(DatasetError::io(&self.path))?;
        if let Some(running) = self.syncing.take() {
            finished(running.await).map_err(DatasetError::io(&self.path))?;
        }
        self.file
            .sync_data()
            .await
            .map_err(DatasetError::io(&self.path))
    }
}

fn finished(joined: Result<std::io::Result<()>, tokio::task::JoinError>) -> std::io::Result<()> {
    joined.map_err(std::io::Error::other)?
}

/// Writes `value` as pretty JSON to `path` atomically ([`trajectory::atomic::write_atomic`]).
pub fn write_json_atomic(path: &Path, value: &impl serde::Serialize) -> Result<(), DatasetError> {
    let text = serde_json::to_vec_pretty(value).map_err(|source| DatasetError::Encode {
        path: path.to_path_buf(),
        source,
    })?;
    trajectory::atomic::write_atomic(path, &text).map_err(DatasetError::io(path))
}
