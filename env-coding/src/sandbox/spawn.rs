//! The process spawner: `clone3` into fresh namespaces and the child-side setup before `execve`.
//!
//! Everything the child needs is allocated by the parent beforehand ([`ChildPlan`]): after a fork
//! in a multi-threaded process only async-signal-safe calls are allowed, so the child runs nothing
//! but raw syscalls. Clones happen on one long-lived thread because `PR_SET_PDEATHSIG` fires when
//! the *thread* that forked exits, and tokio's blocking threads come and go.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, mpsc};

use libc::{c_char, c_int, c_void};

use super::SandboxError;

/// A mount step in the child's private mount namespace.
#[derive(Clone)]
pub(crate) enum MountOp {
    /// Stop mount events from propagating back to the host.
    MakePrivate,
    /// A fresh `/proc` for the new PID namespace, readable under Landlock.
    Proc,
    /// Hide a host directory behind an empty tmpfs.
    Tmpfs(CString),
    Mkdir(CString),
    /// Open an `O_PATH` fd on a dir before a tmpfs hides it (held in slot order).
    Hold(CString),
    /// Bind a held dir back (read-only) into a hidden tree, e.g. the Python install.
    BindRo {
        held: usize,
        dst: CString,
    },
}

/// Everything the child needs, prepared by the parent.
pub(crate) struct ChildPlan {
    pub program: CString,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub workdir: CString,
    pub rlimits: Vec<(libc::__rlimit_resource_t, u64, u64)>,
    /// uid/gid to drop to (when the supervisor is root).
    pub ids: Option<(u32, u32)>,
    pub mounts: Vec<MountOp>,
    pub clone_flags: u64,
    /// A Landlock ruleset to enforce (fd of a created ruleset) and the access to grant on `/proc`.
    pub landlock: Option<(OwnedFd, u64)>,
    pub seccomp: Vec<Arc<Vec<libc::sock_filter>>>,
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// Extra fds kept open in the child at the given numbers (session control pipes).
    pub extra_fds: Vec<(OwnedFd, RawFd)>,
    /// cgroup `cgroup.procs` files the child joins before it is released.
    pub cgroup_procs: Vec<PathBuf>,
}

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
    let mut pidfd: c_int = -1;
    // SAFETY: clone_args is plain data; zero is a valid value for every field.
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.flags = plan.clone_flags | libc::CLONE_PIDFD as u64;
    args.pidfd = &mut pidfd as *mut c_int as u64;
    args.exit_signal = libc::SIGCHLD as u64;
    // SAFETY: a fork-like clone3 (no new stack); the child only runs `child_main`, which uses
    // raw syscalls on memory prepared above and never returns.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut libc::clone_args,
            size_of::<libc::clone_args>(),
        )
    };
    if ret == 0 {
        let ctx = ChildCtx {
            plan: &plan,
            argv: &argv,
            envp: &envp,
            fprogs: &fprogs,
            sync_r: sync_r.as_raw_fd(),
            err_w: err_w.as_raw_fd(),
        };
        // SAFETY: we are the freshly cloned child.
        unsafe { child_main(&ctx) }
    }
    if ret < 0 {
        return Err(SandboxError::Setup {
            stage: "clone3",
            source: io::Error::last_os_error(),
        });
    }
    let pid = ret as i32;
    // SAFETY: CLONE_PIDFD stored a fresh pidfd that we now own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    drop(sync_r);
    drop(err_w);
    let spawned = Spawned { pid, pidfd };
    for procs in &plan.cgroup_procs {
        if let Err(e) = std::fs::write(procs, pid.to_string()) {
            kill_and_reap(&spawned);
            return Err(SandboxError::Setup {
                stage: "cgroup attach",
                source: e,
            });
        }
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

struct ChildCtx<'a> {
    plan: &'a ChildPlan,
    argv: &'a [*const c_char],
    envp: &'a [*const c_char],
    fprogs: &'a [libc::sock_fprog],
    sync_r: RawFd,
    err_w: RawFd,
}

/// Reports `stage` and errno to the parent and exits. Async-signal-safe.
unsafe fn fail(ctx: &ChildCtx<'_>, stage: u8) -> ! {
    // SAFETY: errno location is thread-local and valid; write/_exit are async-signal-safe.
    unsafe {
        let e = (*libc::__errno_location()).to_ne_bytes();
        let msg = [stage, e[0], e[1], e[2], e[3]];
        libc::write(ctx.err_w, msg.as_ptr() as *const c_void, msg.len());
        libc::_exit(127)
    }
}

/// Writes `/proc/self/fd/<fd>\0` into `buf` without allocating (async-signal-safe).
fn fd_path(buf: &mut [u8; 32], fd: c_int) {
    let prefix = b"/proc/self/fd/";
    buf[..prefix.len()].copy_from_slice(prefix);
    let mut digits = [0u8; 12];
    let mut n = fd.max(0) as u32;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut i = prefix.len();
    while len > 0 {
        len -= 1;
        buf[i] = digits[len];
        i += 1;
    }
    buf[i] = 0;
}

