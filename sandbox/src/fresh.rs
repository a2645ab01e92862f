//! The fresh backend: every execution is a new interpreter, `clone3`d into its own namespaces by
//! [`super::spawn`] and `execve`d, with its own cgroup. Scripts ([`start_script`]) when the warm
//! backend is off or unavailable, and always the interpreter of a session ([`start_session`]).
//!
//! The main process is our own child: it is watched on a pidfd and reaped with its resource usage
//! ([`FreshProcess`]).

use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::time::Instant;

use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

use super::cgroup::RunCgroup;
use super::child::{ChildPlan, cstr};
use super::config::{Limits, SitePackages};
use super::isolation;
use super::prepare::{self, Inner, RunGuard, RunLayout};
use super::report::{self, REPORT_PY};
use super::request::{ReportSpec, SandboxError, ToolHost};
use super::spawn;
use super::supervise::{Exit, Process, Started};

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

/// After `report.py`: the script run of [`SCRIPT_BOOTSTRAP`] through the reporter, which the
/// program's globals do not keep (issue 12).
const REPORT_BOOTSTRAP: &str = "
__import__('site').setquit(); __import__('site').sethelper(); __import__('site').setcopyright()
__file__ = 'main.py'; __import__('sys').argv[0] = 'main.py'
globals().pop('_codegym_report').run_script(3, globals(), __file__)
";

/// Starts `main.py` (among `files`) in a fresh interpreter; it runs once this returns.
pub(crate) async fn start_script(
    inner: &Inner,
    id: u64,
    layout: &RunLayout<'_>,
    limits: &Limits,
    with_stdin: bool,
    report: Option<(&ReportSpec, Option<&ToolHost>)>,
) -> Result<Started<FreshProcess>, SandboxError> {
    let mut tail = Vec::with_capacity(2 + layout.args.len());
    // Data tasks (issue 13): `sys.argv[1:]` (the bootstraps replace only `argv[0]`).
    let mut args = Vec::with_capacity(layout.args.len());
    for a in &layout.args {
        args.push(CString::new(a.as_str()).map_err(|_| SandboxError::InvalidPath(a.clone()))?);
    }
    // Issue 12: with a report, the runner of `report.py` runs the script, its channel on fd 3.
    if let Some((spec, tools)) = report {
        let (channel, theirs) = report::Channel::pair(Some(spec), tools.cloned())
            .map_err(SandboxError::setup("report channel"))?;
        tail.push(c"-c".to_owned());
        tail.push(CString::new(format!("{REPORT_PY}{REPORT_BOOTSTRAP}")).unwrap_or_default());
        tail.extend(args);
        let mut run = start(
            inner,
            id,
            layout,
            limits,
            tail,
            vec![(theirs, 3)],
            with_stdin,
        )
        .await?;
        run.report = Some(channel);
        return Ok(run);
    }
    if inner.config.site_packages == SitePackages::Full {
        tail.push(c"main.py".to_owned());
    } else {
        tail.push(c"-c".to_owned());
        tail.push(CString::new(SCRIPT_BOOTSTRAP).unwrap_or_default());
    }
    tail.extend(args);
    start(inner, id, layout, limits, tail, Vec::new(), with_stdin).await
}

/// The session's control pipes: (requests to the driver, replies from it).
pub(crate) type Control = (OwnedFd, OwnedFd);

/// Starts a session's interpreter running `driver` (unbuffered), which reads cells on fd 3 and
/// replies on fd 4; stdin is `/dev/null` (a cell's stdin travels with the cell).
pub(crate) async fn start_session(
    inner: &Inner,
    id: u64,
    limits: &Limits,
    driver: &str,
    layout: &RunLayout<'_>,
    tool_fd: Option<OwnedFd>,
) -> Result<(Started<FreshProcess>, Control), SandboxError> {
    let (req_r, req_w) = prepare::pipe_pair()?;
    let (rep_r, rep_w) = prepare::pipe_pair()?;
    let mut tail = vec![
        c"-u".to_owned(),
        c"-c".to_owned(),
        CString::new(driver).unwrap_or_default(),
    ];
    // Data tasks (issue 13): cells see the task's inputs in `sys.argv[1:]`, as scripts do.
    for a in &layout.args {
        tail.push(CString::new(a.as_str()).map_err(|_| SandboxError::InvalidPath(a.clone()))?);
    }
    let mut extra_fds = vec![(req_r, 3), (rep_w, 4)];
    // Issue 12: the session's tool channel, when it has host tools.
    extra_fds.extend(tool_fd.map(|fd| (fd, 5)));
    let run = start(inner, id, layout, limits, tail, extra_fds, false).await?;
    Ok((run, (req_w, rep_r)))
}

