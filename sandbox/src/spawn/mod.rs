//! The process spawner: a clone into fresh namespaces, then the child side of [`super::child`] up
//! to `execve`. Shared by the fresh backend (every execution), the warm backend (its server) and
//! probing (can the kernel clone into a namespace).
//!
//! The child shares the host's address space until its `execve` (`CLONE_VM | CLONE_VFORK`, as
//! `posix_spawn`; the spawning thread sleeps meanwhile): a fork would copy the host's page tables
//! and fault on every page the host's threads write until the child's exec. Only a child that
//! must wait to be attached to its cgroups by pid (cgroup v2) is forked. Either way everything the
//! child needs is allocated by the parent beforehand ([`ChildPlan`]) and the child runs nothing but
//! raw, async-signal-safe syscalls, writing no memory but its own stack. Clones happen on one
//! long-lived thread because `PR_SET_PDEATHSIG` fires when the *thread* that forked exits, and
//! tokio's blocking threads come and go.

mod clone;

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, OnceLock, mpsc};

use libc::{c_char, c_int, c_void};

use super::cgroup::{self, Join};
use super::child::{self, ChildPlan};
use super::request::SandboxError;
pub(crate) use clone::raw_fork;
use clone::{block_signals, clone_vm};

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

/// A copy of `fd` at a number far above any the child `dup2()`s into.
fn dup_high(fd: &OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a valid fd returns a new fd that we own.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 100) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh fd from fcntl.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

/// Moves every descriptor the child reads after its `dup2()`s (onto 0-2 and the extra fds'
/// numbers) out of the numbers those write: a source sitting at a target would be replaced
/// before it is used (a Landlock ruleset at fd 3 became a session's control pipe: EBADFD).
/// A host's descriptors are rarely that low, so this is usually no syscall at all.
fn lift_sources(plan: &mut ChildPlan) -> io::Result<()> {
    let top = plan
        .extra_fds
        .iter()
        .map(|&(_, t)| t)
        .max()
        .unwrap_or(2)
        .max(2);
    let lift = |fd: &mut OwnedFd| -> io::Result<()> {
        if fd.as_raw_fd() <= top {
            *fd = dup_high(fd)?;
        }
        Ok(())
    };
    lift(&mut plan.stdin)?;
    lift(&mut plan.stdout)?;
    lift(&mut plan.stderr)?;
    for (fd, _) in &mut plan.extra_fds {
        lift(fd)?;
    }
    if let Some((ruleset, _)) = &mut plan.landlock {
        lift(ruleset)?;
    }
    Ok(())
}

