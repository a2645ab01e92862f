//! An image as a run's root filesystem ([`ImageRoot`]): the image's layers from the
//! [`LayerStore`](super::LayerStore) under a small generated layer, mounted read-only as an
//! overlay in the run's own mount namespace, with a fresh `/proc`, a minimal `/dev` (null, zero,
//! full, random, urandom in a tmpfs of its own), a tmpfs `/tmp`, the run's work dir bound at
//! [`WORK_DIR`] (a workspace's repository overlay riding along at `WORK_DIR/repo`), then
//! `pivot_root` into it, the host's root detached: nothing of the host's filesystem is reachable.
//!
//! - The generated layer (root-owned, in the sandbox's work root) holds the mount points the
//!   image may lack (`proc`, `dev`, `tmp`, `codegym`), so no image layer is ever written; it is
//!   the top layer, so its dirs win over an image's files of those names.
//! - The overlay has no upper dir and is mounted read-only: there is no writable path into the
//!   layers. Writable: the run's work dir and `/tmp` (a tmpfs charged to the run's memory cgroup).
//! - Every other layer still applies (uid, namespaces, rlimits, cgroups, seccomp, no network).
//!   Landlock's rules for the host's system dirs point at inodes the run no longer reaches; the
//!   run gets rules for the image's own paths instead (read on `/`, read and write on `/tmp` and
//!   the device files), opened by the child once it has pivoted. A machine without mount and PID
//!   namespaces cannot run an image root: the run fails, it never falls back to the host's root.
//! - The environment is the image's, not the host interpreter's: a standard `PATH`, `HOME` the
//!   work dir, `TMPDIR=/tmp`.
//! - [`RootPaths`] places a workspace's repository at a path of the image's own (a Harbor task's
//!   `/app`: bound there, where runs start) and makes scratch dirs (its `/tests`,
//!   `/logs/verifier`): a fresh, empty tmpfs in every run, writable, gone when the run ends, so
//!   nothing one run leaves there reaches another (an agent's command cannot pre-plant a reward
//!   file for the scoring run). Their mount points are dirs of the generated layer, so `/` stays
//!   read-only.

use std::ffi::CString;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use super::Image;
use crate::child::{MountOp, cstr};
use crate::prepare::Inner;
use crate::request::SandboxError;
use crate::workspace::OverlayMount;

/// Where a run's work dir is in an image root (its cwd, or `WORK_DIR/repo` for a workspace).
pub const WORK_DIR: &str = "/codegym";

/// Mount points of every image root (dirs of the generated layer).
const MOUNT_POINTS: [&str; 4] = ["proc", "dev", "tmp", "codegym"];

/// `/dev`'s device files: (name, major, minor), the same as a container runtime's minimal set.
const DEVICES: [(&str, u32, u32); 5] = [
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
];

/// The largest overlay option string the kernel takes (one page).
const MAX_OPTIONS: usize = 4095;

/// Paths of an image root besides the defaults, absolute, none inside another nor in `/proc`,
/// `/dev`, `/tmp` or [`WORK_DIR`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RootPaths {
    /// Where a workspace's repository is (default `WORK_DIR/repo`); its runs start there.
    pub work_dir: Option<String>,
    /// Dirs that are a fresh, empty, writable tmpfs in every run.
    pub scratch: Vec<String>,
}

impl RootPaths {
    /// Every path, relative to the root, after checking it (see the type's doc).
    fn relative(&self) -> Result<Vec<PathBuf>, SandboxError> {
        let mut out: Vec<PathBuf> = Vec::new();
        for p in self.work_dir.iter().chain(&self.scratch) {
            let bad = || SandboxError::InvalidPath(format!("{p:?} as a dir of an image root"));
            let rel = Path::new(p).strip_prefix("/").map_err(|_| bad())?;
            let normal = rel
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
            let top = rel
                .components()
                .next()
                .map(|c| c.as_os_str().to_os_string());
            let reserved = top.is_some_and(|t| MOUNT_POINTS.iter().any(|m| t == *m));
            if !normal || rel.as_os_str().is_empty() || reserved {
                return Err(bad());
            }
            if out.iter().any(|o| o.starts_with(rel) || rel.starts_with(o)) {
                return Err(SandboxError::InvalidPath(format!(
                    "{p:?} lies inside another dir of the image root, or holds one"
                )));
            }
            out.push(rel.to_path_buf());
        }
        Ok(out)
    }
}

