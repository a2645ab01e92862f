//! Persistent interpreters for the env's `session` mode: variables, imports and files survive
//! across `exec` calls (like a notebook), each `exec` with its own CPU and wall-clock budget.
//!
//! The child runs `session_driver.py`; cells travel over a private pipe pair (fds 3 and 4), so
//! the program's own stdin/stdout/stderr stay ordinary. A timeout or crash kills the whole
//! session (`is_alive() == false`).
//!
//! The exit code of a cell is reported by the driver inside the sandbox, so the cell itself can
//! forge it (it can write to fd 4 like the driver does). Verdicts must come from host-side checks,
//! never from a session cell's exit code alone; one-shot [`super::Sandbox::run`] exit codes come
//! from the kernel.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use env_core::ExecutionResult;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;

use super::config::Limits;
use super::fresh::{self, FreshProcess};
use super::prepare::{Inner, RunLayout};
use super::report::{self, Report};
use super::request::{ReportSpec, SandboxError, ToolHost};
use super::supervise::{self, Capture, Ending, Exit, Process, Started};

/// The interpreter's main loop: reads cells on fd 3, replies on fd 4; after the run reporter it
/// calls for cells with a report spec (issue 12).
const DRIVER: &str = concat!(include_str!("report.py"), include_str!("session_driver.py"));

/// A reply's header: `D`, the exit code (i32 LE), the report's length (u32 LE).
const REPLY_HEADER: usize = 9;

/// The reply is whole: its header and the report it announces.
fn reply_complete(buf: &[u8]) -> bool {
    buf.len() >= REPLY_HEADER
        && buf.len() - REPLY_HEADER >= u32::from_le_bytes([buf[5], buf[6], buf[7], buf[8]]) as usize
}

/// A live sandboxed interpreter. Dropping it kills the whole tree and removes its work dir.
pub struct PySession {
    _inner: Arc<Inner>,
    limits: Limits,
    run: Option<Started<FreshProcess>>,
    requests: Option<pipe::Sender>,
    replies: Option<pipe::Receiver>,
    work_dir: PathBuf,
    oom_seen: bool,
    /// Work dir of a session that died, removed at drop/close.
    dead_dir: Option<PathBuf>,
    /// Issue 12: the host tools' names and the per-cell call counter of their channel (fd 5),
    /// served by a task for the session's lifetime.
    tools: Option<(Vec<String>, Arc<std::sync::atomic::AtomicU32>)>,
    tool_server: Option<tokio::task::JoinHandle<Vec<u8>>>,
}

impl std::fmt::Debug for PySession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PySession")
            .field("work_dir", &self.work_dir)
            .field("alive", &self.is_alive())
            .finish()
    }
}

/// CPU seconds (user + system, whole thread group) the process has used, from `/proc/<pid>/stat`.
fn cpu_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ut: u64 = f.get(11)?.parse().ok()?;
    let st: u64 = f.get(12)?.parse().ok()?;
    let cut: u64 = f.get(13)?.parse().ok()?;
    let cst: u64 = f.get(14)?.parse().ok()?;
    Some(ut + st + cut + cst)
}

fn ticks_per_s() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as u64 } else { 100 }
}

impl PySession {
    pub(crate) async fn open(
        inner: Arc<Inner>,
        id: u64,
        limits: Limits,
        layout: &RunLayout<'_>,
        tools: Option<ToolHost>,
    ) -> Result<PySession, SandboxError> {
        // Issue 12: host tools get a channel of their own (fd 5), never the cell pipes, so a
        // thread still calling a tool after its cell cannot read the next cell's request.
        let channel = tools
            // Cells carry their specs on fd 3: the tool channel sends none.
            .map(|t| report::Channel::pair(None, Some(t)))
            .transpose()
            .map_err(SandboxError::setup("tool channel"))?;
        let (channel, tool_fd) = match channel {
            Some((c, fd)) => (Some(c), Some(fd)),
            None => (None, None),
        };
        let (run, (req, rep)) =
            fresh::start_session(&inner, id, &limits, DRIVER, layout, tool_fd).await?;
        let tools = channel.as_ref().and_then(|c| {
            c.tools
                .as_ref()
                .map(|t| (t.names.clone(), c.calls_made.clone()))
        });
        let tool_server = channel.map(|c| tokio::spawn(c.serve()));
        let requests =
            pipe::Sender::from_owned_fd(req).map_err(SandboxError::setup("session pipe"))?;
        let replies =
            pipe::Receiver::from_owned_fd(rep).map_err(SandboxError::setup("session pipe"))?;
        let work_dir = run.guard.workdir.clone().unwrap_or_default();
        Ok(PySession {
            _inner: inner,
            limits,
            run: Some(run),
            requests: Some(requests),
            replies: Some(replies),
            work_dir,
            oom_seen: false,
            dead_dir: None,
            tools,
            tool_server,
        })
    }

