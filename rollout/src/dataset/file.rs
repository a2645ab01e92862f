//! The append-only JSONL file: one record per line, each written with a single `write` so a crash
//! can only tear the last line. Reading it (and repairing that line before a resume appends) is
//! the `trajectory` crate's one reader, [`trajectory::read`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::io::AsyncWriteExt;

use super::record::TrajectoryRecord;

/// A dataset file that cannot be read or written. The message says the cause itself, so the
/// cause is not also an error `source` (the CLI prints the chain, which would say it twice).
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("{path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error(transparent)]
    Read(#[from] trajectory::read::ReadError),
    #[error("{path}: cannot encode a record: {cause}")]
    Encode {
        path: PathBuf,
        cause: serde_json::Error,
    },
}

impl DatasetError {
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DatasetError + '_ {
        move |cause| DatasetError::Io {
            path: path.to_path_buf(),
            cause,
        }
    }
}

/// `FILE` + `suffix` (e.g. `out.jsonl.manifest.json`).
pub fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
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
            serde_json::to_writer(&mut self.buf, record).map_err(|cause| DatasetError::Encode {
                path: self.path.clone(),
                cause,
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
    let text = serde_json::to_vec_pretty(value).map_err(|cause| DatasetError::Encode {
        path: path.to_path_buf(),
        cause,
    })?;
    trajectory::atomic::write_atomic(path, &text).map_err(DatasetError::io(path))
}
