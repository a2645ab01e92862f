//! The two clones of a spawn: sharing the host's address space until the child's `execve`
//! ([`clone_vm`], the usual one), or a fork-like copy ([`raw_fork`]: a child that must wait for
//! its parent, and the kernel probes); and the signal mask around the first.

use libc::{c_int, c_void};

use crate::child;

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

/// The child's stack when it shares this address space.
const CHILD_STACK_BYTES: usize = 256 << 10;

/// A stack for a child sharing this address space, with an inaccessible page below it: a child
/// that overflowed it would fault instead of writing into the host's memory.
struct ChildStack {
    base: *mut c_void,
    len: usize,
}

impl ChildStack {
    fn new() -> Option<ChildStack> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
        let len = CHILD_STACK_BYTES + page;
        // SAFETY: a fresh private anonymous mapping; the guard page is its lowest page.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return None;
            }
            let stack = ChildStack { base, len };
            (libc::mprotect(base, page, libc::PROT_NONE) == 0).then_some(stack)
        }
    }

    fn top(&self) -> *mut c_void {
        // SAFETY: one past the end of the mapping: the top of a downward-growing stack.
        unsafe { self.base.add(self.len) }
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping `new` made.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// `clone(CLONE_VM | CLONE_VFORK)` into the namespaces in `flags`, as `posix_spawn` does: the
/// child runs `child_main` on its own stack in this address space, and this thread sleeps until
/// the child has exec'd or exited. Nothing of the host is copied: a fork of the host copied its
/// page tables, took a copy-on-write fault for every page the host's other threads wrote while
/// the child set up, and tore it all down at the child's exec (~40% of a fresh run's CPU).
/// Returns the child's pid, or -1 (errno set).
///
/// # Safety
/// `ctx` must describe a child that execs or exits without returning, writes no memory but its
/// stack, and makes only async-signal-safe calls; the calling thread's signals must be blocked
/// (a handler would run in the child, on the host's memory) and `ctx.restore_signals` set.
#[allow(clippy::disallowed_methods)] // the sandbox crate is where processes start
pub(super) unsafe fn clone_vm(flags: u64, ctx: &child::ChildCtx<'_>, pidfd: &mut c_int) -> c_int {
    thread_local! {
        // One per spawning thread, reused: the previous child is done with it when clone returns.
        static STACK: Option<ChildStack> = ChildStack::new();
    }
    extern "C" fn entry(arg: *mut c_void) -> c_int {
        // SAFETY: `arg` is the `ChildCtx` of `clone_vm`, alive while its thread sleeps.
        unsafe { child::child_main(&*(arg as *const child::ChildCtx<'_>)) }
    }
    let flags =
        flags | (libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD) as u64;
    STACK.with(|stack| {
        let Some(stack) = stack else {
            // SAFETY: setting this thread's errno.
            unsafe { *libc::__errno_location() = libc::ENOMEM };
            return -1;
        };
        // SAFETY: as documented above; `pidfd` receives the child's pidfd (CLONE_PIDFD writes it
        // through the parent-tid argument).
        unsafe {
            libc::clone(
                entry,
                stack.top(),
                flags as c_int,
                ctx as *const child::ChildCtx<'_> as *mut c_void,
                pidfd as *mut c_int,
            )
        }
    })
}

/// Every signal of the calling thread blocked until the guard drops; and the mask it had.
pub(super) fn block_signals() -> (impl Drop, libc::sigset_t) {
    struct Restore(libc::sigset_t);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: restoring this thread's own mask from a valid set.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
        }
    }
    // SAFETY: sigset_t is plain data; sigfillset/pthread_sigmask on valid sets of this thread.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        (Restore(old), old)
    }
}