/// An image prepared as a root filesystem; its generated layer is removed on drop.
#[derive(Debug)]
pub struct ImageRoot {
    /// The image's layer dirs, bottom first (owned by the store).
    layers: Vec<PathBuf>,
    /// `gen/` (the generated layer) and `mnt/` (the mount point), root-owned, 0700.
    dir: PathBuf,
    /// The image config's environment (`Image::env`).
    env: Vec<String>,
    paths: RootPaths,
}

impl Drop for ImageRoot {
    fn drop(&mut self) {
        crate::workdir::remove(&self.dir);
    }
}

/// What a run in an image root is given instead of the host's mount plan.
pub(crate) struct RootPlan {
    pub mounts: Vec<MountOp>,
    pub workdir: PathBuf,
    pub envp: Vec<CString>,
    pub landlock_paths: Vec<(CString, u64)>,
    /// Where a workspace's repository is (its runs' cwd).
    pub repo_dir: PathBuf,
}

fn wd_err(path: &Path) -> impl FnOnce(std::io::Error) -> SandboxError + '_ {
    move |source| SandboxError::WorkDir {
        path: path.to_path_buf(),
        source,
    }
}

fn c(p: &Path) -> Result<CString, SandboxError> {
    cstr(p).ok_or_else(|| SandboxError::InvalidPath(p.display().to_string()))
}

