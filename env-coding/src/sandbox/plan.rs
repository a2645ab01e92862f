//! From a request to a running, supervised child: preparing an execution ([`Prepared`]: work
//! dir, cgroup, pipes, [`spawn::ChildPlan`]) and supervising a one-shot script to its
//! [`ExecOutcome`].
//!
//! This is the seam for a second backend: `Prepared::new` decides *what* runs (work dir, limits,
//! layers); `spawn` is the only code that knows *how* (fresh `clone3` + `execve`). A warm-fork
//! backend would replace the `spawn::spawn_blocking` call; supervision stays as is.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::net::unix::pipe;

use super::Inner;
use super::cgroup::RunCgroup;
use super::config::{Limits, SitePackages};
use super::forked::Forked;
use super::isolation;
use super::outcome::{ExecOutcome, SandboxError};
use super::probe::cstr;
use super::spawn::{self, ChildPlan, Spawned};
use super::supervise::{self, Capture};

/// What to run in the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `main.py` in the work dir.
    Script,
    /// The session driver, talking over fds 3 (requests) and 4 (replies).
    Session,
}

/// Cleans up an execution however it ends (also when the future is dropped): kills and reaps the
/// child, removes the cgroup and the work dir. Blocking; the normal path drops it on a blocking
/// thread.
#[derive(Default)]
pub(crate) struct RunGuard {
    pub workdir: Option<PathBuf>,
    pub cgroup: Option<RunCgroup>,
    pub child: Option<Spawned>,
}

impl RunGuard {
    /// Creates execution `id`'s private work dir with `files`, owned by its uid; the guard removes
    /// it. Returns the guard and the dir.
    pub fn with_workdir(
        inner: &Inner,
        id: u64,
        files: &[(PathBuf, &[u8])],
    ) -> Result<(RunGuard, PathBuf), SandboxError> {
        let workdir = inner.work_root.join(format!("run-{id}"));
        let guard = RunGuard {
            workdir: Some(workdir.clone()),
            cgroup: None,
            child: None,
        };
        super::workdir::create(&workdir, files, run_ids(inner, id))?;
        Ok((guard, workdir))
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
        if let Some(dir) = self.workdir.take() {
            super::workdir::remove(&dir);
        }
    }
}

/// The execution's main process, as the backend that started it knows it.
pub(crate) enum Main {
    /// A fresh process, our own child.
    Spawned {
        pid: i32,
        pidfd: tokio::io::unix::AsyncFd<OwnedFd>,
    },
    /// A fork of the warm-fork server; its end means the whole tree is gone.
    Forked(Forked),
}

impl Main {
    /// The host pid, for a fresh process.
    pub fn pid(&self) -> Option<i32> {
        match self {
            Main::Spawned { pid, .. } => Some(*pid),
            Main::Forked(_) => None,
        }
    }

    /// Resolves once the main process has ended.
    pub async fn exited(&mut self) {
        match self {
            Main::Spawned { pidfd, .. } => supervise::exited(pidfd).await,
            Main::Forked(f) => f.wait().await,
        }
    }

    /// SIGKILLs the execution (the fresh backend's whole tree goes with `guard`).
    pub fn kill(&self, guard: &RunGuard) {
        match self {
            Main::Spawned { .. } => {
                if let Some(c) = &guard.child {
                    spawn::kill_pidfd(&c.pidfd);
                }
            }
            Main::Forked(f) => f.kill(),
        }
    }

    /// Waits for the end and reports it.
    pub async fn reap(&mut self) -> Result<supervise::Exit, SandboxError> {
        match self {
            Main::Spawned { pid, pidfd } => Ok(supervise::reap(*pid, pidfd).await),
            Main::Forked(f) => f.exit().await,
        }
    }
}

/// A spawned execution with its pipes.
pub(crate) struct Prepared {
    pub guard: RunGuard,
    pub main: Main,
    pub stdin: Option<OwnedFd>,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
    /// Session control pipes: (requests to the child, replies from it).
    pub control: Option<(OwnedFd, OwnedFd)>,
    pub started: Instant,
}

pub(crate) fn pipe_pair() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let (r, w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| SandboxError::Setup {
            stage: "pipe",
            source: e.into(),
        })?;
    Ok((r, w))
}

