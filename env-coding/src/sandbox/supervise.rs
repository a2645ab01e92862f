//! Backend-agnostic supervision helpers: capped output capture, waiting for the main process on
//! its pidfd, reaping with resource usage.

use std::io;
use std::os::fd::OwnedFd;

use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

/// Output read from one pipe, capped: the rest is drained and dropped so the writer never blocks.
pub(crate) struct Capture {
    pub buf: Vec<u8>,
    pub cap: usize,
    pub truncated: bool,
}

impl Capture {
    pub fn new(cap: usize) -> Self {
        Capture {
            buf: Vec::new(),
            cap,
            truncated: false,
        }
    }

    pub fn push(&mut self, data: &[u8]) {
        let room = self.cap.saturating_sub(self.buf.len());
        if data.len() > room {
            self.truncated = true;
        }
        self.buf.extend_from_slice(&data[..data.len().min(room)]);
    }

    /// Reads what is available right now, without waiting (after the writer side is done).
    pub fn drain_now(&mut self, rx: &pipe::Receiver, scratch: &mut [u8]) {
        loop {
            match rx.try_read(scratch) {
                Ok(0) => return,
                Ok(n) => self.push(&scratch[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            }
        }
    }
}

/// Reads one chunk into `cap`; returns false at EOF or on error (the pipe is done).
pub(crate) async fn read_some(
    rx: &mut pipe::Receiver,
    cap: &mut Capture,
    scratch: &mut [u8],
) -> bool {
    use tokio::io::AsyncReadExt;
    loop {
        match rx.read(scratch).await {
            Ok(0) => return false,
            Ok(n) => {
                cap.push(&scratch[..n]);
                return true;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
}

/// Resolves once the process behind `pidfd` has exited.
pub(crate) async fn exited(pidfd: &AsyncFd<OwnedFd>) {
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

/// How the main process ended.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub cpu_ms: u64,
    pub max_rss: u64,
}

impl Exit {
    /// Decodes a raw wait status.
    pub fn from_status(status: i32, cpu_ms: u64, max_rss: u64) -> Exit {
        let (code, signal) = if libc::WIFEXITED(status) {
            (Some(libc::WEXITSTATUS(status)), None)
        } else if libc::WIFSIGNALED(status) {
            (None, Some(libc::WTERMSIG(status)))
        } else {
            (None, None)
        };
        Exit {
            code,
            signal,
            cpu_ms,
            max_rss,
        }
    }
}

/// Reaps `pid` if it has exited (never blocks).
pub(crate) fn try_reap(pid: i32) -> Option<Exit> {
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
pub(crate) async fn reap(pid: i32, pidfd: &AsyncFd<OwnedFd>) -> Exit {
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
pub(crate) fn async_pidfd(pidfd: &OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd stays open and unchanged for as long as the AsyncFd owns it.
    unsafe { AsyncFd::register_with_interest(pidfd.try_clone()?, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into())
}

/// True when stderr ends with a Python `MemoryError` or an `ENOMEM` error (`mmap` and friends fail
/// that way under `RLIMIT_AS`).
pub(crate) fn looks_like_memory_error(stderr: &[u8]) -> bool {
    let tail = &stderr[stderr.len().saturating_sub(4096)..];
    let has = |needle: &[u8]| tail.windows(needle.len()).any(|w| w == needle);
    has(b"MemoryError") || has(b"[Errno 12] Cannot allocate memory")
}
