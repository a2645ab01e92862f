//! Copy-on-write workspaces: a repository prepared once as read-only [`FsLayer`]s, and per episode
//! a [`Workspace`], an upper dir of its own mounted with the layers as an overlay (once, in the
//! sandbox's namespace) and bound into each run's own mount namespace.
//!
//! - A layer is a directory under the sandbox's work root (root-owned, mode 0700, unreachable by
//!   path from any run: the work root's other dirs are closed to runs' uids, and Landlock grants a
//!   run only its own work dir). Its files are made writable by anyone ([`layer::seal`]): the overlay
//!   checks permissions on the merged view, and each workspace runs as a uid of its own, so a file
//!   of the prepared state must be writable by whichever uid a workspace gets. The kernel never
//!   writes a lower layer: a write copies the file up into the workspace's upper dir first.
//! - A workspace holds one uid for its whole life (leased like any run's, so no other live run
//!   has it): every run of the episode is the same user and can change what the runs before it
//!   wrote. Its runs are one at a time (an episode's commands are sequential; two at once would
//!   race on one upper dir).
//! - A run is a fresh execution (`fresh::start_command`) under every layer of any run (uid,
//!   namespaces, rlimits, cgroups, Landlock, seccomp, no network) whose work dir holds the
//!   request's files and `repo/`, where the overlay is bound and the run starts. The overlay is
//!   mounted once, when the workspace is made: overlayfs needs inodes of the upper file system
//!   to mount, which an episode that used up its quota would leave none of. The upper dir
//!   persists from run to run; dropping the workspace removes it. Warm-fork runs cannot serve a
//!   workspace: their children are forks of one server and mount nothing per run.
//! - Everything an episode writes lies on a tmpfs with a size and an inode cap ([`quota`]: where
//!   it is mounted, why there is no fallback, how it meets the memory limit): the workspace's dir
//!   (the upper dir, overlayfs's work dir) is one, and each of its runs' work dirs (the run's
//!   `files`, `$HOME`, `$TMPDIR`) is another of the same size, mounted for the run alone. Outside a
//!   workspace a run's work dir is bounded only by its memory limit, and only where the work root
//!   is a tmpfs (`/dev/shm`, the default). Two mounts, not one: an episode that filled its upper
//!   dir must still get a work dir for the run that deletes files (one shared tmpfs made the next
//!   run fail to set up, an infrastructure error instead of `ENOSPC` in a command).
//! - [`Workspace::freeze`] copies a workspace's upper dir out of its tmpfs into a new layer (a
//!   setup's result; [`layer`]): its whiteouts and opaque dirs keep their meaning as a lower
//!   layer.
//! - [`PreparedStore`] ([`prepared`]) keeps frozen layers on disk, outside any work root, for
//!   every later process: its layers are not removed when dropped, and an entry in use is never
//!   evicted.

mod layer;
mod prepared;
pub(crate) mod quota;

use std::ffi::CString;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use env_core::ExecutionResult;

pub use layer::FsLayer;
use layer::{io_err, private_dir};
pub use prepared::{PreparedConfig, PreparedStore, PruneReport, StoredState};

use super::child::{MountOp, cstr};
use super::config::Limits;
use super::fresh::{self, Command};
use super::prepare::{Inner, RunLayout};
use super::request::SandboxError;
use super::uids::{self, RunUid};
use super::{metrics, supervise, workdir};

/// Where a workspace run finds its repository, relative to its work dir (and its cwd).
pub const REPO_DIR: &str = "repo";

/// What a workspace run mounts (prepared by the parent) and as whom.
#[derive(Clone)]
pub(crate) struct OverlayMount {
    /// The workspace's merged dir (its overlay, mounted in the sandbox's namespace).
    pub merged: CString,
    pub uid: Option<u32>,
    /// The run's work dir is a tmpfs of this many MiB (the workspace's quota).
    pub disk_mib: u64,
}

impl OverlayMount {
    /// Puts a bind of the overlay at `target` into a run's mount plan, right after the namespace
    /// is made private (and `/proc` mounted), before host dirs are hidden: the overlay lies in
    /// them.
    pub fn insert_into(
        &self,
        mounts: &mut Vec<MountOp>,
        target: &Path,
    ) -> Result<(), SandboxError> {
        if !mounts.iter().any(|m| matches!(m, MountOp::MakePrivate)) {
            return Err(SandboxError::Setup {
                stage: "workspace overlay",
                source: std::io::Error::other("no mount namespace on this machine"),
            });
        }
        let at = mounts
            .iter()
            .position(|m| !matches!(m, MountOp::MakePrivate | MountOp::Proc))
            .unwrap_or(mounts.len());
        let target =
            cstr(target).ok_or_else(|| SandboxError::InvalidPath(target.display().to_string()))?;
        mounts.insert(
            at,
            MountOp::BindDir {
                src: self.merged.clone(),
                target,
            },
        );
        Ok(())
    }
}