/// Creates the work dir and cgroup and spawns the interpreter with `argv_tail` after its flags.
async fn start(
    inner: &Inner,
    id: u64,
    layout: &RunLayout<'_>,
    limits: &Limits,
    argv_tail: Vec<CString>,
    extra_fds: Vec<(OwnedFd, i32)>,
    with_stdin: bool,
) -> Result<Started<FreshProcess>, SandboxError> {
    let mut argv = prepare::interpreter_argv(inner)?;
    argv.extend(argv_tail);
    let command = Command {
        argv,
        extra_env: Vec::new(),
        address_space: None,
    };
    start_command(inner, id, layout, limits, command, extra_fds, with_stdin).await
}

// Issue 14 (languages): any toolchain's argv under the same layers as the interpreter.
/// What a fresh execution runs: an absolute (or work-dir-relative) argv, environment entries on
/// top of the sandbox's cleared one, and the `RLIMIT_AS` a runtime needs instead of the memory
/// limit when there is no memory cgroup (see `lang::Language::address_space`).
pub(crate) struct Command {
    pub argv: Vec<CString>,
    pub extra_env: Vec<CString>,
    pub address_space: Option<u64>,
}

/// Creates the work dir and cgroup and spawns `command` in it.
pub(crate) async fn start_command(
    inner: &Inner,
    id: u64,
    layout: &RunLayout<'_>,
    limits: &Limits,
    command: Command,
    extra_fds: Vec<(OwnedFd, i32)>,
    with_stdin: bool,
) -> Result<Started<FreshProcess>, SandboxError> {
    let Command {
        argv,
        extra_env,
        address_space,
    } = command;
    let layers = &inner.layers;
    let (mut guard, workdir) = RunGuard::with_workdir(inner, id, layout)?;
    let ids = guard.ids();
    if let Some(root) = &layers.cgroup {
        let name = format!("run-{id}");
        guard.cgroup = Some(
            RunCgroup::create(root, &name, limits.memory_bytes, limits.max_processes)
                .map_err(SandboxError::setup("cgroup"))?,
        );
    }
    let memory_cgroup = layers.cgroup.as_ref().is_some_and(|c| c.has_memory());
    let (out_r, out_w) = prepare::pipe_pair()?;
    let (err_r, err_w) = prepare::pipe_pair()?;
    let (in_r, in_w) = prepare::stdin_pair(with_stdin)?;
    // A workspace run starts in its repository, mounted in the run's own mount namespace.
    let (mounts, run_dir, repo_dir, mut envp, landlock_paths) = match &layout.image_root {
        Some(root) => {
            let p = root.plan(inner, &workdir, layout.overlay.as_ref())?;
            (p.mounts, p.workdir, p.repo_dir, p.envp, p.landlock_paths)
        }
        None => {
            let mut mounts = layers.mounts.clone();
            if let Some(overlay) = &layout.overlay {
                overlay.insert_into(&mut mounts, &workdir.join(crate::workspace::REPO_DIR))?;
            }
            let envp = prepare::environment(inner, &workdir);
            let repo = workdir.join(crate::workspace::REPO_DIR);
            (mounts, workdir.clone(), repo, envp, Vec::new())
        }
    };
    let cwd = match &layout.overlay {
        Some(_) => repo_dir,
        None => run_dir,
    };
    let wd = cstr(&cwd).ok_or_else(|| SandboxError::InvalidPath(cwd.display().to_string()))?;
    // Data tasks (issue 13): the task's package site dir leads `PYTHONPATH`.
    if let Some(site) = &layout.python_path {
        let old = envp
            .iter()
            .position(|e| e.as_bytes().starts_with(b"PYTHONPATH="))
            .map(|i| envp.remove(i));
        let mut value = format!("PYTHONPATH={}", site.display()).into_bytes();
        if let Some(old) = old {
            value.push(b':');
            value.extend_from_slice(&old.as_bytes()["PYTHONPATH=".len()..]);
        }
        envp.push(
            CString::new(value)
                .map_err(|_| SandboxError::InvalidPath(site.display().to_string()))?,
        );
    }
    envp.extend(extra_env);
    let landlock =
        prepare::landlock_ruleset(inner, &workdir)?.map(|fd| (fd, isolation::proc_access()));
    let plan = ChildPlan {
        program: argv[0].clone(),
        argv,
        envp,
        workdir: wd,
        rlimits: prepare::rlimits_with(limits, memory_cgroup, address_space),
        ids,
        mounts,
        clone_flags: layers.clone_flags,
        landlock,
        seccomp: layers.seccomp.clone(),
        stdin: in_r,
        stdout: out_w,
        stderr: err_w,
        extra_fds,
        cgroup: guard.cgroup.as_ref().map(|c| c.join()).unwrap_or_default(),
        landlock_paths,
    };
    let spawned = tokio::task::spawn_blocking(move || spawn::spawn_blocking(plan))
        .await
        .map_err(|_| SandboxError::Closed)??;
    let started = Instant::now();
    let pid = spawned.pid;
    let pidfd = async_pidfd(&spawned.pidfd).map_err(SandboxError::setup("pidfd"));
    guard.child = Some(spawned);
    let process = FreshProcess { pid, pidfd: pidfd? };
    let stdout =
        pipe::Receiver::from_owned_fd(out_r).map_err(SandboxError::setup("stdout pipe"))?;
    let stderr =
        pipe::Receiver::from_owned_fd(err_r).map_err(SandboxError::setup("stderr pipe"))?;
    Ok(Started {
        guard,
        process,
        stdin: in_w,
        stdout,
        stderr,
        started,
        report: None,
    })
}