    /// False once a timeout, crash or `exit()` of the interpreter ended the session.
    pub fn is_alive(&self) -> bool {
        self.run.is_some()
    }

    /// The session's work dir on the host. Never follow symlinks in it: the program controls it.
    pub fn work_dir(&self) -> &Path {
        &self.work_dir
    }

    /// Runs one cell. Output is the cell's own; the exit code is 0, the `sys.exit` code, or 1 for
    /// an uncaught exception (traceback on stderr).
    pub async fn exec(
        &mut self,
        source: &str,
        stdin: Option<Vec<u8>>,
    ) -> Result<ExecutionResult, SandboxError> {
        self.exec_reporting(source, stdin, None).await
    }

    /// [`PySession::exec`] with a report (issue 12): `report`'s vars are set in the namespace
    /// first, and the result carries the return value, error and (on request) variables.
    pub async fn exec_reporting(
        &mut self,
        source: &str,
        stdin: Option<Vec<u8>>,
        report: Option<&ReportSpec>,
    ) -> Result<ExecutionResult, SandboxError> {
        let limits = self.limits;
        let (Some(run), Some(requests), Some(replies)) = (
            self.run.as_mut(),
            self.requests.as_mut(),
            self.replies.as_mut(),
        ) else {
            return Err(SandboxError::SessionDead);
        };
        let pid = run.process.pid().ok_or(SandboxError::SessionDead)?;
        let tps = ticks_per_s();
        let before = cpu_ticks(pid).unwrap_or(0);
        // RLIMIT_CPU counts the interpreter's lifetime: move it to "used so far + this cell".
        let soft = before.div_ceil(tps) + limits.cpu_ms.div_ceil(1000).max(1);
        let rl = libc::rlimit {
            rlim_cur: soft,
            rlim_max: soft + 1,
        };
        // SAFETY: prlimit on our own child with a valid rlimit.
        unsafe { libc::prlimit(pid, libc::RLIMIT_CPU, &rl, std::ptr::null_mut()) };

        let mut msg = Vec::with_capacity(source.len() + 16 + stdin.as_ref().map_or(0, Vec::len));
        msg.extend_from_slice(&(source.len() as u64).to_le_bytes());
        msg.extend_from_slice(source.as_bytes());
        match &stdin {
            Some(d) => {
                msg.extend_from_slice(&(d.len() as u64).to_le_bytes());
                msg.extend_from_slice(d);
            }
            None => msg.extend_from_slice(&u64::MAX.to_le_bytes()),
        }
        let spec = match (report, &self.tools) {
            (Some(r), Some((names, made))) => {
                made.store(0, std::sync::atomic::Ordering::Relaxed); // the call cap is per cell
                r.to_json_with_tools(names)
            }
            (Some(r), None) => r.to_json(),
            (None, _) => Vec::new(),
        };
        msg.extend_from_slice(&(spec.len() as u64).to_le_bytes());
        msg.extend_from_slice(&spec);
        let started = Instant::now();
        let deadline = tokio::time::sleep(Duration::from_millis(limits.wall_ms.max(1)));
        tokio::pin!(deadline);
        let mut out = Capture::new(limits.stdout_cap);
        let mut err = Capture::new(limits.stderr_cap);
        let mut reply = Capture::new(REPLY_HEADER + report::MAX_FRAME);
        let mut scratch = vec![0u8; 64 << 10];
        let mut scratch2 = vec![0u8; 64 << 10];
        let mut scratch3 = vec![0u8; 64 << 10];
        let (mut out_open, mut err_open, mut rep_open) = (true, true, true);
        let mut sent = false;
        let mut wall_killed = false;
        let mut exited = false;
        let write = requests.write_all(&msg);
        tokio::pin!(write);
        loop {
            tokio::select! {
                r = &mut write, if !sent => {
                    sent = true;
                    if r.is_err() { exited = true; break; }
                }
                more = supervise::read_some(&mut run.stdout, &mut out, &mut scratch), if out_open => out_open = more,
                more = supervise::read_some(&mut run.stderr, &mut err, &mut scratch2), if err_open => err_open = more,
                more = supervise::read_some(replies, &mut reply, &mut scratch3), if rep_open => {
                    rep_open = more;
                    if reply_complete(&reply.buf) || reply.truncated || !more { break; }
                }
                () = run.process.exited() => { exited = true; break; }
                () = &mut deadline => {
                    wall_killed = true;
                    break;
                }
            }
        }
        let wall_ms = started.elapsed().as_millis() as u64;
        let finished = reply_complete(&reply.buf) && reply.buf[0] == b'D' && !wall_killed;
        if finished {
            out.drain_now(&run.stdout, &mut scratch);
            err.drain_now(&run.stderr, &mut scratch);
            let after = cpu_ticks(pid).unwrap_or(before);
            let code = i32::from_le_bytes([reply.buf[1], reply.buf[2], reply.buf[3], reply.buf[4]]);
            let cell_report = match report {
                Some(_) => report::last_report(&reply.buf[REPLY_HEADER - 4..]),
                None => None,
            };
            let (cgroup_peak, oom) = run.guard.memory_stats();
            // The cgroup's OOM record spans the session: only a new one is this cell's.
            let new_oom = oom && !self.oom_seen;
            self.oom_seen = oom;
            // The interpreter lives on: the cell's exit is the driver's report, its CPU time the
            // interpreter's growth (no rusage before the reap).
            let exit = Exit {
                code: Some(code),
                signal: None,
                cpu_ms: (after.saturating_sub(before)) * 1000 / tps,
                max_rss: 0,
            };
            let ending = Ending {
                exit,
                wall_ms,
                wall_killed: false,
                cgroup_peak,
                oom: new_oom,
            };
            return Ok(supervise::assemble(
                ending,
                &limits,
                out,
                err,
                Default::default(),
                cell_report,
            ));
        }
        // The interpreter died or overran: the session ends here.
        let _ = exited;
        run.process.kill();
        let mut exit = run.process.reap().await?;
        run.guard.child = None;
        out.drain_now(&run.stdout, &mut scratch);
        err.drain_now(&run.stderr, &mut scratch);
        let (cgroup_peak, oom) = run.guard.memory_stats();
        // rusage covers the interpreter's lifetime: the cell's share is what came after `before`.
        exit.cpu_ms = exit.cpu_ms.saturating_sub(before * 1000 / tps);
        let ending = Ending {
            exit,
            wall_ms,
            wall_killed,
            cgroup_peak,
            oom: oom && !self.oom_seen,
        };
        let result = supervise::assemble(
            ending,
            &limits,
            out,
            err,
            Default::default(),
            None::<Report>,
        );
        self.shutdown().await;
        Ok(result)
    }

    async fn shutdown(&mut self) {
        self.requests = None;
        self.replies = None;
        if let Some(server) = self.tool_server.take() {
            server.abort();
        }
        if let Some(mut run) = self.run.take() {
            let guard = std::mem::take(&mut run.guard);
            // Keep the work dir of a dead session until the session is dropped (the env may still
            // read files from it); kill and reap now.
            let workdir = guard.workdir.clone();
            let _ = tokio::task::spawn_blocking(move || {
                let mut guard = guard;
                guard.workdir = None;
                drop(guard)
            })
            .await;
            self.dead_dir = workdir;
        }
    }

    /// Ends the session: kills the tree and removes the work dir.
    pub async fn close(mut self) {
        self.shutdown().await;
        if let Some(dir) = self.dead_dir.take() {
            let _ = tokio::task::spawn_blocking(move || super::workdir::remove(&dir)).await;
        }
    }
}

impl Drop for PySession {
    fn drop(&mut self) {
        // `run`'s own guard kills the tree and removes the dir when the session is still alive.
        if let Some(dir) = self.dead_dir.take() {
            super::workdir::remove(&dir);
        }
    }
}