/// One command in a workspace: `/bin/sh -c command` in `repo/`, with `files` written beside
/// `repo/` first (the work dir, also `$HOME` and `$TMPDIR`) and `fetch` read back from there.
#[derive(Debug, Clone, Default)]
pub struct WorkspaceRun {
    pub command: String,
    pub files: Vec<(String, Vec<u8>)>,
    pub fetch: Vec<String>,
    pub stdin: Option<Vec<u8>>,
    /// `None`: the sandbox's default limits.
    pub limits: Option<Limits>,
    /// A package site dir first on `PYTHONPATH` (one of `SandboxConfig::read_only_dirs`).
    pub site_dir: Option<PathBuf>,
}

/// An episode's copy-on-write copy of a prepared state.
pub struct Workspace {
    inner: Arc<Inner>,
    layers: Vec<Arc<FsLayer>>,
    /// `upper/` and overlayfs's `work/` (root-owned, 0700), on the quota's tmpfs.
    dir: PathBuf,
    disk_mib: u64,
    uid: Option<RunUid>,
    /// The overlay at `merged/`, then the tmpfs under it: detached in this order on drop.
    overlay: Option<quota::Mount>,
    quota: Option<quota::Mount>,
    /// The image whose files are the runs' root filesystem (`None`: the host's, read-only).
    root: Option<Arc<crate::image::ImageRoot>>,
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspace")
            .field("dir", &self.dir)
            .field("layers", &self.layers)
            .field("quota", &self.quota)
            .finish()
    }
}

/// Overlay options: `lowerdir` top layer first. Paths with `,` `:` or `\` are refused (they would
/// need escaping); the sandbox names all of them itself.
fn options(layers: &[Arc<FsLayer>], dir: &Path) -> Result<CString, SandboxError> {
    let mut lowers = Vec::with_capacity(layers.len());
    for l in layers.iter().rev() {
        lowers.push(l.dir.join("tree").display().to_string());
    }
    let upper = dir.join("upper").display().to_string();
    let work = dir.join("work").display().to_string();
    for p in lowers.iter().chain([&upper, &work]) {
        if p.contains([',', ':', '\\']) {
            return Err(SandboxError::InvalidPath(p.clone()));
        }
    }
    let s = format!(
        "lowerdir={},upperdir={upper},workdir={work}",
        lowers.join(":")
    );
    CString::new(s).map_err(|e| SandboxError::InvalidPath(e.to_string()))
}

impl Workspace {
    /// A new workspace over `layers` (bottom first), with an empty upper dir owned by its uid.
    /// Its dir is a tmpfs of `disk_mib` MiB (`None`: the sandbox's default; above the sandbox's
    /// maximum: an error), see [`quota`].
    pub(crate) fn create(
        inner: Arc<Inner>,
        layers: Vec<Arc<FsLayer>>,
        disk_mib: Option<u64>,
        root: Option<Arc<crate::image::ImageRoot>>,
    ) -> Result<Workspace, SandboxError> {
        if layers.is_empty() {
            return Err(SandboxError::InvalidPath(
                "a workspace needs a layer".into(),
            ));
        }
        let mib = disk_mib.unwrap_or(inner.config.workspace_disk_mib);
        let max = inner.config.workspace_disk_max_mib;
        if mib == 0 || mib > max {
            return Err(SandboxError::Setup {
                stage: "workspace disk quota",
                source: std::io::Error::other(format!(
                    "a workspace of {mib} MiB asked for; this sandbox allows 1 to {max} MiB \
                     (`workspace_disk_max_mib`)"
                )),
            });
        }
        let uid = match inner.layers.drop_uid {
            true => Some(
                uids::acquire(inner.config.uid_base, inner.config.uid_count)
                    .map_err(SandboxError::setup("uid"))?,
            ),
            false => None,
        };
        let dir = inner.work_root.join(format!("ws-{}", inner.next_id()));
        private_dir(&dir)?;
        let mut ws = Workspace {
            inner,
            layers,
            dir,
            disk_mib: mib,
            uid,
            overlay: None,
            quota: None,
            root,
            one_at_a_time: tokio::sync::Mutex::new(()),
        };
        ws.quota = Some(quota::Mount::tmpfs(&ws.dir, mib, None)?);
        let upper = ws.dir.join("upper");
        private_dir(&ws.dir.join("work"))?;
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(&upper)
            .map_err(io_err(&upper))?;
        if let Some(uid) = &ws.uid {
            std::os::unix::fs::lchown(&upper, Some(uid.get()), Some(uid.get()))
                .map_err(io_err(&upper))?;
        }
        // Mounted once, while the tmpfs is empty: overlayfs needs inodes in `work/` to mount,
        // which an episode that used up its quota would leave none of (a mount per run failed
        // the run that was to delete files).
        let merged = ws.dir.join("merged");
        private_dir(&merged)?;
        ws.overlay = Some(quota::Mount::overlay(
            &merged,
            &options(&ws.layers, &ws.dir)?,
        )?);
        Ok(ws)
    }

