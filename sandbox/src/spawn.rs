//! The process spawner: `clone3` into fresh namespaces, then the child side of [`super::child`] up
//! to `execve`. Shared by the fresh backend (every execution), the warm backend (its server) and
//! probing (can the kernel clone into a namespace).
//!
//! Everything the child needs is allocated by the parent beforehand ([`ChildPlan`]): after a fork
//! in a multi-threaded process only async-signal-safe calls are allowed, so the child runs nothing
//! but raw syscalls. Clones happen on one long-lived thread because `PR_SET_PDEATHSIG` fires when
//! the *thread* that forked exits, and tokio's blocking threads come and go.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, OnceLock, mpsc};

use libc::{c_char, c_int, c_void};

use super::cgroup::{self, Join};
use super::child::{self, ChildPlan};
use super::request::SandboxError;

/// A started child: its pid and a pidfd (readable when it exits).
pub(crate) struct Spawned {
    pub pid: i32,
    pub pidfd: OwnedFd,
}

const STAGES: &[&str] = &[
    "sync",
    "pdeathsig",
    "setsid",
    "mount",
    "oom_score_adj",
    "dup2",
    "chdir",
    "setrlimit",
    "setgroups",
    "setgid",
    "setuid",
    "no_new_privs",
    "landlock",
    "close_range",
    "seccomp",
    "execve",
];

/// How long a child may take from clone to execve (mounts, Landlock, seccomp: normally < 5 ms).
const SETUP_TIMEOUT_MS: c_int = 20_000;

type Job = (ChildPlan, mpsc::Sender<Result<Spawned, SandboxError>>);

/// Spawns `plan` on the spawner thread and waits until the child has exec'd (or failed).
/// Blocking: call from `spawn_blocking`.
pub(crate) fn spawn_blocking(plan: ChildPlan) -> Result<Spawned, SandboxError> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("codegym-spawner".into())
            .spawn(move || {
                while let Ok((plan, reply)) = rx.recv() {
                    let _ = reply.send(spawn_now(plan));
                }
            });
        if let Err(e) = started {
            tracing::error!(error = %e, "cannot start the sandbox spawner thread");
        }
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    let sent = match tx.lock() {
        Ok(tx) => tx.send((plan, reply_tx)).is_ok(),
        Err(_) => false,
    };
    if !sent {
        return Err(SandboxError::Closed);
    }
    reply_rx.recv().map_err(|_| SandboxError::Closed)?
}

fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two fresh fds that we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A fork-like clone (no new stack) into the namespaces in `flags`; stores a pidfd of the child
/// in `pidfd`. Returns 0 in the child, the pid in the parent, -1 on error (errno set).
/// `clone3` first; container runtimes often make it fail with ENOSYS, so fall back to `clone`.
///
/// # Safety
/// As `fork` in a multi-threaded process: the child may only make async-signal-safe calls.
pub(crate) unsafe fn raw_fork(flags: u64, pidfd: &mut c_int) -> libc::c_long {
    // SAFETY: clone_args is plain data; zero is a valid value for every field.
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.flags = flags | libc::CLONE_PIDFD as u64;
    args.pidfd = pidfd as *mut c_int as u64;
    args.exit_signal = libc::SIGCHLD as u64;
    // SAFETY: valid clone_args of the right size; fork semantics as documented above.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut libc::clone_args,
            size_of::<libc::clone_args>(),
        )
    };
    // SAFETY: reading errno of this thread.
    if ret >= 0 || unsafe { *libc::__errno_location() } != libc::ENOSYS {
        return ret;
    }
    // clone(flags, newsp, parent_tid, child_tid, tls) on x86_64; with CLONE_PIDFD the pidfd is
    // written through parent_tid.
    // SAFETY: fork-like clone, same contract as above.
    unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags | libc::CLONE_PIDFD as u64 | libc::SIGCHLD as u64,
            0usize,
            pidfd as *mut c_int,
            0usize,
            0usize,
        )
    }
}

fn dup_high(fd: OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a valid fd returns a new fd that we own.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 100) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh fd from fcntl.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

