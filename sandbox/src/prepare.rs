//! The execution toolbox both backends and sessions prepare from: the state a sandbox shares with
//! its executions ([`Inner`]), the guard that cleans an execution up however it ends
//! ([`RunGuard`]: work dir, cgroup, child), and what every execution is given: its uid, pipes,
//! rlimits, the interpreter's argv and environment, its Landlock ruleset.
//!
//! Backends decide *how* a program starts (a fresh `clone3` + `execve`, or a fork of the warm
//! server); everything here is *what* it starts with, so both isolate alike.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::cgroup::{self, Lease, RunCgroup};
use super::child::cstr;
use super::config::{Limits, SandboxConfig, SitePackages};
use super::isolation::{self, IsolationReport};
use super::probe::Layers;
use super::python::PythonInfo;
use super::request::SandboxError;
use super::spawn::{self, Spawned};
use super::uids::{self, RunUid};
use super::workdir;

/// What a sandbox knows, shared by all its executions (and kept alive by a live session).
pub(crate) struct Inner {
    pub config: SandboxConfig,
    pub python: PythonInfo,
    pub report: IsolationReport,
    pub layers: Layers,
    /// This sandbox's private dir under the configured work root.
    pub work_root: PathBuf,
    pub permits: tokio::sync::Semaphore,
    pub max_concurrent: usize,
    /// The system part of every run's Landlock rules, opened at the first run.
    landlock_base: std::sync::OnceLock<isolation::LandlockBase>,
}

impl Inner {
    pub fn new(
        config: SandboxConfig,
        python: PythonInfo,
        report: IsolationReport,
        layers: Layers,
        work_root: PathBuf,
        max_concurrent: usize,
    ) -> Inner {
        Inner {
            config,
            python,
            report,
            layers,
            work_root,
            permits: tokio::sync::Semaphore::new(max_concurrent),
            max_concurrent,
            landlock_base: std::sync::OnceLock::new(),
        }
    }

    /// A fresh execution id: it names the work dir and the cgroup (the uid is `uids.rs`'s). One
    /// sequence for every sandbox of this process.
    pub fn next_id(&self) -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The warm backend's server (its cgroup lives under the root removed below) holds an
        // `Arc` of this, so it is always gone by now.
        workdir::remove(&self.work_root);
        if let Some(cg) = &self.layers.cgroup {
            cgroup::remove_root(cg);
        }
    }
}

/// Cleans up an execution however it ends (also when the future is dropped): kills and reaps the
/// child, removes the cgroup and the work dir, and then gives the run's uid back. Blocking; the
/// normal path drops it on a blocking thread.
#[derive(Default)]
pub(crate) struct RunGuard {
    pub workdir: Option<PathBuf>,
    pub cgroup: Option<RunCgroup>,
    pub child: Option<Spawned>,
    /// A warm run's groups (`cgroup/pool.rs`), shared with its fork server's reply: they go back
    /// once the run's tree is gone and, dropped after the body of `drop`, its work dir removed.
    pub cell: Option<Arc<Lease>>,
    /// Dropped after the body of `drop` (fields drop last): only once the tree is gone. A warm run
    /// hands it to its fork server's reply instead (`warm/server.rs`).
    pub uid: Option<RunUid>,
    /// A workspace's uid (`workspace/`), held by the workspace for its whole life: every run of
    /// one workspace is the same user, so each can change what the runs before it wrote.
    pub lent_uid: Option<u32>,
    /// A workspace run's work dir is a tmpfs of its own: unmounted before the dir is removed.
    pub quota: Option<crate::workspace::quota::Mount>,
}