/// A fresh interpreter: our own child, watched on (a duplicate of) its pidfd. The guard's
/// [`spawn::Spawned`] kills and reaps it if supervision never gets to.
pub(crate) struct FreshProcess {
    pid: i32,
    pidfd: AsyncFd<OwnedFd>,
}

impl Process for FreshProcess {
    fn pid(&self) -> Option<i32> {
        Some(self.pid)
    }

    async fn exited(&mut self) {
        exited(&self.pidfd).await;
    }

    fn kill(&self) {
        spawn::kill_pidfd(self.pidfd.get_ref());
    }

    async fn reap(&mut self) -> Result<Exit, SandboxError> {
        Ok(reap(self.pid, &self.pidfd).await)
    }
}

/// Resolves once the process behind `pidfd` has exited.
async fn exited(pidfd: &AsyncFd<OwnedFd>) {
    loop {
        match pidfd.readable().await {
            Ok(mut guard) => {
                // pidfds stay readable once the process is gone; nothing to clear.
                guard.retain_ready();
                return;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
        }
    }
}

/// Reaps `pid` if it has exited (never blocks).
fn try_reap(pid: i32) -> Option<Exit> {
    let mut status = 0;
    // SAFETY: rusage is plain data.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child with valid out-pointers.
    let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG | libc::__WALL, &mut ru) };
    if r != pid {
        return None;
    }
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1000 + t.tv_usec as u64 / 1000;
    Some(Exit::from_status(
        status,
        tv(ru.ru_utime) + tv(ru.ru_stime),
        ru.ru_maxrss.max(0) as u64 * 1024,
    ))
}

/// Waits (asynchronously) until `pid` can be reaped.
async fn reap(pid: i32, pidfd: &AsyncFd<OwnedFd>) -> Exit {
    exited(pidfd).await;
    let mut delay = 1;
    loop {
        if let Some(e) = try_reap(pid) {
            return e;
        }
        if delay > 1000 {
            // Already reaped elsewhere (should not happen): report an unknown end.
            tracing::warn!(pid, "sandboxed process could not be reaped");
            return Exit::default();
        }
        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
        delay *= 2;
    }
}

/// An `AsyncFd` on a duplicate of `pidfd`.
fn async_pidfd(pidfd: &OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd stays open and unchanged for as long as the AsyncFd owns it.
    unsafe { AsyncFd::register_with_interest(pidfd.try_clone()?, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into())
}
