//! Supervision, the same for both backends: a started execution ([`Started`]) is driven to its
//! end ([`script`]: capped pipes, the wall clock, the kill, cleanup), and every execution, script
//! or session cell, becomes its [`ExecutionResult`] in one function, [`assemble`].
//!
//! A backend only says how its main process is watched and killed ([`Process`]); it never builds
//! a result itself.

use std::io;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use env_core::{ExecutionResult, OutputValue};
use tokio::net::unix::pipe;

use super::config::Limits;
use super::prepare::{self, RunGuard};
use super::report::{self, Report};
use super::request::SandboxError;
use crate::request::CollectOutputs;

/// The main process of a started execution, as the backend that started it knows it.
pub(crate) trait Process {
    /// The host pid, when the main process is our own child (fresh backend).
    fn pid(&self) -> Option<i32>;

    /// Resolves once the main process has ended. Cancel-safe: supervision polls it in a
    /// `select!` loop.
    async fn exited(&mut self);

    /// SIGKILLs the execution.
    fn kill(&self);

    /// Waits for the end and reports it. Errors only when the backend itself failed (the fork
    /// server died); a failing program is an `Ok` exit.
    async fn reap(&mut self) -> Result<Exit, SandboxError>;
}

/// A started execution with its pipes, whichever backend started it.
pub(crate) struct Started<P> {
    pub guard: RunGuard,
    pub process: P,
    /// Our end of the child's stdin (`None`: the child reads `/dev/null`).
    pub stdin: Option<OwnedFd>,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
    pub started: Instant,
    /// The host's end of the run's report channel (issue 12), when the request asked for one.
    pub report: Option<report::Channel>,
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

/// Supervises a one-shot script to its end, reads the files listed in `fetch` from its work dir
/// (after every process of the run is dead, so nothing can change them meanwhile), then cleans up.
/// Errors only when the backend itself failed (the fork server died); a failing program is an `Ok`
/// result.
pub(crate) async fn script<P: Process>(
    mut run: Started<P>,
    stdin: Option<Vec<u8>>,
    limits: &Limits,
    fetch: Vec<String>,
    outputs: Option<std::sync::Arc<dyn CollectOutputs>>,
) -> Result<(ExecutionResult, Vec<(String, Vec<u8>)>), SandboxError> {
    let writer = match (run.stdin.take(), stdin) {
        (Some(fd), Some(data)) => Some(tokio::spawn(write_all(fd, data))),
        _ => None,
    };
    let reporter = run.report.take().map(|c| tokio::spawn(c.serve()));
    let mut out = Capture::new(limits.stdout_cap);
    let mut err = Capture::new(limits.stderr_cap);
    let mut scratch = vec![0u8; prepare::SCRATCH];
    let mut scratch2 = vec![0u8; prepare::SCRATCH];
    let deadline = tokio::time::sleep(Duration::from_millis(limits.wall_ms.max(1)));
    tokio::pin!(deadline);
    let (mut out_open, mut err_open) = (true, true);
    let mut wall_killed = false;
    loop {
        tokio::select! {
            more = read_some(&mut run.stdout, &mut out, &mut scratch), if out_open => out_open = more,
            more = read_some(&mut run.stderr, &mut err, &mut scratch2), if err_open => err_open = more,
            () = run.process.exited() => break,
            () = &mut deadline, if !wall_killed => {
                wall_killed = true;
                run.process.kill();
            }
        }
    }
    let exit = run.process.reap().await?;
    if let Some(child) = run.guard.child.take() {
        drop(child); // reaped above
    }
    let wall_ms = run.started.elapsed().as_millis() as u64;
    if let Some(pid) = run.process.pid() {
        // The main process is gone: without a PID namespace, descendants may linger; kill them.
        // SAFETY: kill of the session's process group (the child called setsid, pgid == pid).
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    if let Some(cg) = &run.guard.cgroup {
        cg.kill_all();
    }
    // What is still buffered in the pipes belongs to the output; don't wait for writers.
    let grace = tokio::time::sleep(Duration::from_millis(200));
    tokio::pin!(grace);
    while out_open || err_open {
        tokio::select! {
            more = read_some(&mut run.stdout, &mut out, &mut scratch), if out_open => out_open = more,
            more = read_some(&mut run.stderr, &mut err, &mut scratch2), if err_open => err_open = more,
            () = &mut grace => break,
        }
    }
    out.drain_now(&run.stdout, &mut scratch);
    err.drain_now(&run.stderr, &mut scratch);
    if let Some(w) = writer {
        w.abort();
    }
    let report = report::collect(reporter, Duration::from_millis(200)).await;
    let (cgroup_peak, oom) = run.guard.memory_stats();
    let ending = Ending {
        exit,
        wall_ms,
        wall_killed,
        cgroup_peak,
        oom,
    };
    let guard = std::mem::take(&mut run.guard);
    let max_bytes = limits.max_file_bytes;
    // Reading files and removing the work dir touch the file system: off the runtime.
    let (fetched, outputs) = tokio::task::spawn_blocking(move || {
        let read = match &guard.workdir {
            Some(dir) => (
                fetch_files(dir, &fetch, max_bytes),
                // Data tasks (issue 13): the declared outputs, parsed by type.
                outputs.map(|o| o.collect(dir)).unwrap_or_default(),
            ),
            None => Default::default(),
        };
        drop(guard);
        read
    })
    .await
    .unwrap_or_default();
    Ok((assemble(ending, limits, out, err, outputs, report), fetched))
}

/// The regular files among `paths` (relative to the work dir), each read whole up to `max_bytes`,
/// beneath the work dir only (no `..`, no symlinks, no hard links, no FIFOs: the program created
/// them and may have planted anything). Missing and refused paths are left out.
fn fetch_files(
    workdir: &std::path::Path,
    paths: &[String],
    max_bytes: u64,
) -> Vec<(String, Vec<u8>)> {
    // Issue 14: `dir/` names every regular file directly in `dir` (a compile's artifacts).
    let mut expanded: Vec<String> = Vec::with_capacity(paths.len());
    for p in paths {
        match p.strip_suffix('/') {
            Some(dir) => expanded.extend(list_dir(workdir, dir)),
            None => expanded.push(p.clone()),
        }
    }
    expanded
        .iter()
        .filter_map(
            |p| match crate::beneath::read_beneath(workdir, p, max_bytes) {
                Ok((bytes, false)) => Some((p.clone(), bytes)),
                Ok((_, true)) => {
                    tracing::debug!(path = %p, "fetched file over the size limit; left out");
                    None
                }
                Err(why) => {
                    tracing::debug!(path = %p, %why, "file not fetched");
                    None
                }
            },
        )
        .collect()
}

/// The names of the regular files directly in `dir` (relative to the work dir), as paths relative
/// to the work dir. `dir` itself must be a real directory beneath the work dir (no symlink);
/// entries are checked again when read.
fn list_dir(workdir: &std::path::Path, dir: &str) -> Vec<String> {
    let Ok(rel) = super::workdir::validate_rel(dir) else {
        return Vec::new();
    };
    let path = workdir.join(&rel);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => {}
        _ => return Vec::new(),
    }
    let Ok(entries) = std::fs::read_dir(&path) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().to_str().map(|n| format!("{dir}/{n}")))
        .collect()
}