impl RunGuard {
    /// Creates execution `id`'s private work dir with the layout's files (the program's owned by its
    /// uid, the read-only ones by the server); the guard removes it. Returns the guard and the dir.
    pub fn with_workdir(
        inner: &Inner,
        id: u64,
        layout: &RunLayout<'_>,
    ) -> Result<(RunGuard, PathBuf), SandboxError> {
        let workdir = inner.work_root.join(format!("run-{id}"));
        let uid = match inner.layers.drop_uid && layout.overlay.is_none() {
            true => Some(
                uids::acquire(inner.config.uid_base, inner.config.uid_count)
                    .map_err(SandboxError::setup("uid"))?,
            ),
            false => None,
        };
        let mut guard = RunGuard {
            workdir: Some(workdir.clone()),
            cgroup: None,
            child: None,
            cell: None,
            uid,
            lent_uid: layout.overlay.as_ref().and_then(|o| o.uid),
            quota: None,
        };
        let ids = guard.ids();
        match &layout.overlay {
            // A workspace run's work dir is a tmpfs of the workspace's quota (`workspace/quota.rs`).
            Some(o) => {
                workdir::create(&workdir, &[], None)?;
                guard.quota = Some(crate::workspace::quota::Mount::tmpfs(
                    &workdir,
                    o.disk_mib,
                    ids.map(|(u, _)| u),
                )?);
                workdir::fill(&workdir, &layout.files, ids)?;
            }
            None => workdir::create(&workdir, &layout.files, ids)?,
        }
        workdir::add_data(&workdir, &layout.read_only, layout.outputs_dir, ids)?;
        if layout.overlay.is_some() {
            // The workspace's mount point: the overlay covers it in the run's mount namespace.
            workdir::create(&workdir.join(crate::workspace::REPO_DIR), &[], ids)?;
        }
        Ok((guard, workdir))
    }

    /// The uid/gid the execution runs as (`None`: the supervisor cannot drop privileges).
    pub fn ids(&self) -> Option<(u32, u32)> {
        self.uid
            .as_ref()
            .map(RunUid::get)
            .or(self.lent_uid)
            .map(|u| (u, u))
    }

    /// The cgroup's memory view: its peak, and whether it OOM-killed (`(None, false)` without one).
    pub fn memory_stats(&self) -> (Option<u64>, bool) {
        match (&self.cgroup, &self.cell) {
            (Some(c), _) => c.memory_stats(),
            (None, Some(cell)) => cell.memory_stats(),
            (None, None) => (None, false),
        }
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            spawn::kill_and_reap(&child);
        }
        if let Some(cg) = self.cgroup.take() {
            cg.kill_all();
            cg.remove_blocking();
        }
        drop(self.quota.take());
        if let Some(dir) = self.workdir.take() {
            workdir::remove(&dir);
        }
    }
}

/// What a script's work dir and argv hold: the program's own files, and (issue 13, data tasks) the
/// read-only input files, the `outputs/` directory and the arguments after `main.py`.
#[derive(Default)]
pub(crate) struct RunLayout<'a> {
    /// Owned by the run (its uid may rewrite them): `main.py` and the request's files.
    pub files: Vec<(PathBuf, &'a [u8])>,
    // Data tasks (issue 13).
    /// Owned by the server, mode 0444, in server-owned parent dirs: readable, not writable.
    pub read_only: Vec<(PathBuf, &'a [u8])>,
    /// Create `outputs/`, owned by the run, for its declared outputs.
    pub outputs_dir: bool,
    /// `--name value` arguments after `main.py`.
    pub args: Vec<String>,
    /// A package-cache site dir, first on `sys.path` after the work dir.
    pub python_path: Option<PathBuf>,
    /// A workspace run: the overlay mounted at `REPO_DIR` in the work dir, the run's cwd.
    pub overlay: Option<crate::workspace::OverlayMount>,
    /// The run's root filesystem is this image's (`image/root.rs`), not the host's.
    pub image_root: Option<Arc<crate::image::ImageRoot>>,
}

/// Bytes read from a pipe at a time. Small on purpose: a zeroed allocation of 16 KiB or more is a
/// "large" one for jemalloc, which zeroes a recycled extent with `madvise`, a TLB shootdown across
/// cores; three 64 KiB buffers per run cost ~5% of the host side's CPU.
pub(crate) const SCRATCH: usize = 8 << 10;

pub(crate) fn pipe_pair() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let (r, w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| SandboxError::Setup {
            stage: "pipe",
            source: e.into(),
        })?;
    Ok((r, w))
}

/// The child's stdin and our end of it: a pipe when there is input, else `/dev/null`.
pub(crate) fn stdin_pair(with_stdin: bool) -> Result<(OwnedFd, Option<OwnedFd>), SandboxError> {
    if with_stdin {
        let (r, w) = pipe_pair()?;
        Ok((r, Some(w)))
    } else {
        let null = std::fs::File::open("/dev/null").map_err(SandboxError::setup("/dev/null"))?;
        Ok((OwnedFd::from(null), None))
    }
}

pub(crate) fn rlimits(
    limits: &Limits,
    memory_cgroup: bool,
) -> Vec<(libc::__rlimit_resource_t, u64, u64)> {
    rlimits_with(limits, memory_cgroup, None)
}