pub(crate) fn rlimits(
    limits: &Limits,
    memory_cgroup: bool,
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
        v.push((libc::RLIMIT_AS, limits.memory_bytes, limits.memory_bytes));
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

/// The per-execution Landlock ruleset (read the system and Python, write `workdir`), if enabled.
pub(crate) fn landlock_ruleset(
    inner: &Inner,
    workdir: &Path,
) -> Result<Option<OwnedFd>, SandboxError> {
    if !inner.layers.landlock {
        return Ok(None);
    }
    let mut trees = inner.python.prefixes.clone();
    if let Some(bin) = inner.python.exe.parent() {
        trees.push(bin.to_path_buf());
    }
    isolation::landlock_ruleset(workdir, &trees).map_err(|e| SandboxError::Setup {
        stage: "landlock",
        source: std::io::Error::other(e),
    })
}

const SESSION_DRIVER: &str = include_str!("session_driver.py");

/// Runs `main.py` as `__main__` when `site` is skipped (`-S`): first installs the builtins `site`
/// would have (`exit`, `quit`, `help`, ...: LLM code calls `exit()`), which is cheap without `.pth`
/// processing. The code executes in the real `__main__` module (so pickling and
/// `if __name__ == "__main__"` behave as for a script) and leaves no names there besides
/// `__file__`; the bootstrap's own frame is cut from tracebacks.
const SCRIPT_BOOTSTRAP: &str = "\
__import__('site').setquit(); __import__('site').sethelper(); __import__('site').setcopyright()
__file__ = 'main.py'; __import__('sys').argv[0] = 'main.py'
__import__('sys').excepthook = lambda t, v, tb, h=__import__('sys').__excepthook__: h(t, v.with_traceback(tb.tb_next), tb.tb_next) if isinstance(v, BaseException) and tb is not None and tb.tb_frame.f_code.co_filename == '<string>' else h(t, v, tb)
exec(compile(open(__file__, 'rb').read(), __file__, 'exec'))
";

impl Prepared {
    /// Creates the work dir and cgroup and starts the child (it runs once this returns).
    pub async fn new(
        inner: &Inner,
        id: u64,
        files: &[(PathBuf, &[u8])],
        limits: &Limits,
        mode: Mode,
        with_stdin: bool,
    ) -> Result<Prepared, SandboxError> {
        let layers = &inner.layers;
        let ids = run_ids(inner, id);
        let (mut guard, workdir) = RunGuard::with_workdir(inner, id, files)?;
        if let Some(root) = &layers.cgroup {
            let name = format!("run-{id}");
            guard.cgroup = Some(
                RunCgroup::create(root, &name, limits.memory_bytes, limits.max_processes)
                    .map_err(SandboxError::setup("cgroup"))?,
            );
        }
        let memory_cgroup = layers.cgroup.as_ref().is_some_and(|c| c.has_memory());
        let (out_r, out_w) = pipe_pair()?;
        let (err_r, err_w) = pipe_pair()?;
        let (in_r, in_w) = stdin_pair(with_stdin)?;
        let mut extra_fds = Vec::new();
        let mut control = None;
        if mode == Mode::Session {
            let (req_r, req_w) = pipe_pair()?;
            let (rep_r, rep_w) = pipe_pair()?;
            extra_fds.push((req_r, 3));
            extra_fds.push((rep_w, 4));
            control = Some((req_w, rep_r));
        }
        let mut argv = interpreter_argv(inner)?;
        let skip_site = inner.config.site_packages != SitePackages::Full;
        match mode {
            Mode::Script if skip_site => {
                argv.push(c"-c".to_owned());
                argv.push(CString::new(SCRIPT_BOOTSTRAP).unwrap_or_default());
            }
            Mode::Script => argv.push(c"main.py".to_owned()),
            Mode::Session => {
                argv.push(c"-u".to_owned());
                argv.push(c"-c".to_owned());
                argv.push(CString::new(SESSION_DRIVER).unwrap_or_default());
            }
        }
        let wd = cstr(&workdir)
            .ok_or_else(|| SandboxError::InvalidPath(workdir.display().to_string()))?;
        let envp = environment(inner, &workdir);
        let landlock = landlock_ruleset(inner, &workdir)?.map(|fd| (fd, isolation::proc_access()));
        let plan = ChildPlan {
            program: argv[0].clone(),
            argv,
            envp,
            workdir: wd,
            rlimits: rlimits(limits, memory_cgroup),
            ids,
            mounts: layers.mounts.clone(),
            clone_flags: layers.clone_flags,
            landlock,
            seccomp: layers.seccomp.clone(),
            stdin: in_r,
            stdout: out_w,
            stderr: err_w,
            extra_fds,
            cgroup_procs: guard
                .cgroup
                .as_ref()
                .map(|c| c.procs_files())
                .unwrap_or_default(),
        };
        let spawned = tokio::task::spawn_blocking(move || spawn::spawn_blocking(plan))
            .await
            .map_err(|_| SandboxError::Closed)??;
        let started = Instant::now();
        let pid = spawned.pid;
        let pidfd = supervise::async_pidfd(&spawned.pidfd).map_err(SandboxError::setup("pidfd"));
        guard.child = Some(spawned);
        let main = Main::Spawned { pid, pidfd: pidfd? };
        let stdout =
            pipe::Receiver::from_owned_fd(out_r).map_err(SandboxError::setup("stdout pipe"))?;
        let stderr =
            pipe::Receiver::from_owned_fd(err_r).map_err(SandboxError::setup("stderr pipe"))?;
        Ok(Prepared {
            guard,
            main,
            stdin: in_w,
            stdout,
            stderr,
            control,
            started,
        })
    }

    /// Supervises a one-shot script to its end, then cleans up. Errors only when the backend itself
    /// failed (the fork server died); a failing program is an `Ok` outcome.
    pub async fn execute(
        mut self,
        stdin: Option<Vec<u8>>,
        limits: &Limits,
    ) -> Result<ExecOutcome, SandboxError> {
        let writer = match (self.stdin.take(), stdin) {
            (Some(fd), Some(data)) => Some(tokio::spawn(write_all(fd, data))),
            _ => None,
        };
        let mut out = Capture::new(limits.stdout_cap);
        let mut err = Capture::new(limits.stderr_cap);
        let mut scratch = vec![0u8; 64 << 10];
        let mut scratch2 = vec![0u8; 64 << 10];
        let deadline = tokio::time::sleep(Duration::from_millis(limits.wall_ms.max(1)));
        tokio::pin!(deadline);
        let (mut out_open, mut err_open) = (true, true);
        let mut wall_killed = false;
        loop {
            tokio::select! {
                more = supervise::read_some(&mut self.stdout, &mut out, &mut scratch), if out_open => out_open = more,
                more = supervise::read_some(&mut self.stderr, &mut err, &mut scratch2), if err_open => err_open = more,
                () = self.main.exited() => break,
                () = &mut deadline, if !wall_killed => {
                    wall_killed = true;
                    self.main.kill(&self.guard);
                }
            }
        }
        let exit = self.main.reap().await?;
        if let Some(child) = self.guard.child.take() {
            drop(child); // reaped above
        }
        let wall_ms = self.started.elapsed().as_millis() as u64;
        if let Some(pid) = self.main.pid() {
            // The main process is gone: without a PID namespace, descendants may linger; kill them.
            // SAFETY: kill of the session's process group (the child called setsid, pgid == pid).
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        if let Some(cg) = &self.guard.cgroup {
            cg.kill_all();
        }
        // What is still buffered in the pipes belongs to the output; don't wait for writers.
        let grace = tokio::time::sleep(Duration::from_millis(200));
        tokio::pin!(grace);
        while out_open || err_open {
            tokio::select! {
                more = supervise::read_some(&mut self.stdout, &mut out, &mut scratch), if out_open => out_open = more,
                more = supervise::read_some(&mut self.stderr, &mut err, &mut scratch2), if err_open => err_open = more,
                () = &mut grace => break,
            }
        }
        out.drain_now(&self.stdout, &mut scratch);
        err.drain_now(&self.stderr, &mut scratch);
        if let Some(w) = writer {
            w.abort();
        }
        let (peak, oom) = self
            .guard
            .cgroup
            .as_ref()
            .map(|c| c.memory_stats())
            .unwrap_or((None, false));
        let cpu_limit_hit = exit.signal == Some(libc::SIGXCPU)
            || (exit.signal == Some(libc::SIGKILL)
                && exit.cpu_ms + 50 >= limits.cpu_ms.div_ceil(1000) * 1000);
        let outcome = ExecOutcome {
            exit_code: exit.code,
            signal: exit.signal,
            timed_out: wall_killed || cpu_limit_hit,
            memory_exceeded: oom
                || (exit.code != Some(0) && supervise::looks_like_memory_error(&err.buf)),
            stdout: out.buf,
            stderr: err.buf,
            stdout_truncated: out.truncated,
            stderr_truncated: err.truncated,
            wall_ms,
            cpu_ms: exit.cpu_ms,
            peak_rss: peak.unwrap_or(exit.max_rss).max(exit.max_rss),
        };
        let guard = std::mem::take(&mut self.guard);
        let _ = tokio::task::spawn_blocking(move || drop(guard)).await;
        Ok(outcome)
    }
}

/// The uid/gid an execution runs as, when the supervisor can drop privileges.
pub(crate) fn run_ids(inner: &Inner, id: u64) -> Option<(u32, u32)> {
    inner.layers.drop_uid.then(|| {
        let uid = inner
            .config
            .uid_base
            .saturating_add((id % u64::from(inner.config.uid_count.max(1))) as u32);
        (uid, uid)
    })
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

/// Feeds stdin, then closes it (EOF). A program that never reads just gets EPIPE at its exit.
pub(crate) async fn write_all(fd: OwnedFd, data: Vec<u8>) {
    use tokio::io::AsyncWriteExt;
    let _ = fd.as_raw_fd();
    if let Ok(mut tx) = pipe::Sender::from_owned_fd(fd) {
        let _ = tx.write_all(&data).await;
    }
}

/// `PYTHONPATH=<site-packages dirs>` for [`SitePackages::Paths`].
fn python_path(mode: &SitePackages, dirs: &[std::path::PathBuf]) -> Option<String> {
    if *mode != SitePackages::Paths || dirs.is_empty() {
        return None;
    }
    let joined: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Some(format!("PYTHONPATH={}", joined.join(":")))
}