impl ImageRoot {
    /// Prepares `image` under the sandbox's work root (blocking: a few mkdirs), with `paths`'s
    /// mount points made in its generated layer.
    pub(crate) fn create(
        inner: &Inner,
        image: &Image,
        paths: RootPaths,
    ) -> Result<ImageRoot, SandboxError> {
        let extra = paths.relative()?;
        let dir = inner.work_root.join(format!("root-{}", inner.next_id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(wd_err(&dir))?;
        let root = ImageRoot {
            layers: image.layers.iter().map(|l| l.dir.clone()).collect(),
            dir,
            env: image.env.clone(),
            paths,
        };
        let made = root.dir.join("gen");
        let mut b = std::fs::DirBuilder::new();
        b.mode(0o755);
        b.create(&made).map_err(wd_err(&made))?;
        for d in MOUNT_POINTS {
            b.create(made.join(d)).map_err(wd_err(&made))?;
        }
        b.recursive(true);
        for d in extra {
            b.create(made.join(d)).map_err(wd_err(&made))?;
        }
        b.create(root.dir.join("mnt")).map_err(wd_err(&root.dir))?;
        Ok(root)
    }

    /// The mount plan of one run whose host work dir is `workdir` (`repo`: a workspace's overlay,
    /// mounted at `workdir/repo` first and bound into the root with it).
    pub(crate) fn plan(
        &self,
        inner: &Inner,
        workdir: &Path,
        repo: Option<&OverlayMount>,
    ) -> Result<RootPlan, SandboxError> {
        let flags = inner.layers.clone_flags;
        let private = inner
            .layers
            .mounts
            .iter()
            .any(|m| matches!(m, MountOp::MakePrivate));
        if !private || flags & libc::CLONE_NEWPID as u64 == 0 {
            return Err(SandboxError::Setup {
                stage: "image root",
                source: std::io::Error::other("no mount and PID namespaces on this machine"),
            });
        }
        let mnt = self.dir.join("mnt");
        let mut lowers = vec![self.dir.join("gen").display().to_string()];
        lowers.extend(self.layers.iter().rev().map(|l| l.display().to_string()));
        if lowers.iter().any(|p| p.contains([',', ':', '\\'])) {
            return Err(SandboxError::InvalidPath(lowers.join(" ")));
        }
        let options = format!("lowerdir={}", lowers.join(":"));
        if options.len() > MAX_OPTIONS {
            return Err(SandboxError::InvalidPath(format!(
                "an image of {} layers (its overlay options exceed a page)",
                self.layers.len()
            )));
        }
        let mut mounts = vec![MountOp::MakePrivate, MountOp::Hold(c(workdir)?)];
        if let Some(repo) = repo {
            repo.insert_into(&mut mounts, &workdir.join(crate::workspace::REPO_DIR))?;
        }
        let mount = |fstype, at: &str, flags, data: &str| -> Result<MountOp, SandboxError> {
            Ok(MountOp::Mount {
                fstype,
                target: c(&mnt.join(at))?,
                flags,
                data: CString::new(data).map_err(|e| SandboxError::InvalidPath(e.to_string()))?,
            })
        };
        let (nosuid, nodev, noexec) = (libc::MS_NOSUID, libc::MS_NODEV, libc::MS_NOEXEC);
        mounts.push(mount(
            c"overlay",
            "",
            libc::MS_RDONLY | nosuid | nodev,
            &options,
        )?);
        mounts.push(mount(c"proc", "proc", nosuid | nodev | noexec, "")?);
        mounts.push(mount(
            c"tmpfs",
            "dev",
            nosuid | noexec,
            "mode=0755,size=64k",
        )?);
        for (name, major, minor) in DEVICES {
            mounts.push(MountOp::CharDev {
                path: c(&mnt.join("dev").join(name))?,
                major,
                minor,
            });
        }
        let tmp_size = format!(
            "mode=1777,size={}",
            inner.config.limits.memory_bytes.max(1 << 20)
        );
        mounts.push(mount(c"tmpfs", "tmp", nosuid | nodev, &tmp_size)?);
        let work = mnt.join(WORK_DIR.trim_start_matches('/'));
        mounts.push(MountOp::Bind {
            held: 0,
            dst: c(&work)?,
            read_only: false,
        });
        let access = crate::isolation::image_root_access();
        let mut landlock_paths = Vec::new();
        let mut repo_dir = Path::new(WORK_DIR).join(crate::workspace::REPO_DIR);
        if let (Some(at), Some(_)) = (&self.paths.work_dir, repo) {
            // The overlay itself (a plain bind of its mount's root), now in the root.
            mounts.push(MountOp::BindDir {
                src: c(&work.join(crate::workspace::REPO_DIR))?,
                target: c(&mnt.join(at.trim_start_matches('/')))?,
            });
            landlock_paths.push((c(Path::new(at))?, access.all));
            repo_dir = PathBuf::from(at);
        }
        for at in &self.paths.scratch {
            mounts.push(mount(
                c"tmpfs",
                at.trim_start_matches('/'),
                nosuid | nodev,
                &tmp_size,
            )?);
            landlock_paths.push((c(Path::new(at))?, access.all));
        }
        mounts.push(MountOp::PivotRoot(c(&mnt)?));

        landlock_paths.extend([
            (c"/".to_owned(), access.read),
            (c"/proc".to_owned(), crate::isolation::proc_access()),
            (c"/tmp".to_owned(), access.all),
        ]);
        for (name, _, _) in DEVICES {
            landlock_paths.push((c(&Path::new("/dev").join(name))?, access.device));
        }
        let envp = run_env(&self.env)
            .into_iter()
            .filter_map(|s| CString::new(s).ok())
            .collect();
        Ok(RootPlan {
            mounts,
            workdir: PathBuf::from(WORK_DIR),
            envp,
            landlock_paths,
            repo_dir,
        })
    }
}

/// A run's environment in an image root: the image config's (`PATH` and `LANG` default to the usual
/// ones where it sets none), then what the sandbox decides whatever the image says (`HOME` the work
/// dir, `TMPDIR` the run's tmpfs, one OpenMP thread).
fn run_env(image: &[String]) -> Vec<String> {
    const FORCED: [&str; 3] = ["HOME", "TMPDIR", "OMP_NUM_THREADS"];
    let name = |e: &str| e.split_once('=').map_or(e, |(n, _)| n).to_string();
    let mut env: Vec<String> = Vec::with_capacity(image.len() + 5);
    for (n, default) in [
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ),
        ("LANG", "C.UTF-8"),
    ] {
        if !image.iter().any(|e| name(e) == n) {
            env.push(format!("{n}={default}"));
        }
    }
    for e in image {
        let n = name(e);
        if FORCED.contains(&n.as_str()) {
            continue;
        }
        // A name set twice: the later entry wins, as a shell's `export` would have it.
        env.retain(|kept| name(kept) != n);
        env.push(e.clone());
    }
    env.push(format!("HOME={WORK_DIR}"));
    env.push("TMPDIR=/tmp".to_string());
    env.push("OMP_NUM_THREADS=1".to_string());
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_images_environment_with_the_sandboxs_own_on_top() {
        let image = [
            "PATH=/opt/conda/envs/testbed/bin:/usr/bin".to_string(),
            "HOME=/root".to_string(),
            "TMPDIR=/var/tmp".to_string(),
            "FOO=1".to_string(),
            "FOO=2".to_string(),
        ];
        assert_eq!(
            run_env(&image),
            [
                "LANG=C.UTF-8".to_string(),
                "PATH=/opt/conda/envs/testbed/bin:/usr/bin".to_string(),
                "FOO=2".to_string(),
                format!("HOME={WORK_DIR}"),
                "TMPDIR=/tmp".to_string(),
                "OMP_NUM_THREADS=1".to_string(),
            ]
        );
        let none = run_env(&[]);
        assert!(none[0].starts_with("PATH=/usr/local/sbin:"), "{none:?}");
    }
}
