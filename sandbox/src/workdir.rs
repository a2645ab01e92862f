//! Per-execution work dirs: created fresh, owned by the execution's uid, removed without ever
//! following a link the program planted (`remove_dir_all` uses `openat`/`unlinkat` with
//! `O_NOFOLLOW` on Linux since Rust 1.58.1, CVE-2022-21658).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::request::SandboxError;

/// Checks that `rel` is a plain relative path (no `..`, no root, no empty name).
pub(crate) fn validate_rel(rel: &str) -> Result<PathBuf, SandboxError> {
    crate::beneath::validate_rel_path(rel)
        .map(Path::to_path_buf)
        .map_err(|_| SandboxError::InvalidPath(rel.to_string()))
}

fn wd_err(path: &Path) -> impl FnOnce(std::io::Error) -> SandboxError + '_ {
    move |source| SandboxError::WorkDir {
        path: path.to_path_buf(),
        source,
    }
}

/// Creates `dir` (mode 0700) with `files` in it, all owned by `owner` when given.
/// A data task's read-only input files (issue 13), validated: relative, beneath the work dir, and
/// beside the program's `files` and the `outputs/` dir, never over or under them.
pub(crate) fn inputs<'a>(
    data_files: &'a std::collections::BTreeMap<String, std::sync::Arc<[u8]>>,
    files: &[(PathBuf, &[u8])],
) -> Result<Vec<(PathBuf, &'a [u8])>, SandboxError> {
    let mut read_only = Vec::with_capacity(data_files.len());
    for (name, data) in data_files {
        let p = validate_rel(name)?;
        if files
            .iter()
            .any(|(f, _)| f.starts_with(&p) || p.starts_with(f))
            || p.starts_with("outputs")
        {
            return Err(SandboxError::InvalidPath(format!(
                "{name} (an input file clashes with a program file or outputs/)"
            )));
        }
        read_only.push((p, &data[..]));
    }
    Ok(read_only)
}

pub(crate) fn create(
    dir: &Path,
    files: &[(PathBuf, &[u8])],
    owner: Option<(u32, u32)>,
) -> Result<(), SandboxError> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(wd_err(dir))?;
    fill(dir, files, owner)
}

/// Writes `files` into the existing empty dir `dir` (see [`create`]).
pub(crate) fn fill(
    dir: &Path,
    files: &[(PathBuf, &[u8])],
    owner: Option<(u32, u32)>,
) -> Result<(), SandboxError> {
    let mut created = vec![dir.to_path_buf()];
    for (rel, data) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            let mut cur = dir.to_path_buf();
            if let Ok(rest) = parent.strip_prefix(dir) {
                for c in rest.components() {
                    cur.push(c);
                    if !cur.exists() {
                        std::fs::DirBuilder::new()
                            .mode(0o755)
                            .create(&cur)
                            .map_err(wd_err(&cur))?;
                        created.push(cur.clone());
                    }
                }
            }
        }
        // O_EXCL|O_NOFOLLOW: the dir is fresh, but never write through a link anyway.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            // Compiled artifacts must be executable (issue 14); everything else is plain data.
            .mode(if rel.starts_with(crate::lang::ARTIFACT_DIR) {
                0o755
            } else {
                0o644
            })
            .open(&path)
            .map_err(wd_err(&path))?;
        f.write_all(data).map_err(wd_err(&path))?;
        created.push(path);
    }
    if let Some((uid, gid)) = owner {
        for p in &created {
            std::os::unix::fs::lchown(p, Some(uid), Some(gid)).map_err(wd_err(p))?;
        }
    }
    Ok(())
}

/// Data tasks (issue 13): adds the read-only input files to a fresh work dir made by [`create`] (each
/// owned by the server, mode 0444, its missing parent dirs server-owned 0755, so the run's uid can
/// read but not write them), and `outputs/` owned by the run when `outputs_dir`. Names are
/// validated relative paths; nothing here follows a link (the dir is fresh and the program has not
/// started).
pub(crate) fn add_data(
    dir: &Path,
    read_only: &[(PathBuf, &[u8])],
    outputs_dir: bool,
    owner: Option<(u32, u32)>,
) -> Result<(), SandboxError> {
    for (rel, data) in read_only {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(wd_err(parent))?;
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o444)
            .open(&path)
            .map_err(wd_err(&path))?;
        f.write_all(data).map_err(wd_err(&path))?;
    }
    if outputs_dir {
        let out = dir.join("outputs");
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(&out)
            .map_err(wd_err(&out))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::lchown(&out, Some(uid), Some(gid)).map_err(wd_err(&out))?;
        }
    }
    Ok(())
}

