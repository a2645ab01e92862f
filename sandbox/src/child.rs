//! What the child of a spawn does between its clone and `execve`, and the [`ChildPlan`] it follows
//! (prepared by the parent: the child allocates nothing).
//!
//! The order matters: a child sharing the host's memory first puts its signals back (see
//! [`ChildCtx::restore_signals`]); a forked one waits for the parent to complete its cgroups;
//! then `PR_SET_PDEATHSIG`, `setsid`, mounts (while still root), `oom_score_adj`, fds, chdir,
//! rlimits, the uid drop (raw syscalls, see below), `no_new_privs` (Landlock requires it without
//! `CAP_SYS_ADMIN`), Landlock, closing every other fd, and seccomp *last*: its filters would refuse
//! the setup's own syscalls (mount, setns-like calls). Only raw, async-signal-safe syscalls: the parent is multi-threaded
//! and glibc's view of threads is stale here.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use libc::{c_char, c_int, c_void};

use super::cgroup::Join;

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
    /// Bind a held dir back into a hidden tree: the Python install (read-only), or the
    /// sandbox's work root when it lies in a hidden dir such as `/dev/shm` (writable; Landlock
    /// still lets each run write only its own dir).
    Bind {
        held: usize,
        dst: CString,
        read_only: bool,
    },
    /// A workspace's copy-on-write view (`workspace/`): its overlay, mounted once in the
    /// sandbox's namespace at `src`, bound at `target` before any host dir is hidden (the overlay
    /// lies in a hidden tree, and stays unreachable by path from the run).
    BindDir {
        src: CString,
        target: CString,
    },
    /// Any mount of a kernel filesystem (an image root's overlay, its `/proc`, `/dev`, `/tmp`).
    Mount {
        fstype: &'static std::ffi::CStr,
        target: CString,
        flags: libc::c_ulong,
        data: CString,
    },
    /// A character device node (an image root's `/dev/null` and the like, in its own tmpfs).
    CharDev {
        path: CString,
        major: u32,
        minor: u32,
    },
    /// `pivot_root` into a mounted dir, the old root detached: nothing of the host's root stays
    /// reachable (`image/root.rs`).
    PivotRoot(CString),
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
    /// How the child gets into its run's cgroups (before it is released).
    pub cgroup: Join,
    /// Landlock rules on paths of the run's own mount namespace (an image root's), opened by the
    /// child once its mounts are done: (path, access). At most [`MAX_CHILD_RULES`].
    pub landlock_paths: Vec<(CString, u64)>,
}

/// How many [`ChildPlan::landlock_paths`] a child opens (a fixed array: it allocates nothing).
pub(crate) const MAX_CHILD_RULES: usize = 12;

/// A path as the child takes it (`None` if it contains a NUL). Parent side: allocates.
pub(crate) fn cstr(p: &Path) -> Option<CString> {
    CString::new(p.as_os_str().as_bytes()).ok()
}

/// What the child reads between clone and execve (all prepared by the parent).
pub(crate) struct ChildCtx<'a> {
    pub plan: &'a ChildPlan,
    pub argv: &'a [*const c_char],
    pub envp: &'a [*const c_char],
    pub fprogs: &'a [libc::sock_fprog],
    /// The parent's pipe to wait on before anything (-1: none, the child is complete).
    pub sync_r: RawFd,
    pub err_w: RawFd,
    /// A child sharing the parent's address space starts with every signal blocked: it puts
    /// caught signals back to their default (a handler would run the host's code on the host's
    /// memory), then restores this mask.
    pub restore_signals: Option<libc::sigset_t>,
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

/// Every caught signal back to its default action (ignored ones stay ignored, as across a fork
/// and exec). Async-signal-safe; the dispositions are the child's own copy.
unsafe fn default_handlers() {
    for sig in 1..=64 {
        // SAFETY: sigaction on a zeroed struct; signals the kernel or libc refuse return EINVAL.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
    }
}