fn cptrs(v: &[CString]) -> Vec<*const c_char> {
    v.iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

fn spawn_now(plan: ChildPlan) -> Result<Spawned, SandboxError> {
    let (sync_r, sync_w) = pipe_cloexec().map_err(SandboxError::setup("sync pipe"))?;
    let (err_r, err_w) = pipe_cloexec().map_err(SandboxError::setup("error pipe"))?;
    // Far above the fd numbers the child dup2()s into, so no dup2 clobbers a source.
    let sync_r = dup_high(sync_r).map_err(SandboxError::setup("sync pipe"))?;
    let err_w = dup_high(err_w).map_err(SandboxError::setup("error pipe"))?;
    let mut plan = plan;
    for (fd, _) in &mut plan.extra_fds {
        let taken = std::mem::replace(
            fd,
            dup_high(fd.try_clone().map_err(SandboxError::setup("extra fd"))?)
                .map_err(SandboxError::setup("extra fd"))?,
        );
        drop(taken);
    }
    let argv = cptrs(&plan.argv);
    let envp = cptrs(&plan.envp);
    let fprogs: Vec<libc::sock_fprog> = plan
        .seccomp
        .iter()
        .map(|f| libc::sock_fprog {
            len: f.len() as u16,
            filter: f.as_ptr() as *mut libc::sock_filter,
        })
        .collect();
    // v1: this thread forks from inside the run's groups, so the child is born in them.
    let entered = match &plan.cgroup {
        Join::Inherit { dirs, .. } => {
            Some(cgroup::enter(dirs).map_err(SandboxError::setup("cgroup enter"))?)
        }
        _ => None,
    };
    let mut pidfd: c_int = -1;
    // SAFETY: the child only runs `child_main`, which uses raw syscalls on memory prepared
    // above and never returns.
    let ret = unsafe { raw_fork(plan.clone_flags, &mut pidfd) };
    // Saved before `leave` (its writes) can change errno.
    let fork_error = io::Error::last_os_error();
    if ret == 0 {
        let ctx = child::ChildCtx {
            plan: &plan,
            argv: &argv,
            envp: &envp,
            fprogs: &fprogs,
            sync_r: sync_r.as_raw_fd(),
            err_w: err_w.as_raw_fd(),
        };
        // SAFETY: we are the freshly cloned child.
        unsafe { child::child_main(&ctx) }
    }
    let left = entered.map(cgroup::Entered::leave);
    if ret < 0 {
        return Err(SandboxError::Setup {
            stage: "clone3",
            source: fork_error,
        });
    }
    let pid = ret as i32;
    // SAFETY: raw_fork stored a fresh pidfd that we now own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    drop(sync_r);
    drop(err_w);
    let spawned = Spawned { pid, pidfd };
    if let Err(e) = join_cgroups(&plan.cgroup, pid, left) {
        kill_and_reap(&spawned);
        return Err(e);
    }
    drop(plan);
    // SAFETY: writing one byte from a valid buffer to our pipe.
    let w = unsafe { libc::write(sync_w.as_raw_fd(), b"g".as_ptr() as *const c_void, 1) };
    drop(sync_w);
    if w != 1 {
        kill_and_reap(&spawned);
        return Err(SandboxError::Setup {
            stage: "release child",
            source: io::Error::last_os_error(),
        });
    }
    let mut buf = [0u8; 5];
    let mut got = 0;
    while got < buf.len() {
        // A child stuck before execve must not wedge the spawner (and every later execution).
        let mut pfd = libc::pollfd {
            fd: err_r.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, SETUP_TIMEOUT_MS) };
        if ready == 0 {
            kill_and_reap(&spawned);
            return Err(SandboxError::Child {
                stage: "setup timeout",
                source: io::ErrorKind::TimedOut.into(),
            });
        }
        if ready < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        // SAFETY: reading into the unfilled part of a local buffer.
        let n = unsafe {
            libc::read(
                err_r.as_raw_fd(),
                buf[got..].as_mut_ptr() as *mut c_void,
                buf.len() - got,
            )
        };
        if n == 0 {
            break;
        }
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        got += n as usize;
    }
    if got == 0 {
        return Ok(spawned);
    }
    kill_and_reap(&spawned);
    let stage = STAGES.get(buf[0] as usize).copied().unwrap_or("unknown");
    let errno = i32::from_ne_bytes([buf[1], buf[2], buf[3], buf[4]]);
    Err(SandboxError::Child {
        stage,
        source: io::Error::from_raw_os_error(errno),
    })
}

/// Completes the child's cgroups before it is released: on v1 (it was born in them) the limits
/// left for after the fork, once this thread is out again (`left`); on v2 the attach by pid.
fn join_cgroups(join: &Join, pid: i32, left: Option<io::Result<()>>) -> Result<(), SandboxError> {
    if let Some(Err(e)) = left {
        // The child is in its groups, but this thread is stuck in them: a run must not share its
        // groups with the host, so this one fails (the next spawn takes the thread home).
        tracing::error!(error = %e, "the sandbox spawner cannot leave a run's cgroup");
        return Err(SandboxError::Setup {
            stage: "cgroup leave",
            source: e,
        });
    }
    let writes: Vec<(&std::path::Path, String)> = match join {
        Join::None => Vec::new(),
        Join::Inherit { then, .. } => then.iter().map(|(f, v)| (f.as_path(), v.clone())).collect(),
        Join::Attach(procs) => procs
            .iter()
            .map(|f| (f.as_path(), pid.to_string()))
            .collect(),
    };
    for (file, value) in writes {
        std::fs::write(file, value).map_err(SandboxError::setup("cgroup attach"))?;
    }
    Ok(())
}

/// SIGKILL through the pidfd (no pid-reuse race) and reap.
pub(crate) fn kill_and_reap(s: &Spawned) {
    kill_pidfd(&s.pidfd);
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(s.pid, std::ptr::null_mut(), 0) };
}

pub(crate) fn kill_pidfd(pidfd: &OwnedFd) {
    // SAFETY: pidfd_send_signal on a pidfd we own; a dead process just yields ESRCH.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<c_void>(),
            0,
        )
    };
}
