//! Read-only layers: a repository imported once ([`import`]), or a frozen workspace's changes
//! copied out of its quota's tmpfs ([`copy_upper`]), then [`seal`]ed.
//!
//! A frozen upper dir keeps its overlay meaning as a lower layer only if its markers survive the
//! copy: whiteouts (character devices 0/0, made again with `mknod`) and the `trusted.overlay.*`
//! xattrs that change a dir's lookup (`opaque`: nothing below shows through; `redirect`: a renamed
//! lower dir). Other overlay xattrs (`origin`, `impure`) describe the upper fs's inodes and are
//! dropped. A rename cannot do this: the upper dir lies on the workspace's own tmpfs, another file
//! system than the layers'.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::super::request::SandboxError;
use super::super::workdir;

/// A read-only directory of a prepared state; removed when the last holder drops it, unless it is
/// a layer of the persistent store ([`super::prepared`]), which outlives the process.
#[derive(Debug)]
pub struct FsLayer {
    pub(super) dir: PathBuf,
    /// A stored layer's hold on its entry (a shared lock: the entry is not evicted while held).
    pub(super) stored: Option<Arc<super::prepared::EntryLock>>,
}

impl FsLayer {
    /// The layer's directory (the host's view; never a run's).
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for FsLayer {
    fn drop(&mut self) {
        if self.stored.is_none() {
            workdir::remove(&self.dir);
        }
    }
}

pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SandboxError + '_ {
    move |source| SandboxError::WorkDir {
        path: path.to_path_buf(),
        source,
    }
}

/// Creates `dir` (root-only) for a layer or a workspace.
pub(super) fn private_dir(dir: &Path) -> Result<(), SandboxError> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(io_err(dir))
}

/// Copies `src` into a new layer `dir` (regular files, dirs and symlinks, never following one;
/// other file types are left out), then [`seal`]s it.
pub(crate) fn import(src: &Path, dir: &Path) -> Result<(), SandboxError> {
    private_dir(dir)?;
    copy_tree(src, &dir.join("tree"), false)?;
    seal(&dir.join("tree"))
}

/// A frozen workspace's upper dir `upper` as the new layer `dir` (whiteouts and opaque dirs
/// kept), [`seal`]ed.
pub(super) fn copy_upper(upper: &Path, dir: &Path) -> Result<(), SandboxError> {
    private_dir(dir)?;
    copy_tree(upper, &dir.join("tree"), true)?;
    seal(&dir.join("tree"))
}

/// The overlay xattrs a lower layer must keep (see the module doc).
const OVERLAY_XATTRS: [&std::ffi::CStr; 2] =
    [c"trusted.overlay.opaque", c"trusted.overlay.redirect"];

fn c_path(p: &Path) -> Result<CString, SandboxError> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| SandboxError::InvalidPath(p.display().to_string()))
}

/// Copies a dir's overlay xattrs from `from` to `to` (both dirs, neither a link).
fn copy_overlay_xattrs(from: &Path, to: &Path) -> Result<(), SandboxError> {
    let (cf, ct) = (c_path(from)?, c_path(to)?);
    for name in OVERLAY_XATTRS {
        let mut buf = [0u8; 4096];
        // SAFETY: valid C strings and a buffer of the length passed.
        let n = unsafe {
            libc::lgetxattr(
                cf.as_ptr(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENODATA) {
                continue;
            }
            return Err(io_err(from)(e));
        }
        // SAFETY: as above; `n` bytes of `buf` were written.
        let r = unsafe {
            libc::lsetxattr(
                ct.as_ptr(),
                name.as_ptr(),
                buf.as_ptr().cast(),
                n as usize,
                0,
            )
        };
        if r < 0 {
            return Err(io_err(to)(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Copies `src` to `dst` without following links: dirs, regular files (with their modes) and
/// symlinks; with `overlay`, also whiteouts and the dirs' overlay xattrs. Everything else (other
/// devices, fifos, sockets) is left out: a layer holds no device but a whiteout.
fn copy_tree(src: &Path, dst: &Path, overlay: bool) -> Result<(), SandboxError> {
    std::fs::create_dir(dst).map_err(io_err(dst))?;
    if overlay {
        copy_overlay_xattrs(src, dst)?;
    }
    for entry in std::fs::read_dir(src).map_err(io_err(src))? {
        let entry = entry.map_err(io_err(src))?;
        let (from, to) = (entry.path(), dst.join(entry.file_name()));
        let kind = entry.file_type().map_err(io_err(&from))?;
        if kind.is_dir() {
            copy_tree(&from, &to, overlay)?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&from).map_err(io_err(&from))?;
            std::os::unix::fs::symlink(target, &to).map_err(io_err(&to))?;
        } else if kind.is_file() {
            std::fs::copy(&from, &to).map_err(io_err(&from))?;
        } else if overlay && kind.is_char_device() {
            let meta = std::fs::symlink_metadata(&from).map_err(io_err(&from))?;
            if meta.rdev() == 0 {
                nix::sys::stat::mknod(
                    &to,
                    nix::sys::stat::SFlag::S_IFCHR,
                    nix::sys::stat::Mode::from_bits_truncate(0o600),
                    0,
                )
                .map_err(|e| io_err(&to)(e.into()))?;
            }
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
