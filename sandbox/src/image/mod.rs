//! OCI images as stacks of read-only layers: a content-addressed [`LayerStore`] that imports an
//! image (an OCI image layout dir, the oci-archive tar `podman save --format oci-archive`
//! writes, or a docker-archive) and unpacks each of its layers once, into a dir named by the layer's digest.
//!
//! - Every blob is verified: the index, the manifest and the config are hashed whole, a layer is
//!   hashed as it streams through the unpacker, and its size checked against its descriptor; a
//!   missing or corrupt blob is an error naming its digest, and nothing of it enters the store.
//! - A layer unpacks into a temporary dir of the store, renamed to `layers/sha256/HEX` once
//!   complete and verified, so concurrent imports of one digest are safe (the second rename
//!   finds the first's dir and drops its own copy) and a dir of the store is always whole. A
//!   digest already in the store is not unpacked (or read) again: its content was verified.
//! - Layers are plain, gzip or zstd (any number of frames) tar streams. A docker-archive (`docker
//!   save`'s format, podman's default; `docker.rs`) is read too: its layers are plain tars, each
//!   verified against the config's `rootfs.diff_ids` and stored under that digest.
//! - The unpacker (`unpack.rs`) writes entry by entry (never a spawned `tar`, never the crate's
//!   own `unpack`): OCI whiteouts become overlayfs's (`.wh.NAME` a character device 0/0,
//!   `.wh..wh..opq` the `trusted.overlay.opaque` xattr on its dir), so the layers stack as
//!   `lowerdir`s of one overlay; paths that escape the layer (`..`, through a symlink or a file)
//!   fail the layer; device nodes and FIFOs are dropped; set-id bits are cleared; owners are the
//!   entries' own (as root), modes and mtimes are kept.
//! - The store root is created root-owned, mode 0700: like the workspace layers (`workspace.rs`),
//!   nothing of it is reachable by a run's uid.
//!
//! Blocking IO throughout: async callers use [`LayerStore::import_async`] (the blocking pool).

mod docker;
mod layout;
mod root;
mod unpack;

pub use root::{ImageRoot, RootPaths, WORK_DIR};
pub use unpack::unpack_archive;

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

/// Why an image could not be imported. Blob errors name the blob's digest.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("blob {digest} is missing from the image")]
    MissingBlob { digest: String },
    #[error("blob {digest} is corrupt: its content hashes to sha256:{actual}")]
    DigestMismatch { digest: String, actual: String },
    #[error("blob {digest} is corrupt: {actual} bytes, its descriptor says {expected}")]
    SizeMismatch {
        digest: String,
        expected: u64,
        actual: u64,
    },
    #[error("layer {digest}: entry {path:?} {why}")]
    Entry {
        digest: String,
        path: String,
        why: &'static str,
    },
    #[error("archive {archive}: entry {path:?} {why}")]
    ArchiveEntry {
        archive: PathBuf,
        path: String,
        why: String,
    },
    #[error("layer {digest}: {source}")]
    Layer {
        digest: String,
        source: std::io::Error,
    },
    #[error("invalid image {path}: {why}")]
    Format { path: PathBuf, why: String },
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ImageError + '_ {
    move |source| ImageError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A sha256 content digest (`sha256:` and 64 lowercase hex digits; other algorithms are refused).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Digest {
    hex: String,
}

impl Digest {
    /// Parses `sha256:HEX`; `None` for anything else.
    pub fn parse(s: &str) -> Option<Digest> {
        let hex = s.strip_prefix("sha256:")?;
        let ok = hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| Digest {
            hex: hex.to_string(),
        })
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.hex
    }

    pub(crate) fn of(hasher: Sha256) -> String {
        hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

/// One layer of an image, unpacked in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLayer {
    /// The layer blob's digest (as the manifest names it, compressed).
    pub digest: Digest,
    /// Its unpacked tree (the host's view; an overlay `lowerdir`).
    pub dir: PathBuf,
}

/// An imported image: its manifest's digest (a docker-archive's: its config's, docker's image
/// id), its layers (bottom first) and the environment its
/// config sets (`config.Env`, `NAME=value` entries: an image's own `PATH`, such as a conda env's
/// bin dir, is where its tools are).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub manifest: Digest,
    pub layers: Vec<StoredLayer>,
    pub env: Vec<String>,
    /// The config's `WorkingDir` (absent or empty: `None`); runs do not start there (they start
    /// in their repository), importers read it (a Harbor task's repository is this dir).
    pub working_dir: Option<String>,
}

/// A content-addressed store of unpacked layers under one root dir.
#[derive(Debug, Clone)]
pub struct LayerStore {
    root: PathBuf,
}

impl LayerStore {
    /// Opens (creating if needed) the store at `root`: `layers/sha256/` and `tmp/`, root-only.
    pub fn open(root: impl Into<PathBuf>) -> Result<LayerStore, ImageError> {
        let root = root.into();
        for dir in [
            root.clone(),
            root.join("layers"),
            root.join("layers/sha256"),
        ] {
            private_dir(&dir)?;
        }
        private_dir(&root.join("tmp"))?;
        // An existing root is closed too: its layers are reachable through it by path.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))
            .map_err(io_err(&root))?;
        Ok(LayerStore { root })
    }

    /// The store's root dir.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the layer `digest` is (or would be) unpacked.
    pub fn layer_dir(&self, digest: &Digest) -> PathBuf {
        self.root.join("layers/sha256").join(digest.hex())
    }

    /// Imports the image at `src`: an OCI image layout dir, an oci-archive (a tar of one) or a
    /// docker-archive.
    /// Each layer not yet in the store is verified and unpacked; blocking.
    pub fn import(&self, src: &Path) -> Result<Image, ImageError> {
        let meta = std::fs::metadata(src).map_err(io_err(src))?;
        if meta.is_dir() {
            return layout::Layout::new(src.to_path_buf()).import(self);
        }
        let staged = self.temp_dir("archive")?;
        match layout::stage_archive(src, &staged)? {
            layout::Staged::Oci => layout::Layout::new(staged.path().to_path_buf()).import(self),
            layout::Staged::Docker => docker::import(staged.path(), src, self),
        }
    }

    /// [`import`](Self::import) on tokio's blocking pool.
    pub async fn import_async(&self, src: &Path) -> Result<Image, ImageError> {
        let (store, src) = (self.clone(), src.to_path_buf());
        tokio::task::spawn_blocking(move || store.import(&src))
            .await
            .map_err(|e| ImageError::Io {
                path: self.root.clone(),
                source: std::io::Error::other(e.to_string()),
            })?
    }

    /// A new, unique dir under `tmp/` (removed by the returned guard unless renamed away).
    pub(crate) fn temp_dir(&self, what: &str) -> Result<TempDir, ImageError> {
        let path = self.root.join("tmp").join(format!(
            "{what}-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        private_dir(&path)?;
        Ok(TempDir { path })
    }
}

/// A dir of the store's `tmp/`, removed on drop (a no-op once it was renamed into place).
pub(crate) struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::fs::symlink_metadata(&self.path).is_ok() {
            crate::workdir::remove(&self.path);
        }
    }
}

fn private_dir(dir: &Path) -> Result<(), ImageError> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(io_err(dir)(e)),
    }
}
