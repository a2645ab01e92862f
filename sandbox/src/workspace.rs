//! Copy-on-write workspaces: a repository prepared once as read-only [`FsLayer`]s, and per episode
//! a [`Workspace`], an upper dir of its own mounted with the layers as an overlay in each run's own
//! mount namespace.
//!
//! - A layer is a directory under the sandbox's work root (root-owned, mode 0700, unreachable by
//!   path from any run: the work root's other dirs are closed to runs' uids, and Landlock grants a
//!   run only its own work dir). Its files are made writable by anyone ([`seal`]): the overlay
//!   checks permissions on the merged view, and each workspace runs as a uid of its own, so a file
//!   of the prepared state must be writable by whichever uid a workspace gets. The kernel never
//!   writes a lower layer: a write copies the file up into the workspace's upper dir first.
//! - A workspace holds one uid for its whole life (leased like any run's, so no other live run
//!   has it): every run of the episode is the same user and can change what the runs before it
//!   wrote. Its runs are one at a time (an upper dir must not be mounted twice at once).
//! - A run is a fresh execution (`fresh::start_command`) under every layer of any run (uid,
//!   namespaces, rlimits, cgroups, Landlock, seccomp, no network) whose work dir holds the
//!   request's files and `repo/`, where the overlay is mounted and the run starts. The upper dir
//!   persists from run to run; dropping the workspace removes it. Warm-fork runs cannot serve a
//!   workspace: their children are forks of one server and mount nothing per run.
//! - [`Workspace::freeze`] turns a workspace's upper dir into a new layer (a setup's result): its
//!   whiteouts and opaque dirs keep their meaning as a lower layer.

use std::ffi::CString;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use env_core::ExecutionResult;

use super::child::{MountOp, cstr};
use super::config::Limits;
use super::fresh::{self, Command};
use super::prepare::{Inner, RunLayout};
use super::request::SandboxError;
use super::uids::{self, RunUid};
use super::{supervise, workdir};

/// Where a workspace run finds its repository, relative to its work dir (and its cwd).
pub const REPO_DIR: &str = "repo";

/// A read-only directory of a prepared state; removed when the last holder drops it.
#[derive(Debug)]
pub struct FsLayer {
    dir: PathBuf,
}

impl FsLayer {
    /// The layer's directory (the host's view; never a run's).
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for FsLayer {
    fn drop(&mut self) {
        workdir::remove(&self.dir);
    }
}

/// What a workspace run mounts (prepared by the parent) and as whom.
#[derive(Clone)]
pub(crate) struct OverlayMount {
    pub options: CString,
    pub uid: Option<u32>,
}

impl OverlayMount {
    /// Puts the overlay's mount at `target` into a run's mount plan, right after the namespace is
    /// made private (and `/proc` mounted), before host dirs are hidden: the layers lie in them.
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
            MountOp::Overlay {
                target,
                options: self.options.clone(),
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
    /// `upper/` and overlayfs's `work/` (root-owned, 0700).
    dir: PathBuf,
    uid: Option<RunUid>,
    /// The image whose files are the runs' root filesystem (`None`: the host's, read-only).
    root: Option<Arc<crate::image::ImageRoot>>,
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspace")
            .field("dir", &self.dir)
            .field("layers", &self.layers)
            .finish()
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SandboxError + '_ {
    move |source| SandboxError::WorkDir {
        path: path.to_path_buf(),
        source,
    }
}

/// Creates `dir` (root-only) for a layer or a workspace.
fn private_dir(dir: &Path) -> Result<(), SandboxError> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(io_err(dir))
}

/// Copies `src` into a new layer `dir` (regular files, dirs and symlinks, never following one;
/// other file types are left out), then [`seal`]s it.
pub(crate) fn import(src: &Path, dir: &Path) -> Result<(), SandboxError> {
    private_dir(dir)?;
    copy_tree(src, &dir.join("tree"))?;
    seal(&dir.join("tree"))
}

fn copy_tree(src: &Path, dst: &Path) -> Result<(), SandboxError> {
    std::fs::create_dir(dst).map_err(io_err(dst))?;
    for entry in std::fs::read_dir(src).map_err(io_err(src))? {
        let entry = entry.map_err(io_err(src))?;
        let (from, to) = (entry.path(), dst.join(entry.file_name()));
        let kind = entry.file_type().map_err(io_err(&from))?;
        if kind.is_dir() {
            copy_tree(&from, &to)?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&from).map_err(io_err(&from))?;
            std::os::unix::fs::symlink(target, &to).map_err(io_err(&to))?;
        } else if kind.is_file() {
            std::fs::copy(&from, &to).map_err(io_err(&from))?;
        }
    }
    Ok(())
}