/// [`rlimits`] with a per-language `RLIMIT_AS` (issue 14: the JVM and V8 reserve address space
/// far beyond their heap); `None`: the memory limit.
pub(crate) fn rlimits_with(
    limits: &Limits,
    memory_cgroup: bool,
    address_space: Option<u64>,
) -> Vec<(libc::__rlimit_resource_t, u64, u64)> {
    let cpu_s = limits.cpu_ms.div_ceil(1000).max(1);
    let nofile = u64::from(limits.max_open_files.max(16));
    let mut v = vec![
        (libc::RLIMIT_CPU, cpu_s, cpu_s + 1),
        (
            libc::RLIMIT_FSIZE,
            limits.max_file_bytes,
            limits.max_file_bytes,
        ),
        (libc::RLIMIT_NOFILE, nofile, nofile),
        (libc::RLIMIT_CORE, 0, 0),
        (
            libc::RLIMIT_NPROC,
            u64::from(limits.max_processes.max(1)),
            u64::from(limits.max_processes.max(1)),
        ),
        (libc::RLIMIT_MEMLOCK, 0, 0),
        (libc::RLIMIT_MSGQUEUE, 0, 0),
    ];
    if !memory_cgroup {
        // Per-process address space: cruder than a cgroup (breaks some numpy code), but bounded.
        let bytes = address_space.unwrap_or(limits.memory_bytes);
        v.push((libc::RLIMIT_AS, bytes, bytes));
    }
    v
}

/// `python -s -B [-S]`: no user site, no bytecode files; `-S` unless `site` is wanted. The work
/// dir stays on `sys.path` (unlike `-I`, whose `-P` drops it) so extra files can be imported. `-E`
/// is not needed: the environment is built from scratch, and `SitePackages::Paths` relies on
/// `PYTHONPATH`.
pub(crate) fn interpreter_argv(inner: &Inner) -> Result<Vec<CString>, SandboxError> {
    let py = cstr(&inner.python.exe)
        .ok_or_else(|| SandboxError::PythonNotFound("NUL in path".into()))?;
    let mut argv = vec![py, c"-s".to_owned(), c"-B".to_owned()];
    if inner.config.site_packages != SitePackages::Full {
        argv.push(c"-S".to_owned());
    }
    Ok(argv)
}

/// The child's whole environment: nothing of the host's (its secrets) is passed on.
pub(crate) fn environment(inner: &Inner, workdir: &Path) -> Vec<CString> {
    let bin_dir = inner
        .python
        .exe
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    [
        format!("PATH={bin_dir}:/usr/local/bin:/usr/bin:/bin"),
        format!("HOME={}", workdir.display()),
        format!("TMPDIR={}", workdir.display()),
        // Data tasks (issue 13): where typed outputs go (the warm server sets its own per run).
        format!("CODEGYM_OUTPUTS={}/outputs", workdir.display()),
        "LANG=C.UTF-8".to_string(),
        "PYTHONDONTWRITEBYTECODE=1".to_string(),
        "PYTHONIOENCODING=utf-8".to_string(),
        "OMP_NUM_THREADS=1".to_string(),
    ]
    .into_iter()
    .chain(python_path(
        &inner.config.site_packages,
        &inner.python.site_dirs,
    ))
    .filter_map(|s| CString::new(s).ok())
    .collect()
}

/// `PYTHONPATH=<site-packages dirs>` for [`SitePackages::Paths`].
fn python_path(mode: &SitePackages, dirs: &[PathBuf]) -> Option<String> {
    if *mode != SitePackages::Paths || dirs.is_empty() {
        return None;
    }
    let joined: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Some(format!("PYTHONPATH={}", joined.join(":")))
}

/// The per-execution Landlock ruleset (read the system and Python, write `workdir`), if enabled.
pub(crate) fn landlock_ruleset(
    inner: &Inner,
    workdir: &Path,
) -> Result<Option<OwnedFd>, SandboxError> {
    if !inner.layers.landlock {
        return Ok(None);
    }
    let base = inner.landlock_base.get_or_init(|| {
        let mut trees = inner.python.prefixes.clone();
        if let Some(bin) = inner.python.exe.parent() {
            trees.push(bin.to_path_buf());
        }
        isolation::LandlockBase::new(&trees)
    });
    isolation::landlock_ruleset(workdir, base).map_err(|e| SandboxError::Setup {
        stage: "landlock",
        source: std::io::Error::other(e),
    })
}
