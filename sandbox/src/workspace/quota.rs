//! A workspace's hard disk quota: its dir (`upper/`, overlayfs's `work/`, the `merged/` mount
//! point) is a tmpfs of its own, mounted by the sandbox with `size=` and `nr_inodes=`, and so is
//! each of its runs' work dirs (the run's `files`, `$HOME` and `$TMPDIR`: the same size again,
//! for that run only). The kernel enforces both caps: a run that writes past them gets `ENOSPC`
//! (an outcome of its command, which deleting files undoes), and no episode can fill the host's
//! disk or inode table, however many tool calls it makes. [`Mount`] is also the workspace's
//! overlay mount, detached the same way.
//!
//! Decisions, and why:
//! - The mount lives in the sandbox's own mount namespace (the server's), at `ws-N` under its work
//!   root, so that every run's namespace (a copy of the server's, its work root bound back with
//!   its submounts) finds the workspace at the same path. Dropping the quota detaches it
//!   (`MNT_DETACH`: a run namespace that still holds a copy lets it go when it ends). A server
//!   killed before that leaves the mount behind in the host's namespace: the sweep of stale work
//!   roots ([`super::super::workdir::sweep_stale`]) detaches every mount under a stale root
//!   before removing it ([`detach_under`]).
//! - Where it cannot be mounted (a sandbox not running as root, or without `CAP_SYS_ADMIN`), the
//!   workspace fails with a `SandboxError`: a workspace without its quota is never created.
//! - Tmpfs pages are memory, charged to the memory cgroup of the run that writes them: a run's
//!   writes count against its own memory limit, so a run whose memory limit is below the quota
//!   is OOM-killed (an outcome too) before it sees `ENOSPC`. Pages written by earlier runs stay
//!   charged where those runs' were (their released groups, or their parent), never to a later
//!   run. The default quota (512
//!   MiB, `SandboxConfig::workspace_disk_mib`) is half the default memory limit of a run, and the
//!   server-wide maximum (`workspace_disk_max_mib`, 4096 MiB) bounds what a task can ask for;
//!   every live workspace can hold its whole quota in the host's memory at once, so size the
//!   maximum with the number of episodes in flight.
//! - Inodes: `nr_inodes` is 64 per MiB of quota (a tmpfs inode costs kernel memory that `size=`
//!   does not count; a tree of tiny files would otherwise be bounded only by the host's memory).

use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};

use super::super::request::SandboxError;

/// Inodes allowed per MiB of quota.
pub const INODES_PER_MIB: u64 = 64;

/// A mount made by the sandbox in its own namespace (a quota's tmpfs, a workspace's overlay);
/// detached on drop.
#[derive(Debug)]
pub(crate) struct Mount {
    dir: PathBuf,
}

fn quota_err(detail: String) -> SandboxError {
    SandboxError::Setup {
        stage: "workspace disk quota",
        source: std::io::Error::other(detail),
    }
}

impl Mount {
    /// Mounts a tmpfs of `mib` MiB (and `mib * INODES_PER_MIB` inodes) at the existing dir `dir`,
    /// its root mode 0700 and owned by `owner` (root if `None`).
    pub fn tmpfs(dir: &Path, mib: u64, owner: Option<u32>) -> Result<Mount, SandboxError> {
        if !nix::unistd::geteuid().is_root() {
            return Err(quota_err(
                "a workspace's disk quota is a tmpfs the sandbox mounts, which needs root; this \
                 sandbox does not run as root, so it cannot serve workspaces"
                    .into(),
            ));
        }
        let id = owner.unwrap_or(0);
        let options = format!(
            "size={mib}m,nr_inodes={},mode=0700,uid={id},gid={id}",
            mib * INODES_PER_MIB
        );
        nix::mount::mount(
            Some("codegym-ws"),
            dir,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(options.as_str()),
        )
        .map_err(|e| {
            quota_err(format!(
                "cannot mount a tmpfs of {mib} MiB at {}: {e}",
                dir.display()
            ))
        })?;
        Ok(Mount {
            dir: dir.to_path_buf(),
        })
    }

    /// Mounts a workspace's overlay (`options`: its layers, upper and work dirs) at `dir`.
    pub fn overlay(dir: &Path, options: &std::ffi::CStr) -> Result<Mount, SandboxError> {
        nix::mount::mount(
            Some("overlay"),
            dir,
            Some("overlay"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(options),
        )
        .map_err(|e| SandboxError::Setup {
            stage: "workspace overlay",
            source: e.into(),
        })?;
        Ok(Mount {
            dir: dir.to_path_buf(),
        })
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Err(e) = nix::mount::umount2(&self.dir, MntFlags::MNT_DETACH) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot unmount a workspace mount");
        }
    }
}

/// Mount points at or under `root` in this process's mount namespace, deepest first.
fn mounts_under(root: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape(p)))
        .filter(|p| p.starts_with(root))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found
}

/// Detaches every mount under `root` (a stale work root's quotas, left by a killed server).
pub(crate) fn detach_under(root: &Path) {
    for m in mounts_under(root) {
        tracing::info!(mount = %m.display(), "detaching a stale workspace quota");
        let _ = nix::mount::umount2(&m, MntFlags::MNT_DETACH);
    }
}

/// `/proc/self/mountinfo` escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && let Some(v) = std::str::from_utf8(&b[i + 1..i + 4])
                .ok()
                .and_then(|o| u8::from_str_radix(o, 8).ok())
        {
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(super::unescape(r"/a\040b/c"), "/a b/c");
        assert_eq!(super::unescape("/plain"), "/plain");
        assert_eq!(super::unescape(r"/end\"), r"/end\");
    }
}