#[repr(C, packed)]
struct LandlockPathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// The child between clone3 and execve. Only raw, async-signal-safe syscalls.
unsafe fn child_main(ctx: &ChildCtx<'_>) -> ! {
    let p = ctx.plan;
    macro_rules! check {
        ($stage:expr, $e:expr) => {
            if $e < 0 {
                fail(ctx, $stage)
            }
        };
    }
    // SAFETY: all calls below are raw syscalls on memory the parent prepared before clone3.
    unsafe {
        let mut b = 0u8;
        loop {
            let n = libc::read(ctx.sync_r, &mut b as *mut u8 as *mut c_void, 1);
            if n == 1 {
                break;
            }
            if n == 0 || *libc::__errno_location() != libc::EINTR {
                libc::_exit(126);
            }
        }
        check!(
            1,
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0
            )
        );
        check!(2, libc::setsid());
        let mut held = [-1 as c_int; 16];
        let mut n_held = 0;
        let mut src_buf = [0u8; 32];
        for op in &p.mounts {
            let r = match op {
                MountOp::Hold(path) => {
                    let fd = libc::open(
                        path.as_ptr(),
                        libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                    );
                    if fd >= 0 && n_held < held.len() {
                        held[n_held] = fd;
                        n_held += 1;
                    }
                    fd
                }
                MountOp::MakePrivate => libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ),
                MountOp::Proc => libc::mount(
                    c"proc".as_ptr(),
                    c"/proc".as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    std::ptr::null(),
                ),
                MountOp::Tmpfs(path) => libc::mount(
                    c"tmpfs".as_ptr(),
                    path.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    c"mode=0755,size=64k".as_ptr() as *const c_void,
                ),
                MountOp::Mkdir(path) => libc::mkdir(path.as_ptr(), 0o755),
                MountOp::BindRo { held: idx, dst } => {
                    let fd = held.get(*idx).copied().unwrap_or(-1);
                    fd_path(&mut src_buf, fd);
                    let r = libc::mount(
                        src_buf.as_ptr() as *const c_char,
                        dst.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    );
                    if r < 0 {
                        r
                    } else {
                        libc::mount(
                            std::ptr::null(),
                            dst.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID,
                            std::ptr::null(),
                        )
                    }
                }
            };
            check!(3, r);
        }
        // The kernel's OOM killer should pick sandboxed code before the server.
        let fd = libc::open(
            c"/proc/self/oom_score_adj".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            libc::write(fd, b"1000".as_ptr() as *const c_void, 4);
            libc::close(fd);
        }
        check!(5, libc::dup2(p.stdin.as_raw_fd(), 0));
        check!(5, libc::dup2(p.stdout.as_raw_fd(), 1));
        check!(5, libc::dup2(p.stderr.as_raw_fd(), 2));
        for (fd, target) in &p.extra_fds {
            check!(5, libc::dup2(fd.as_raw_fd(), *target));
        }
        check!(6, libc::chdir(p.workdir.as_ptr()));
        for &(res, soft, hard) in &p.rlimits {
            let rl = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            check!(7, libc::setrlimit(res, &rl));
        }
        if let Some((uid, gid)) = p.ids {
            check!(8, libc::setgroups(0, std::ptr::null()));
            check!(9, libc::setresgid(gid, gid, gid));
            check!(10, libc::setresuid(uid, uid, uid));
        }
        check!(11, libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
        if let Some((ruleset, proc_access)) = &p.landlock {
            if p.mounts.iter().any(|m| matches!(m, MountOp::Proc)) {
                let proc_fd = libc::open(c"/proc".as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                check!(12, proc_fd);
                let attr = LandlockPathBeneath {
                    allowed_access: *proc_access,
                    parent_fd: proc_fd,
                };
                check!(
                    12,
                    libc::syscall(
                        libc::SYS_landlock_add_rule,
                        ruleset.as_raw_fd(),
                        1, // LANDLOCK_RULE_PATH_BENEATH
                        &attr as *const LandlockPathBeneath,
                        0
                    )
                );
            }
            check!(
                12,
                libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0)
            );
        }
        // Keep 0-2, the session's extra fds (dup'ed to 3..) and the CLOEXEC error pipe.
        // (the error pipe is far above the kept fds, see `dup_high`)
        let keep_from = 3 + p.extra_fds.len() as u32;
        let err = ctx.err_w as u32;
        check!(13, libc::close_range(keep_from, err - 1, 0));
        check!(13, libc::close_range(err + 1, u32::MAX, 0));
        for fprog in ctx.fprogs {
            check!(
                14,
                libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    fprog as *const libc::sock_fprog
                )
            );
        }
        libc::execve(p.program.as_ptr(), ctx.argv.as_ptr(), ctx.envp.as_ptr());
        fail(ctx, 15)
    }
}