/// Removes a work dir; symlinks inside are unlinked, never followed.
pub(crate) fn remove(dir: &Path) {
    // A program may have made its dirs unreadable (chmod 000); root ignores modes, others don't.
    if let Err(e) = std::fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        if let Err(e) = std::fs::remove_dir_all(dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a sandbox work dir");
        }
    }
}

/// Picks the root under which this sandbox creates its work dirs.
pub(crate) fn pick_root(configured: Option<&Path>) -> PathBuf {
    if let Some(p) = configured {
        return p.to_path_buf();
    }
    let shm = Path::new("/dev/shm");
    // SAFETY: access() on a valid C string literal.
    if shm.is_dir()
        && unsafe { libc::access(c"/dev/shm".as_ptr(), libc::W_OK) } == 0
        && !mounted_noexec(shm)
    {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

/// Whether `dir` is on a file system mounted `noexec`, where compiled programs built in a work dir
/// could not run: podman and Docker mount a container's `/dev/shm` so.
fn mounted_noexec(dir: &Path) -> bool {
    use nix::sys::statvfs::{FsFlags, statvfs};
    statvfs(dir).is_ok_and(|s| s.flags().contains(FsFlags::ST_NOEXEC))
}

/// The pid embedded in a `codegym-...-<pid>-...` name (first all-digit segment), if any.
pub(crate) fn owner_pid(name: &str) -> Option<u32> {
    name.strip_prefix("codegym-")?
        .split('-')
        .find_map(|s| s.parse().ok())
}

/// Whether a `codegym-*` entry belongs to a process that is gone (a crashed or killed server).
pub(crate) fn is_stale(name: &str) -> bool {
    owner_pid(name).is_some_and(|pid| {
        pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
    })
}

/// Removes work roots left behind by dead processes (a SIGKILLed server cannot clean up).
pub(crate) fn sweep_stale(root: &Path) {
    for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if is_stale(&name) && e.file_type().is_ok_and(|t| t.is_dir()) {
            tracing::info!(dir = %e.path().display(), "removing a stale sandbox work root");
            // Its workspaces' quotas (tmpfs mounts) outlive a killed server in this namespace.
            crate::workspace::quota::detach_under(&e.path());
            remove(&e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_paths_must_stay_inside() {
        for ok in ["a.py", "pkg/mod.py", "./x"] {
            assert!(validate_rel(ok).is_ok(), "{ok}");
        }
        for bad in ["", "/etc/passwd", "../x", "a/../../x", ".", "a\0b"] {
            assert!(validate_rel(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn stale_names_carry_their_owner_pid() {
        assert_eq!(owner_pid("codegym-123-00ab12cd"), Some(123));
        assert_eq!(owner_pid("codegym-hostile-guard-77"), Some(77));
        assert_eq!(owner_pid("other-123"), None);
        assert!(!is_stale(&format!("codegym-{}-abc", std::process::id())));
        // pid_max here is far below this, so no such process can exist.
        assert!(is_stale("codegym-4000000000-abc"));
    }

    #[test]
    fn removal_never_follows_planted_links() {
        let base = std::env::temp_dir().join(format!("codegym-wd-test-{}", std::process::id()));
        let victim = base.join("victim");
        let dir = base.join("run");
        std::fs::create_dir_all(&victim).expect("victim");
        std::fs::write(victim.join("keep"), "x").expect("keep");
        create(&dir, &[(PathBuf::from("sub/f"), b"1".as_slice())], None).expect("create");
        std::os::unix::fs::symlink(&victim, dir.join("link")).expect("link");
        std::os::unix::fs::symlink(victim.join("keep"), dir.join("sub/keep")).expect("link");
        remove(&dir);
        assert!(!dir.exists());
        assert!(victim.join("keep").exists());
        std::fs::remove_dir_all(&base).expect("cleanup");
    }
}