/// Makes a layer's tree root-owned and usable by any workspace's uid through the overlay: dirs
/// 0777, files 0666 (0777 if executable by anyone before), no set-id bits. Links are not followed.
pub(crate) fn seal(dir: &Path) -> Result<(), SandboxError> {
    let meta = std::fs::symlink_metadata(dir).map_err(io_err(dir))?;
    let root = nix::unistd::geteuid().is_root();
    if root && (meta.uid() != 0 || meta.gid() != 0) {
        std::os::unix::fs::lchown(dir, Some(0), Some(0)).map_err(io_err(dir))?;
    }
    let kind = meta.file_type();
    if kind.is_symlink() {
        return Ok(());
    }
    let mode = if kind.is_dir() || meta.mode() & 0o111 != 0 {
        0o777
    } else {
        0o666
    };
    // Whiteouts (character devices 0/0) keep their type; only their mode changes.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).map_err(io_err(dir))?;
    if kind.is_dir() {
        for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
            seal(&entry.map_err(io_err(dir))?.path())?;
        }
    }
    Ok(())
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
    pub(crate) fn create(
        inner: Arc<Inner>,
        layers: Vec<Arc<FsLayer>>,
        root: Option<Arc<crate::image::ImageRoot>>,
    ) -> Result<Workspace, SandboxError> {
        if layers.is_empty() {
            return Err(SandboxError::InvalidPath(
                "a workspace needs a layer".into(),
            ));
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
        let ws = Workspace {
            inner,
            layers,
            dir,
            uid,
            root,
            one_at_a_time: tokio::sync::Mutex::new(()),
        };
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
                options: options(&self.layers, &self.dir)?,
                uid: self.uid.as_ref().map(RunUid::get),
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
        let _permit = self
            .inner
            .permits
            .acquire()
            .await
            .map_err(|_| SandboxError::Closed)?;
        let id = self.inner.next_id();
        let with_stdin = run.stdin.is_some();
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

    /// The workspace's changes as a new layer (to stack on its own layers); the workspace ends.
    pub async fn freeze(self) -> Result<Arc<FsLayer>, SandboxError> {
        let _one = self.one_at_a_time.lock().await;
        let dir = self
            .inner
            .work_root
            .join(format!("layer-{}", self.inner.next_id()));
        let upper = self.upper();
        tokio::task::spawn_blocking(move || {
            private_dir(&dir)?;
            let layer = FsLayer { dir };
            std::fs::rename(&upper, layer.dir.join("tree")).map_err(io_err(&upper))?;
            seal(&layer.dir.join("tree"))?;
            Ok(Arc::new(layer))
        })
        .await
        .map_err(|_| SandboxError::Closed)?
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        // Its runs are over (each holds the workspace), so nothing has the overlay mounted.
        workdir::remove(&self.dir);
    }
}

/// A new layer holding a copy of `src` (see [`import`]) under `work_root`.
pub(crate) async fn import_layer(inner: &Inner, src: &Path) -> Result<Arc<FsLayer>, SandboxError> {
    let dir = inner.work_root.join(format!("layer-{}", inner.next_id()));
    let src = src.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let layer = FsLayer { dir };
        import(&src, &layer.dir)?;
        Ok(Arc::new(layer))
    })
    .await
    .map_err(|_| SandboxError::Closed)?
}
