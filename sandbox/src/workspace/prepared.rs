//! A persistent, content-addressed store of prepared states: the frozen layers of a repository
//! task and its base commit, shared by every process of the machine and kept across restarts,
//! under a key the caller derives from everything that decides the state (env-coding's
//! `repo/prepared.rs`). The store knows nothing of tasks: a key is 64 hex digits.
//!
//! Layout under the store's root (root-owned, 0700, like the layer store: nothing of it is
//! reachable by a run's uid; the layers are overlayfs lowers, never written):
//! - `states/KEY/` a complete entry: `state` (format line, base commit, layer count, bytes) and
//!   `layers/N/tree` (bottom first). An entry is written whole under `tmp/`, synced, and renamed
//!   into `states/`: a crash leaves only a `tmp/` dir (swept once its process is gone), never a
//!   half-written entry, and a reader never sees a partial one. Two processes storing one key
//!   both write; the second rename finds the first's entry and drops its own copy.
//! - `locks/KEY`: a process using an entry holds a shared `flock` on it for as long as any of
//!   the entry's layers is alive; eviction takes it exclusively without waiting and skips an
//!   entry it cannot lock, so a state in use is never removed from under a server. An entry is
//!   evicted by renaming it into `tmp/` first (readers see it whole or not at all).
//! - Eviction is least recently used under a size cap (`max_bytes`), after each store: a hit
//!   touches the entry's `state` file, and the oldest unlocked entries go until the rest fits.
//! - A present entry that is not whole (no or unparsable `state`, a missing layer dir, an owner
//!   or mode that is not the store's) is removed and reported as a miss, so the caller prepares
//!   anew: the key is a pure function of the inputs, so re-preparing yields the right state,
//!   where an error would block the task until someone cleaned up. The content of a whole entry
//!   is trusted (it is root-only), not re-hashed on each use.
//!
//! Blocking IO runs on tokio's blocking pool.

use std::fs::File;
use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::FsLayer;
use super::layer::{copy_upper, io_err};
use crate::request::SandboxError;
use crate::workdir;

/// The first line of a `state` file; bumped when the entry layout changes.
const STATE_FORMAT: &str = "codegym-prepared 1";

/// Whether and where prepared states persist (`prepared` in the coding config).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PreparedConfig {
    /// Off: every process prepares each task itself, in its work root, and nothing persists.
    pub enabled: bool,
    /// The store's root (created root-only). Must not be under the sandbox's work root (a work
    /// root is removed with its process).
    pub dir: PathBuf,
    /// Least recently used states not in use are removed above this size (`0`: no cap).
    pub max_bytes: u64,
}

impl Default for PreparedConfig {
    fn default() -> Self {
        PreparedConfig {
            enabled: true,
            dir: PathBuf::from("/var/cache/codegym/prepared"),
            max_bytes: 20 << 30,
        }
    }
}

/// A store of prepared states at one root dir.
#[derive(Debug, Clone)]
pub struct PreparedStore {
    root: PathBuf,
    max_bytes: u64,
}

/// A stored state: its layers (bottom first; never removed on drop, see [`FsLayer`]) and the
/// base commit.
#[derive(Debug)]
pub struct StoredState {
    pub layers: Vec<Arc<FsLayer>>,
    pub base_commit: String,
}

/// What one [`PreparedStore::prune`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PruneReport {
    pub removed: usize,
    /// Entries to remove that a process is using (left in place).
    pub in_use: usize,
    pub kept: usize,
    pub bytes_removed: u64,
}

/// A shared or exclusive `flock` on an entry's lock file, released on drop.
#[derive(Debug)]
pub(super) struct EntryLock {
    _file: File,
}

/// What a `state` file says.
struct State {
    base_commit: String,
    layers: usize,
    bytes: u64,
}

fn valid_key(key: &str) -> Result<(), SandboxError> {
    let ok = key.len() == 64 && key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    match ok {
        true => Ok(()),
        false => Err(SandboxError::InvalidPath(format!(
            "prepared-state key {key:?} (64 lowercase hex digits expected)"
        ))),
    }
}