/// How an execution ended, as its supervisor saw it: what [`assemble`] needs besides the output.
pub(crate) struct Ending {
    /// The main process's end; its `cpu_ms` is this execution's own (a session cell's share).
    pub exit: Exit,
    pub wall_ms: u64,
    /// The supervisor killed it at the wall-clock deadline.
    pub wall_killed: bool,
    /// The cgroup's peak memory, when there is a memory cgroup.
    pub cgroup_peak: Option<u64>,
    /// The cgroup OOM-killed during this execution.
    pub oom: bool,
}

/// The one place an execution's result is made, for script runs on both backends and session
/// cells alike. Output is decoded here, once, as lossy UTF-8 (see [`ExecutionResult`]). `report`
/// is what the runner reported over the run's report channel, when there was one (issue 12).
pub(crate) fn assemble(
    end: Ending,
    limits: &Limits,
    stdout: Capture,
    stderr: Capture,
    outputs: BTreeMap<String, OutputValue>,
    report: Option<Report>,
) -> ExecutionResult {
    let Exit {
        code,
        signal,
        cpu_ms,
        max_rss,
    } = end.exit;
    let timed_out = time_limit_hit(signal, cpu_ms, end.wall_ms, end.wall_killed, limits);
    let memory_exceeded = end.oom || (code != Some(0) && looks_like_memory_error(&stderr.buf));
    // Issue 12: a limit is the error an agent reads, whatever the runner managed to report.
    let report = report.unwrap_or_default();
    let error = if timed_out {
        Some(limit_error(
            "TimeoutError",
            "the run hit its CPU or wall-clock limit",
        ))
    } else if memory_exceeded {
        Some(limit_error("MemoryError", "the run hit its memory limit"))
    } else {
        report.error
    };
    let ended_cleanly = !timed_out && !memory_exceeded && signal.is_none();
    ExecutionResult {
        exit_code: code,
        signal,
        timed_out,
        memory_exceeded,
        return_value: report.return_value.filter(|_| ended_cleanly),
        variables: report.variables,
        error,
        stdout_truncated: stdout.truncated,
        stderr_truncated: stderr.truncated,
        stdout: lossy_utf8(stdout.buf),
        stderr: lossy_utf8(stderr.buf),
        wall_ms: end.wall_ms,
        cpu_ms,
        peak_rss_bytes: end.cgroup_peak.unwrap_or(max_rss).max(max_rss),
        outputs,
        compile: None,
    }
}