fn cptrs(v: &[CString]) -> Vec<*const c_char> {
    v.iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

fn spawn_now(plan: ChildPlan) -> Result<Spawned, SandboxError> {
    // A child attached by pid (cgroup v2) must wait for that on a pipe, so it is a fork: a
    // `CLONE_VFORK` parent sleeps until the child's exec. Every other child shares this address
    // space until its exec (`clone_vm`).
    let shared = !matches!(plan.cgroup, Join::Attach(_));
    let (err_r, err_w_low) = pipe_cloexec().map_err(SandboxError::setup("error pipe"))?;
    // Far above the fd numbers the child dup2()s into, so no dup2 clobbers a source.
    let err_w = dup_high(&err_w_low).map_err(SandboxError::setup("error pipe"))?;
    drop(err_w_low);
    let sync = match shared {
        true => None,
        false => {
            let (r, w) = pipe_cloexec().map_err(SandboxError::setup("sync pipe"))?;
            Some((dup_high(&r).map_err(SandboxError::setup("sync pipe"))?, w))
        }
    };
    let mut plan = plan;
    lift_sources(&mut plan).map_err(SandboxError::setup("fd numbers"))?;
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
    let mut ctx = child::ChildCtx {
        plan: &plan,
        argv: &argv,
        envp: &envp,
        fprogs: &fprogs,
        sync_r: sync.as_ref().map_or(-1, |(r, _)| r.as_raw_fd()),
        err_w: err_w.as_raw_fd(),
        restore_signals: None,
    };
    let (ret, clone_error) = if shared {
        let (blocked, old) = block_signals();
        ctx.restore_signals = Some(old);
        // SAFETY: `child_main` writes nothing but its stack, makes only raw syscalls, and execs
        // or exits; this thread's signals are blocked until the clone returns.
        let ret = unsafe { clone_vm(plan.clone_flags, &ctx, &mut pidfd) } as libc::c_long;
        let clone_error = io::Error::last_os_error();
        drop(blocked);
        (ret, clone_error)
    } else {
        // SAFETY: the child only runs `child_main`, which uses raw syscalls on memory prepared
        // above and never returns.
        let ret = unsafe { raw_fork(plan.clone_flags, &mut pidfd) };
        if ret == 0 {
            // SAFETY: we are the freshly cloned child.
            unsafe { child::child_main(&ctx) }
        }
        (ret, io::Error::last_os_error())
    };
    if ret < 0 {
        if let Some(entered) = entered {
            let _ = entered.leave();
        }
        return Err(SandboxError::Setup {
            stage: "clone",
            source: clone_error,
        });
    }
    let pid = ret as i32;
    // SAFETY: the clone stored a fresh pidfd that we now own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    drop(err_w);
    let sync_w = sync.map(|(r, w)| {
        drop(r);
        w
    });
    let spawned = Spawned { pid, pidfd };
    if let Err(e) = finish_cgroups(&plan.cgroup, pid, entered) {
        kill_and_reap(&spawned);
        return Err(e);
    }
    drop(plan);
    if let Some(sync_w) = sync_w {
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
    }
    let mut buf = [0u8; 5];
    let mut got = 0;
    while got < buf.len() {
        // A child stuck before execve must not wedge the spawner (and every later execution).
        // (A child sharing this address space has exec'd or exited by now.)
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

/// Completes the child's cgroups (before it runs anything, or, sharing this address space,
/// while this thread still holds a place in them): on v1, where it was born in them, the limits
/// left for after the fork, then this thread leaves; on v2 the attach by pid.
fn finish_cgroups(
    join: &Join,
    pid: i32,
    entered: Option<cgroup::Entered>,
) -> Result<(), SandboxError> {
    let writes: Vec<(&std::path::Path, String)> = match join {
        Join::None => Vec::new(),
        Join::Inherit { then, .. } => then.iter().map(|(f, v)| (f.as_path(), v.clone())).collect(),
        Join::Attach(procs) => procs
            .iter()
            .map(|f| (f.as_path(), pid.to_string()))
            .collect(),
    };
    let written = writes
        .into_iter()
        .try_for_each(|(file, value)| std::fs::write(file, value));
    let left = entered.map_or(Ok(()), cgroup::Entered::leave);
    if let Err(e) = left {
        // The child is in its groups, but this thread is stuck in them: a run must not share its
        // groups with the host, so this one fails (the next spawn takes the thread home).
        tracing::error!(error = %e, "the sandbox spawner cannot leave a run's cgroup");
        return Err(SandboxError::Setup {
            stage: "cgroup leave",
            source: e,
        });
    }
    written.map_err(SandboxError::setup("cgroup attach"))
}

/// SIGKILL through the pidfd (no pid-reuse race) and reap.
pub(crate) fn kill_and_reap(s: &Spawned) {
    kill_pidfd(&s.pidfd);
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(s.pid, std::ptr::null_mut(), 0) };
}

/// Blocks until our child `pidfd` has ended (a zombie, or already reaped), without reaping it.
/// For a PID namespace's init, that is after every process of the namespace is gone.
pub(crate) fn wait_ended(pidfd: &OwnedFd) {
    use nix::sys::wait::{Id, WaitPidFlag, waitid};
    while let Err(nix::errno::Errno::EINTR) = waitid(
        Id::PIDFd(pidfd.as_fd()),
        WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
    ) {}
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

#[cfg(test)]
mod tests;