    /// The upper dir: what the episode changed (host side; whiteouts mark deletions).
    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }

    /// Runs one command in the workspace (after any run of it still going).
    pub async fn run(
        &self,
        run: WorkspaceRun,
    ) -> Result<(ExecutionResult, Vec<(String, Vec<u8>)>), SandboxError> {
        let _one = self.one_at_a_time.lock().await;
        let limits = run.limits.unwrap_or(self.inner.config.limits);
        let mut files = Vec::with_capacity(run.files.len());
        for (name, data) in &run.files {
            let p = workdir::validate_rel(name)?;
            if p.starts_with(REPO_DIR) {
                return Err(SandboxError::InvalidPath(format!(
                    "{name} (inside {REPO_DIR}/)"
                )));
            }
            files.push((p, data.as_slice()));
        }
        let layout = RunLayout {
            files,
            python_path: run.site_dir.clone(),
            overlay: Some(OverlayMount {
                merged: cstr(&self.dir.join("merged"))
                    .ok_or_else(|| SandboxError::InvalidPath(self.dir.display().to_string()))?,
                uid: self.uid.as_ref().map(RunUid::get),
                disk_mib: self.disk_mib,
            }),
            image_root: self.root.clone(),
            ..RunLayout::default()
        };
        let command = Command {
            argv: vec![
                c"/bin/sh".to_owned(),
                c"-c".to_owned(),
                CString::new(run.command).map_err(|e| SandboxError::InvalidPath(e.to_string()))?,
            ],
            extra_env: Vec::new(),
            address_space: None,
        };
        let admitted = metrics::admit(&self.inner.permits).await?;
        let id = self.inner.next_id();
        let with_stdin = run.stdin.is_some();
        let out = async {
            let started = fresh::start_command(
                &self.inner,
                id,
                &layout,
                &limits,
                command,
                Vec::new(),
                with_stdin,
            )
            .await?;
            supervise::script(started, run.stdin, &limits, run.fetch, None).await
        }
        .await;
        admitted.finished(out.as_ref().map(|(r, _)| r).map_err(|_| ()));
        out
    }

    /// The workspace's changes as a new layer (to stack on its own layers); the workspace ends.
    pub async fn freeze(mut self) -> Result<Arc<FsLayer>, SandboxError> {
        let _one = self.one_at_a_time.lock().await;
        let dir = self
            .inner
            .work_root
            .join(format!("layer-{}", self.inner.next_id()));
        let upper = self.upper();
        // The upper dir is read once the overlay is gone (never under a live mount).
        drop(self.overlay.take());
        tokio::task::spawn_blocking(move || {
            let layer = FsLayer { dir, stored: None };
            layer::copy_upper(&upper, &layer.dir)?;
            Ok(Arc::new(layer))
        })
        .await
        .map_err(|_| SandboxError::Closed)?
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        // Its runs are over (each holds the workspace), so nothing has the overlay mounted; the
        // tmpfs goes with its contents, leaving the empty mount point.
        drop(self.overlay.take());
        drop(self.quota.take());
        workdir::remove(&self.dir);
    }
}

/// A new layer holding the archive `src` unpacked (the image unpacker's rules: nothing outside
/// the layer, no device node; one top-level dir holding everything stripped), then sealed.
pub(crate) async fn import_archive_layer(
    inner: &Inner,
    src: &Path,
) -> Result<Arc<FsLayer>, crate::image::ImageError> {
    use crate::image::ImageError;
    let failed = |path: &Path, e: &dyn std::fmt::Display| ImageError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(e.to_string()),
    };
    let dir = inner.work_root.join(format!("layer-{}", inner.next_id()));
    let from = src.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let layer = FsLayer { dir, stored: None };
        private_dir(&layer.dir).map_err(|e| failed(&from, &e))?;
        let tree = layer.dir.join("tree");
        crate::image::unpack_archive(&from, &tree)?;
        layer::seal(&tree).map_err(|e| failed(&from, &e))?;
        Ok(Arc::new(layer))
    })
    .await
    .map_err(|e| failed(src, &e))?
}

/// A new layer holding one file: a copy of `src` named `name` (a bundle a setup reads).
pub(crate) async fn import_file_layer(
    inner: &Inner,
    src: &Path,
    name: &str,
) -> Result<Arc<FsLayer>, SandboxError> {
    let dir = inner.work_root.join(format!("layer-{}", inner.next_id()));
    let (src, name) = (src.to_path_buf(), name.to_string());
    tokio::task::spawn_blocking(move || {
        let layer = FsLayer { dir, stored: None };
        private_dir(&layer.dir)?;
        let tree = layer.dir.join("tree");
        private_dir(&tree)?;
        let to = tree.join(&name);
        std::fs::copy(&src, &to).map_err(|source| SandboxError::WorkDir { path: src, source })?;
        layer::seal(&tree)?;
        Ok(Arc::new(layer))
    })
    .await
    .map_err(|_| SandboxError::Closed)?
}

/// A new layer holding a copy of `src` (see [`layer::import`]) under `work_root`.
pub(crate) async fn import_layer(inner: &Inner, src: &Path) -> Result<Arc<FsLayer>, SandboxError> {
    let dir = inner.work_root.join(format!("layer-{}", inner.next_id()));
    let src = src.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let layer = FsLayer { dir, stored: None };
        layer::import(&src, &layer.dir)?;
        Ok(Arc::new(layer))
    })
    .await
    .map_err(|_| SandboxError::Closed)?
}