/// How much lower than a limit a measured time may read and still count as having reached it:
/// 100 ms, or a fifth of the limit when larger. Measured here (nested VM, loaded host): spinning
/// C and Bash programs under `cpu_ms: 3000` (soft 3 s, hard 4 s) SIGKILLed at 2.66-2.71 s of
/// reported CPU time and 4.1-4.6 s of wall clock, i.e. the kernel's CPU clock for `RLIMIT_CPU`
/// ran ahead of the rusage it reports (the hard limit's SIGKILL without the soft limit's SIGXCPU).
fn slack_ms(limit: u64) -> u64 {
    (limit / 5).max(100)
}

/// Whether a run ended on one of its time limits (issue 14: one pure rule, unit-tested):
/// - the supervisor killed it at the wall-clock deadline;
/// - SIGXCPU: `RLIMIT_CPU`'s soft limit;
/// - SIGKILL with the CPU time at the configured limit (`RLIMIT_CPU`'s hard limit, which a
///   program ignoring SIGXCPU meets, or any kill after the budget was spent; compared with the
///   configured `cpu_ms`, not the whole second `RLIMIT_CPU` rounds it up to), or with the wall
///   clock at its deadline (the kill raced the supervisor's timer, which then saw the process
///   gone first).
///
/// A run that exited on its own is never a timeout (its output is complete), and a SIGKILL
/// well within both budgets is not one either (a crash or an outside kill: a runtime error).
fn time_limit_hit(
    signal: Option<i32>,
    cpu_ms: u64,
    wall_ms: u64,
    wall_killed: bool,
    limits: &Limits,
) -> bool {
    let reached = |used: u64, limit: u64| used + slack_ms(limit) >= limit;
    wall_killed
        || signal == Some(libc::SIGXCPU)
        || (signal == Some(libc::SIGKILL)
            && (reached(cpu_ms, limits.cpu_ms) || reached(wall_ms, limits.wall_ms)))
}

/// Issue 14: the result of a program whose compile failed (or timed out): it never ran, so it has
/// no exit code and no output of its own; `compile` holds the compile's result (its message capped
/// by the compile limits' `stderr_cap`).
pub(crate) fn not_run_after_compile(compile: ExecutionResult) -> ExecutionResult {
    ExecutionResult {
        exit_code: None,
        signal: None,
        timed_out: false,
        memory_exceeded: false,
        stdout: String::new(),
        stderr: String::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        wall_ms: 0,
        cpu_ms: 0,
        peak_rss_bytes: 0,
        compile: Some(Box::new(compile)),
        outputs: Default::default(),
        return_value: None,
        variables: None,
        error: None,
    }
}

