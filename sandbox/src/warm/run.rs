//! One script run of the warm backend: preparing it (work dir, pipes, Landlock ruleset, the
//! request to the server) and the handle supervision waits on ([`WarmRun`]).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use super::server::{ForkServer, Held};
use crate::config::Limits;
use crate::prepare::{self, Inner, RunGuard, RunLayout};
use crate::report;
use crate::request::{ReportSpec, SandboxError, ToolHost};
use crate::supervise::{Exit, Process, Started};

/// A run of the fork server. Its end means the run's whole tree is gone (its PID namespace's
/// init was reaped).
pub(crate) struct WarmRun {
    id: u64,
    server: Arc<ForkServer>,
    rx: Option<oneshot::Receiver<Result<Exit, String>>>,
    exit: Option<Result<Exit, String>>,
}

impl WarmRun {
    /// Resolves once the run is over. Cancel-safe.
    async fn wait(&mut self) {
        if self.exit.is_none() {
            let result = match self.rx.as_mut() {
                Some(rx) => rx
                    .await
                    .unwrap_or_else(|_| Err("the fork server exited".into())),
                None => Err("no run".into()),
            };
            self.rx = None;
            self.exit = Some(result);
        }
    }
}

impl Process for WarmRun {
    fn pid(&self) -> Option<i32> {
        None
    }

    async fn exited(&mut self) {
        self.wait().await;
    }

    fn kill(&self) {
        self.server.kill(self.id);
    }

    async fn reap(&mut self) -> Result<Exit, SandboxError> {
        self.wait().await;
        match self.exit.clone().unwrap_or_else(|| Err("no run".into())) {
            Ok(exit) => Ok(exit),
            Err(e) => Err(SandboxError::Setup {
                stage: SERVER_DIED,
                source: std::io::Error::other(e),
            }),
        }
    }
}

impl Drop for WarmRun {
    fn drop(&mut self) {
        // Dropped before its end (the caller gave up): the tree must not outlive the run.
        if self.exit.is_none() {
            self.kill();
        }
    }
}

/// The stage of a run's error when its fork server died under it (the run's tree died with it).
pub(crate) const SERVER_DIED: &str = "fork server";
const SETUP_FAILED: &str = "fork server child";
/// The run's process died silently before its program (killed from outside: e.g. a child forked
/// ahead that died while waiting). Nothing of the program ran: the caller may retry.
pub(crate) const NOT_STARTED: &str = "fork server child, before the program started";

/// Starts a script in a fork of `server`: the work dir with `files`, the run's own groups (when
/// the sandbox has cgroups), then the fork; returns once the child has finished its setup and
/// runs the program, or with the setup's error.
pub(crate) async fn start(
    inner: &Inner,
    server: Arc<ForkServer>,
    id: u64,
    layout: &RunLayout<'_>,
    limits: &Limits,
    with_stdin: bool,
    report: Option<(&ReportSpec, Option<&ToolHost>)>,
) -> Result<Started<WarmRun>, SandboxError> {
    let (mut guard, workdir) = RunGuard::with_workdir(inner, id, layout)?;
    let cells = server.cells();
    if let Some(pool) = cells {
        // Groups of its own (no run's memory or processes count against another's): its child
        // moves in before anything of the program runs, or the run fails; never shared ones.
        let lease = pool
            .lease(limits.memory_bytes, limits.max_processes)
            .map_err(SandboxError::setup("cgroup"))?;
        guard.cell = Some(Arc::new(lease));
    }
    let ids = guard.ids();
    let workdir = workdir.as_path();
    let (out_r, out_w) = prepare::pipe_pair()?;
    let (err_r, err_w) = prepare::pipe_pair()?;
    let (in_r, in_w) = prepare::stdin_pair(with_stdin)?;
    let (setup_r, setup_w) = prepare::pipe_pair()?;
    let ruleset = prepare::landlock_ruleset(inner, workdir)?;
    // Issue 12: the run's private report channel, when asked for (see `report.rs`).
    // Issue 17: a spec that fits travels in the run's request (the child parses that anyway; a
    // second read and parse on the channel cost ~0.03 ms per run); a large one (vars of up to
    // 1 MiB) goes first on the channel, as on the fresh backend.
    let inline_spec = report
        .map(|(spec, tools)| report::spec_json(spec, tools))
        .filter(|json| json.to_string().len() <= INLINE_SPEC_MAX);
    let channel = report
        .map(|(spec, tools)| {
            let framed = inline_spec.is_none().then_some(spec);
            report::Channel::pair(framed, tools.cloned())
        })
        .transpose()
        .map_err(SandboxError::setup("report channel"))?;
    let dir = workdir
        .to_str()
        .ok_or_else(|| SandboxError::InvalidPath(workdir.display().to_string()))?;
    let entry = guard
        .cell
        .as_ref()
        .map(|c| c.entry_files())
        .unwrap_or_default();
    let setup = RunSetup {
        ids,
        // No address-space limit where a memory group bounds the run (as on the fresh backend).
        rlimits: prepare::rlimits(limits, cells.is_some_and(|c| c.has_memory())),
        report: channel.is_some(),
        cgroups: entry.len(),
        dir,
    };
    // What the child's Python reads once it is sandboxed (the rest is `setup`'s).
    let request = serde_json::json!({
        "dir": dir,
        // Data tasks (issue 13): `sys.argv[1:]`.
        "argv": layout.args,
        "python_path": layout.python_path.as_ref().map(|p| p.display().to_string()),
        "spec": inline_spec,
    });
    let body = setup.encode(request.to_string().as_bytes())?;
    let mut fds = vec![
        in_r.as_raw_fd(),
        out_w.as_raw_fd(),
        err_w.as_raw_fd(),
        setup_w.as_raw_fd(),
    ];
    fds.extend_from_slice(&entry);
    let (channel, report_fd) = match channel {
        Some((c, fd)) => (Some(c), Some(fd)),
        None => (None, None),
    };
    if let Some(fd) = &report_fd {
        fds.push(fd.as_raw_fd());
    }
    if let Some(r) = &ruleset {
        fds.push(r.as_raw_fd());
    }
    // The uid and the groups stay held until the server reports the run's end (its whole tree
    // gone), even when this run is given up first.
    let held = Held {
        _uid: guard.uid.take(),
        _cell: guard.cell.clone(),
    };
    let rx = server.fork(id, &body, &fds, held)?;
    let mut run = WarmRun {
        id,
        server,
        rx: Some(rx),
        exit: None,
    };
    // The server has its own copies now; ours must go for EOFs to mean anything.
    drop((in_r, out_w, err_w, setup_w, ruleset, report_fd));
    // The child writes `+` when the program starts, or why its setup failed. Nothing at all: the
    // server (or the run's first fork) died before; the run's reply tells which.
    let setup = read_to_end(setup_r).await;
    if setup != b"+" {
        run.wait().await;
        let (stage, why) = match (&run.exit, setup.is_empty()) {
            (Some(Err(e)), true) => (SETUP_FAILED, e.clone()),
            (_, true) => (
                NOT_STARTED,
                "the run ended before its program started".into(),
            ),
            (_, false) => (SETUP_FAILED, String::from_utf8_lossy(&setup).into_owned()),
        };
        return Err(SandboxError::Setup {
            stage,
            source: std::io::Error::other(why),
        });
    }
    Ok(Started {
        guard,
        process: run,
        stdin: in_w,
        stdout: pipe::Receiver::from_owned_fd(out_r).map_err(SandboxError::setup("stdout pipe"))?,
        stderr: pipe::Receiver::from_owned_fd(err_r).map_err(SandboxError::setup("stderr pipe"))?,
        started: Instant::now(),
        report: channel,
    })
}