fn dir(path: &Path) -> Result<(), SandboxError> {
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        Err(e) => Err(io_err(path)(e)),
    }
}

fn flock(file: &File, op: libc::c_int) -> std::io::Result<()> {
    // SAFETY: flock on a valid open fd.
    match unsafe { libc::flock(file.as_raw_fd(), op) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Bytes a tree takes on disk (blocks, not lengths), never following links.
fn disk_bytes(path: &Path) -> std::io::Result<u64> {
    let meta = std::fs::symlink_metadata(path)?;
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        for e in std::fs::read_dir(path)? {
            total += disk_bytes(&e?.path())?;
        }
    }
    Ok(total)
}

impl PreparedStore {
    /// The store at `root` holding at most about `max_bytes` (`0`: no cap). Nothing is created
    /// until the first lookup.
    pub fn new(root: impl Into<PathBuf>, max_bytes: u64) -> PreparedStore {
        PreparedStore {
            root: root.into(),
            max_bytes,
        }
    }

    /// The store `config` describes, if enabled.
    pub fn from_config(config: &PreparedConfig) -> Option<PreparedStore> {
        config
            .enabled
            .then(|| PreparedStore::new(config.dir.clone(), config.max_bytes))
    }

    /// The store's root dir.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the entry `key` is (or would be).
    pub fn entry_dir(&self, key: &str) -> PathBuf {
        self.root.join("states").join(key)
    }

    /// Creates the root and its dirs (root-only), sweeping `tmp/` dirs of dead processes.
    fn open(&self) -> Result<(), SandboxError> {
        if let Some(parent) = self.root.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        for d in ["", "states", "locks", "tmp"] {
            dir(&self.root.join(d))?;
        }
        // An existing root is closed too: its layers are reachable through it by path.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o700))
            .map_err(io_err(&self.root))?;
        let tmp = self.root.join("tmp");
        for e in std::fs::read_dir(&tmp).map_err(io_err(&tmp))?.flatten() {
            if workdir::is_stale(&e.file_name().to_string_lossy()) {
                workdir::remove(&e.path());
            }
        }
        Ok(())
    }

    fn lock(&self, key: &str, op: libc::c_int) -> Result<Option<EntryLock>, SandboxError> {
        let path = self.root.join("locks").join(key);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_err(&path))?;
        match flock(&file, op) {
            Ok(()) => Ok(Some(EntryLock { _file: file })),
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(None),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    fn temp_dir(&self, what: &str) -> PathBuf {
        self.root.join("tmp").join(format!(
            "codegym-{}-{what}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ))
    }

    /// The entry `key`, if whole; `None` on a miss (a broken entry is removed first: see the
    /// module doc).
    pub async fn get(&self, key: &str) -> Result<Option<StoredState>, SandboxError> {
        valid_key(key)?;
        let (store, key) = (self.clone(), key.to_string());
        tokio::task::spawn_blocking(move || store.get_blocking(&key))
            .await
            .map_err(|_| SandboxError::Closed)?
    }

    fn get_blocking(&self, key: &str) -> Result<Option<StoredState>, SandboxError> {
        self.open()?;
        let lock = self.lock(key, libc::LOCK_SH)?.expect("a blocking lock");
        let entry = self.entry_dir(key);
        if std::fs::symlink_metadata(&entry).is_err() {
            return Ok(None);
        }
        match self.check(&entry) {
            Ok(state) => {
                // Least recently used: a hit is a use.
                let _ = File::options()
                    .write(true)
                    .open(entry.join("state"))
                    .and_then(|f| f.set_modified(std::time::SystemTime::now()));
                Ok(Some(self.stored(key, state, lock)))
            }
            Err(why) => {
                tracing::warn!(entry = %entry.display(), why, "a broken prepared state: removed, preparing anew");
                drop(lock);
                self.evict(key)?;
                Ok(None)
            }
        }
    }

    fn stored(&self, key: &str, state: State, lock: EntryLock) -> StoredState {
        let lock = Arc::new(lock);
        let layers = (0..state.layers)
            .map(|i| {
                Arc::new(FsLayer {
                    dir: self.entry_dir(key).join("layers").join(i.to_string()),
                    stored: Some(lock.clone()),
                })
            })
            .collect();
        StoredState {
            layers,
            base_commit: state.base_commit,
        }
    }

    /// Whether `entry` is whole: its `state` parses, every layer's tree is there, and the entry
    /// is the store's (owner and mode).
    fn check(&self, entry: &Path) -> Result<State, String> {
        let meta = std::fs::symlink_metadata(entry).map_err(|e| e.to_string())?;
        let euid = nix::unistd::geteuid().as_raw();
        if !meta.is_dir() || meta.uid() != euid || meta.mode() & 0o777 != 0o700 {
            return Err(format!(
                "not a dir of uid {euid} with mode 0700 (uid {}, mode {:o})",
                meta.uid(),
                meta.mode() & 0o7777
            ));
        }
        let text = std::fs::read_to_string(entry.join("state"))
            .map_err(|e| format!("its state file: {e}"))?;
        let state = parse_state(&text).ok_or("its state file is incomplete or unreadable")?;
        for i in 0..state.layers {
            let tree = entry.join("layers").join(i.to_string()).join("tree");
            if !std::fs::symlink_metadata(&tree).is_ok_and(|m| m.is_dir()) {
                return Err(format!("layer {i} is missing"));
            }
        }
        Ok(state)
    }

    /// Stores `layers` (bottom first) and `base_commit` as `key` and returns the stored state
    /// (another process's, when it stored the key first). A full disk or any other failure to
    /// write is an error: nothing of the attempt stays in the store.
    pub async fn put(
        &self,
        key: &str,
        layers: &[Arc<FsLayer>],
        base_commit: &str,
    ) -> Result<StoredState, SandboxError> {
        valid_key(key)?;
        let (store, key, commit) = (self.clone(), key.to_string(), base_commit.to_string());
        let sources: Vec<PathBuf> = layers.iter().map(|l| l.dir.join("tree")).collect();
        tokio::task::spawn_blocking(move || store.put_blocking(&key, &sources, &commit))
            .await
            .map_err(|_| SandboxError::Closed)?
    }

    fn put_blocking(
        &self,
        key: &str,
        sources: &[PathBuf],
        commit: &str,
    ) -> Result<StoredState, SandboxError> {
        self.open()?;
        let tmp = self.temp_dir("put");
        let written = self.write_entry(&tmp, sources, commit);
        let result = written.and_then(|bytes| {
            // Held from before the entry appears: no eviction can take it between the rename
            // and the caller's first use.
            let lock = self.lock(key, libc::LOCK_SH)?.expect("a blocking lock");
            let entry = self.entry_dir(key);
            match std::fs::rename(&tmp, &entry) {
                Ok(()) => {
                    let state = State {
                        base_commit: commit.to_string(),
                        layers: sources.len(),
                        bytes,
                    };
                    Ok(Some(self.stored(key, state, lock)))
                }
                // Another process stored it first: its entry is as good as ours.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST)) => {
                    Ok(None)
                }
                Err(e) => Err(io_err(&entry)(e)),
            }
        });
        if std::fs::symlink_metadata(&tmp).is_ok() {
            workdir::remove(&tmp);
        }
        let stored = match result? {
            Some(stored) => stored,
            None => self
                .get_blocking(key)?
                .ok_or_else(|| SandboxError::WorkDir {
                    path: self.entry_dir(key),
                    source: std::io::Error::other("the entry another process stored is broken"),
                })?,
        };
        if self.max_bytes > 0
            && let Err(e) = self.evict_to(self.max_bytes, key)
        {
            tracing::warn!(error = %e, "evicting prepared states failed");
        }
        Ok(stored)
    }

    /// Writes a whole entry at `tmp` and syncs it; its size in bytes.
    fn write_entry(
        &self,
        tmp: &Path,
        sources: &[PathBuf],
        commit: &str,
    ) -> Result<u64, SandboxError> {
        dir(tmp)?;
        dir(&tmp.join("layers"))?;
        for (i, src) in sources.iter().enumerate() {
            copy_upper(src, &tmp.join("layers").join(i.to_string()))?;
        }
        let bytes = disk_bytes(tmp).map_err(io_err(tmp))?;
        let state = format!(
            "{STATE_FORMAT}\nbase {commit}\nlayers {}\nbytes {bytes}\n",
            sources.len()
        );
        let path = tmp.join("state");
        let mut f = File::create(&path).map_err(io_err(&path))?;
        f.write_all(state.as_bytes()).map_err(io_err(&path))?;
        // Everything on disk before the rename makes it an entry (a crash after the rename
        // must not leave empty files in a "whole" entry).
        // SAFETY: syncfs on a valid open fd.
        if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
            return Err(io_err(&path)(std::io::Error::last_os_error()));
        }
        Ok(bytes)
    }

    /// Removes `key`'s entry unless a process is using it: `Ok(Some(bytes))` when removed (or
    /// absent: 0), `Ok(None)` when in use.
    fn evict(&self, key: &str) -> Result<Option<u64>, SandboxError> {
        let Some(_lock) = self.lock(key, libc::LOCK_EX | libc::LOCK_NB)? else {
            return Ok(None);
        };
        let entry = self.entry_dir(key);
        let bytes = std::fs::read_to_string(entry.join("state"))
            .ok()
            .and_then(|t| parse_state(&t))
            .map_or(0, |s| s.bytes);
        let away = self.temp_dir("evict");
        match std::fs::rename(&entry, &away) {
            Ok(()) => workdir::remove(&away),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Some(0)),
            Err(e) => return Err(io_err(&entry)(e)),
        }
        Ok(Some(bytes))
    }

    /// The stored keys with their sizes and last use, oldest first.
    fn entries(&self) -> Result<Vec<(String, u64)>, SandboxError> {
        let states = self.root.join("states");
        let mut out = Vec::new();
        for e in std::fs::read_dir(&states).map_err(io_err(&states))? {
            let e = e.map_err(io_err(&states))?;
            let key = e.file_name().to_string_lossy().into_owned();
            let state = e.path().join("state");
            let used = std::fs::metadata(&state).and_then(|m| m.modified()).ok();
            let bytes = std::fs::read_to_string(&state)
                .ok()
                .and_then(|t| parse_state(&t))
                .map_or(0, |s| s.bytes);
            out.push((used, key, bytes));
        }
        out.sort();
        Ok(out.into_iter().map(|(_, k, b)| (k, b)).collect())
    }

    /// Least recently used entries (never `spare`, never one in use) removed until the store
    /// holds at most `max` bytes.
    fn evict_to(&self, max: u64, spare: &str) -> Result<(), SandboxError> {
        let entries = self.entries()?;
        let mut total: u64 = entries.iter().map(|(_, b)| b).sum();
        for (key, _) in entries {
            if total <= max {
                break;
            }
            if key == spare {
                continue;
            }
            if let Some(bytes) = self.evict(&key)? {
                tracing::info!(key, bytes, "evicted a prepared state (least recently used)");
                total = total.saturating_sub(bytes);
            }
        }
        Ok(())
    }

    /// Removes every entry `keep` does not name, except those in use; blocking.
    pub fn prune(&self, keep: impl Fn(&str) -> bool) -> Result<PruneReport, SandboxError> {
        self.open()?;
        let mut report = PruneReport::default();
        for (key, _) in self.entries()? {
            if keep(&key) {
                report.kept += 1;
                continue;
            }
            match self.evict(&key)? {
                Some(bytes) => {
                    report.removed += 1;
                    report.bytes_removed += bytes;
                }
                None => report.in_use += 1,
            }
        }
        Ok(report)
    }
}

fn parse_state(text: &str) -> Option<State> {
    let mut lines = text.lines();
    (lines.next()? == STATE_FORMAT).then_some(())?;
    let base_commit = lines.next()?.strip_prefix("base ")?.to_string();
    let hex = base_commit.len() >= 40 && base_commit.bytes().all(|b| b.is_ascii_hexdigit());
    let layers = lines.next()?.strip_prefix("layers ")?.parse().ok()?;
    let bytes = lines.next()?.strip_prefix("bytes ")?.parse().ok()?;
    (hex && layers > 0).then_some(State {
        base_commit,
        layers,
        bytes,
    })
}