fn limit_error(type_name: &str, message: &str) -> env_core::ProgramError {
    env_core::ProgramError {
        type_name: type_name.into(),
        message: message.into(),
    }
}

/// Bytes as text, U+FFFD for invalid sequences; valid output (the usual case) is not copied.
fn lossy_utf8(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// True when stderr ends with a Python `MemoryError` or an `ENOMEM` error (`mmap` and friends fail
/// that way under `RLIMIT_AS`), or another runtime's out-of-memory message.
fn looks_like_memory_error(stderr: &[u8]) -> bool {
    let tail = &stderr[stderr.len().saturating_sub(4096)..];
    let has = |needle: &[u8]| tail.windows(needle.len()).any(|w| w == needle);
    has(b"MemoryError")
        || has(b"[Errno 12] Cannot allocate memory")
        // Issue 14: the other runtimes' allocation failures (C++, Rust, Go, the JVM, V8).
        || has(b"std::bad_alloc")
        || has(b"memory allocation of")
        || has(b"runtime: out of memory")
        || has(b"java.lang.OutOfMemoryError")
        || has(b"JavaScript heap out of memory")
}

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

/// Feeds stdin, then closes it (EOF). A program that never reads just gets EPIPE at its exit.
async fn write_all(fd: OwnedFd, data: Vec<u8>) {
    use tokio::io::AsyncWriteExt;
    if let Ok(mut tx) = pipe::Sender::from_owned_fd(fd) {
        let _ = tx.write_all(&data).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_limits_are_classified_from_signal_cpu_and_wall_clock() {
        let limits = Limits {
            cpu_ms: 1_500,
            wall_ms: 4_000,
            ..Limits::default()
        };
        let hit = |signal: Option<i32>, cpu, wall, killed| {
            time_limit_hit(signal, cpu, wall, killed, &limits)
        };
        let (kill, xcpu) = (Some(libc::SIGKILL), Some(libc::SIGXCPU));
        // The supervisor's deadline, whatever the ending.
        assert!(hit(kill, 10, 4_000, true));
        assert!(hit(None, 10, 4_000, true));
        // RLIMIT_CPU: SIGXCPU at the soft limit (2 s: 1.5 s rounded up), SIGKILL at the hard one
        // (3 s) for a program that ignores SIGXCPU, however the threads' time was accounted.
        assert!(hit(xcpu, 2_000, 2_100, false));
        assert!(hit(kill, 3_000, 3_100, false));
        // A SIGKILL after the configured budget was spent (1.45 s: within the slack of 1.5 s),
        // before RLIMIT_CPU's rounded-up limits: a timeout, not a runtime error.
        assert!(hit(kill, 1_450, 1_600, false));
        // The loaded-VM case seen in the language tests (3 s budget, SIGKILL at 2.7 s CPU).
        let three = Limits {
            cpu_ms: 3_000,
            wall_ms: 20_000,
            ..Limits::default()
        };
        assert!(time_limit_hit(kill, 2_712, 4_580, false, &three));
        assert!(!time_limit_hit(kill, 1_500, 4_580, false, &three));
        // A SIGKILL at the wall deadline that the supervisor's timer did not report (a busy JVM
        // waiting for CPU on a loaded host: little CPU time, all the wall clock).
        assert!(hit(kill, 300, 3_950, false));
        assert!(!hit(kill, 300, 3_000, false));
        // A SIGKILL well within both budgets is a crash or an outside kill.
        assert!(!hit(kill, 200, 900, false));
        // Exits on their own are never timeouts, however close to a limit.
        assert!(!hit(None, 1_499, 3_999, false));
        assert!(!hit(Some(libc::SIGSEGV), 1_600, 3_999, false));
    }
}