/// Everything the setup pipe carries: nothing when the child got to the program.
async fn read_to_end(fd: OwnedFd) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    if let Ok(mut rx) = pipe::Receiver::from_owned_fd(fd) {
        let _ = rx.read_to_end(&mut buf).await;
    }
    buf
}

/// The largest report spec sent inside a run's request (the server reads requests of up to
/// 64 KiB, `fork_loop.c`); larger ones go on the report channel.
const INLINE_SPEC_MAX: usize = 16 << 10;

/// A run's setup as `fork_loop.c` reads it (`struct run_setup`, then the work dir's bytes, then
/// JSON for the child's Python): the native child sets itself up from these fields alone.
struct RunSetup<'a> {
    ids: Option<(u32, u32)>,
    rlimits: Vec<(libc::__rlimit_resource_t, u64, u64)>,
    report: bool,
    /// How many of the run's descriptors, after the setup pipe, move the child into its groups.
    cgroups: usize,
    dir: &'a str,
}

impl RunSetup<'_> {
    /// `MAX_RLIMITS` and `MAX_CGROUPS` of fork_loop.c.
    const MAX_RLIMITS: usize = 16;
    const MAX_CGROUPS: usize = 2;

    fn encode(&self, json: &[u8]) -> Result<Vec<u8>, SandboxError> {
        if self.rlimits.len() > Self::MAX_RLIMITS || self.cgroups > Self::MAX_CGROUPS {
            return Err(SandboxError::Setup {
                stage: "fork server request",
                source: std::io::Error::other("too many rlimits or cgroups"),
            });
        }
        if self.dir.is_empty() || self.dir.len() >= 4096 {
            return Err(SandboxError::InvalidPath(self.dir.to_owned()));
        }
        let mut out = Vec::with_capacity(432 + self.dir.len() + json.len());
        let (uid, gid) = self
            .ids
            .map_or((-1, -1), |(u, g)| (i64::from(u), i64::from(g)));
        out.extend_from_slice(&uid.to_ne_bytes());
        out.extend_from_slice(&gid.to_ne_bytes());
        out.extend_from_slice(&u64::from(self.report).to_ne_bytes());
        out.extend_from_slice(&(self.cgroups as u64).to_ne_bytes());
        out.extend_from_slice(&(self.rlimits.len() as u64).to_ne_bytes());
        for i in 0..Self::MAX_RLIMITS {
            let (resource, soft, hard) = self.rlimits.get(i).copied().unwrap_or_default();
            for v in [u64::from(resource), soft, hard] {
                out.extend_from_slice(&v.to_ne_bytes());
            }
        }
        out.extend_from_slice(&(self.dir.len() as u64).to_ne_bytes());
        out.extend_from_slice(self.dir.as_bytes());
        out.extend_from_slice(json);
        Ok(out)
    }
}