#[repr(C, packed)]
struct LandlockPathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// The child between clone3 and execve. Only raw, async-signal-safe syscalls.
pub(crate) unsafe fn child_main(ctx: &ChildCtx<'_>) -> ! {
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
        if let Some(mask) = &ctx.restore_signals {
            default_handlers();
            libc::sigprocmask(libc::SIG_SETMASK, mask, std::ptr::null_mut());
        }
        let mut b = 0u8;
        if ctx.sync_r >= 0 {
            loop {
                let n = libc::read(ctx.sync_r, &mut b as *mut u8 as *mut c_void, 1);
                if n == 1 {
                    break;
                }
                if n == 0 || *libc::__errno_location() != libc::EINTR {
                    libc::_exit(126);
                }
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
                // A bind keeps the source mount's flags (`nosuid`, `nodev`).
                MountOp::BindDir { src, target } => libc::mount(
                    src.as_ptr(),
                    target.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                ),
                MountOp::Mount {
                    fstype,
                    target,
                    flags,
                    data,
                } => libc::mount(
                    fstype.as_ptr(),
                    target.as_ptr(),
                    fstype.as_ptr(),
                    *flags,
                    data.as_ptr() as *const c_void,
                ),
                // chmod: mknod's mode passes through the inherited umask.
                MountOp::CharDev { path, major, minor } => {
                    let dev = libc::makedev(*major, *minor);
                    if libc::mknod(path.as_ptr(), libc::S_IFCHR | 0o666, dev) < 0 {
                        -1
                    } else {
                        libc::chmod(path.as_ptr(), 0o666)
                    }
                }
                // pivot_root(".", "."): the old root stacks under the new one and is detached
                // at once, so no dir of the image is needed to park it.
                MountOp::PivotRoot(dir) => {
                    if libc::chdir(dir.as_ptr()) < 0
                        || libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) < 0
                        || libc::umount2(c".".as_ptr(), libc::MNT_DETACH) < 0
                    {
                        -1
                    } else {
                        libc::chdir(c"/".as_ptr())
                    }
                }
                MountOp::Bind {
                    held: idx,
                    dst,
                    read_only,
                } => {
                    let fd = held.get(*idx).copied().unwrap_or(-1);
                    fd_path(&mut src_buf, fd);
                    let r = libc::mount(
                        src_buf.as_ptr() as *const c_char,
                        dst.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    );
                    if r < 0 || !*read_only {
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
        // The Landlock rule's `/proc` is opened before the rlimits: until `close_range` below the
        // child still holds the parent's descriptors, and a busy host process holds more of them
        // than a run's RLIMIT_NOFILE, which would make any open fail (EMFILE) and the run with it.
        let proc_fd = match &p.landlock {
            Some(_) if p.mounts.iter().any(|m| matches!(m, MountOp::Proc)) => {
                let fd = libc::open(c"/proc".as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                check!(12, fd);
                fd
            }
            _ => -1,
        };
        let mut rule_fds = [-1 as c_int; MAX_CHILD_RULES];
        for (i, (path, _)) in p.landlock_paths.iter().take(MAX_CHILD_RULES).enumerate() {
            let fd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
            check!(12, fd);
            rule_fds[i] = fd;
        }
        for &(res, soft, hard) in &p.rlimits {
            let rl = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            check!(7, libc::setrlimit(res, &rl));
        }
        if let Some((uid, gid)) = p.ids {
            // Raw syscalls: glibc's wrappers broadcast to every thread it believes exists (setxid),
            // and after a raw clone3 that list is the parent's: they would wait forever.
            check!(
                8,
                libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>())
            );
            check!(9, libc::syscall(libc::SYS_setresgid, gid, gid, gid));
            check!(10, libc::syscall(libc::SYS_setresuid, uid, uid, uid));
        }
        check!(11, libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
        if let Some((ruleset, proc_access)) = &p.landlock {
            // `/proc` (when mounted), then the plan's paths: each a path-beneath rule.
            let rules = std::iter::once((proc_fd, *proc_access)).chain(
                p.landlock_paths
                    .iter()
                    .take(MAX_CHILD_RULES)
                    .enumerate()
                    .map(|(i, (_, access))| (rule_fds[i], *access)),
            );
            for (parent_fd, allowed_access) in rules.filter(|&(fd, _)| fd >= 0) {
                let attr = LandlockPathBeneath {
                    allowed_access,
                    parent_fd,
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
