//! The process sandbox: the only module of the workspace that spawns processes.
//!
//! Every execution runs in its own PID, mount, network, IPC and UTS namespaces, with rlimits, a
//! cleared environment, a private work dir owned by a per-execution uid, Landlock and seccomp. The
//! layers the kernel refuses are reported by [`IsolationReport`] (logged at [`Sandbox::new`],
//! printed by `codegym doctor`). Every execution ends as an [`ExecutionResult`].
//!
//! The layout, by concept:
//! - the API (here) and what callers pass: `config.rs`, `request.rs` (requests and errors);
//! - what the machine offers, probed once: `probe.rs`, `isolation.rs` (the report, Landlock),
//!   `seccomp.rs`, `cgroup.rs`, `python.rs` (the real interpreter);
//! - the execution toolbox both backends use: `prepare.rs` (shared state, work dir and cgroup
//!   guard, uid, pipes, rlimits, argv, environment, Landlock ruleset), `workdir.rs`, and the
//!   spawner `spawn.rs` + `child.rs` (`clone3` into namespaces, async-signal-safe child setup);
//! - two backends that start scripts: `fresh.rs` (a new interpreter per execution) and `warm/`
//!   (forks of a pre-started interpreter: `server.rs` + `server.py`, one run in `run.rs`); neither
//!   imports the other;
//! - `session.rs` + `session_driver.py`: a persistent interpreter per episode (fresh backend);
//! - `supervise.rs`: driving a started execution to its end, and the one function that assembles
//!   every [`ExecutionResult`].

mod cgroup;
mod child;
mod config;
mod fresh;
mod isolation;
mod prepare;
mod probe;
mod python;
mod report;
mod request;
mod seccomp;
mod session;
mod spawn;
mod supervise;
mod warm;
mod workdir;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use env_core::ExecutionResult;

pub use config::{Backend, IsolationLevel, Limits, SandboxConfig, SitePackages};
pub use isolation::{IsolationReport, Layer};
pub use report::{
    MAX_REPR_CHARS, MAX_RETURN_BYTES, MAX_VARIABLES, MAX_VARIABLES_BYTES, MAX_VARS, MAX_VARS_BYTES,
};
pub use request::{
    ExecRequest, ReportSpec, SandboxError, ToolCall, ToolHandler, ToolHost, ToolLimits,
};
pub use session::PySession;

use prepare::Inner;
use warm::WarmBackend;

/// Runs untrusted Python. `Send + Sync`; clone it or share it via `Arc`.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
    /// The warm backend; `None`: scripts start fresh interpreters.
    warm: Option<Arc<WarmBackend>>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("python", &self.inner.python.exe)
            .field("work_root", &self.inner.work_root)
            .field("level", &self.inner.report.level)
            .finish()
    }
}

impl Sandbox {
    /// Resolves the interpreter, probes the kernel once, logs the isolation report and checks a
    /// trivial program runs under all layers. Blocking (tens of ms): call at start-up.
    pub fn new(config: SandboxConfig) -> Result<Sandbox, SandboxError> {
        let python = python::resolve(config.python.as_deref())?;
        let tag = format!(
            "codegym-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        let parent = workdir::pick_root(config.work_root.as_deref());
        workdir::sweep_stale(&parent);
        let work_root = parent.join(&tag);
        {
            use std::os::unix::fs::DirBuilderExt;
            // 0711: execution uids may traverse to their own dir but not list the others.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o711)
                .create(&work_root)
                .map_err(|source| SandboxError::WorkDir {
                    path: work_root.clone(),
                    source,
                })?;
        }
        let (layers, report) = probe::probe(&config, &python, &work_root, &tag);
        for l in report.missing() {
            tracing::warn!(layer = l.name, reason = %l.detail, "sandbox isolation layer not available");
        }
        tracing::info!(level = %report.level, python = %python.exe.display(), "sandbox ready");
        let max = if config.max_concurrent == 0 {
            2 * std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            config.max_concurrent
        };
        let mut inner = Inner::new(config, python, report, layers, work_root, max);
        if inner.report.level < inner.config.min_isolation {
            return Err(SandboxError::InsufficientIsolation {
                required: inner.config.min_isolation,
                actual: inner.report.level,
                report: inner.report.to_string(),
            });
        }
        self_test(&inner, None)?;
        let first_server = warm::start(&mut inner)?;
        let inner = Arc::new(inner);
        let warm = first_server.map(|s| Arc::new(WarmBackend::new(inner.clone(), s)));
        if let Some(warm) = &warm {
            self_test(&inner, Some(warm))?;
        }
        Ok(Sandbox { inner, warm })
    }

    /// Which layers are active.
    pub fn isolation(&self) -> &IsolationReport {
        &self.inner.report
    }

    /// The resolved interpreter.
    pub fn python(&self) -> &Path {
        &self.inner.python.exe
    }

    /// The sandbox's default limits.
    pub fn limits(&self) -> &Limits {
        &self.inner.config.limits
    }

    /// Runs one program in its own sandboxed interpreter (a fresh one, or a fork of the warm
    /// server). A failing program is an `Ok` result.
    pub async fn run(&self, req: ExecRequest) -> Result<ExecutionResult, SandboxError> {
        Ok(self.run_fetching(req, Vec::new()).await?.0)
    }

    /// Runs one program like [`Sandbox::run`] and returns the files among `fetch` (paths relative
    /// to the work dir) that the run left as regular files, read after every process of the run has
    /// ended and before the work dir is removed. Missing or refused paths (outside the work dir,
    /// symlinks, FIFOs, over `max_file_bytes`) are left out.
    pub async fn run_fetching(
        &self,
        req: ExecRequest,
        fetch: Vec<String>,
    ) -> Result<(ExecutionResult, Vec<(String, Vec<u8>)>), SandboxError> {
        let limits = req.limits.unwrap_or(self.inner.config.limits);
        let mut files: Vec<(PathBuf, &[u8])> = Vec::with_capacity(req.files.len() + 1);
        for (name, data) in &req.files {
            files.push((workdir::validate_rel(name)?, data.as_slice()));
        }
        if files.iter().any(|(p, _)| p == Path::new("main.py")) {
            return Err(SandboxError::InvalidPath(
                "main.py (reserved for the source)".into(),
            ));
        }
        files.push((PathBuf::from("main.py"), req.source.as_bytes()));
        let _permit = self
            .inner
            .permits
            .acquire()
            .await
            .map_err(|_| SandboxError::Closed)?;
        let with_stdin = req.stdin.is_some();
        // Issue 12: host tools travel over the report channel, so they imply one.
        let spec = req
            .report
            .clone()
            .or_else(|| req.tools.as_ref().map(|_| ReportSpec::default()));
        let report = spec.as_ref().map(|s| (s, req.tools.as_ref()));
        match &self.warm {
            Some(warm) => {
                let run = warm.start_run(&files, &limits, with_stdin, report).await?;
                supervise::script(run, req.stdin, &limits, fetch).await
            }
            None => {
                let id = self.inner.next_id();
                let run = fresh::start_script(&self.inner, id, &files, &limits, with_stdin, report)
                    .await?;
                supervise::script(run, req.stdin, &limits, fetch).await
            }
        }
    }

    /// Which backend runs scripts: `"warm fork"` or `"fresh"`.
    pub fn backend(&self) -> &'static str {
        if self.warm.is_some() {
            "warm fork"
        } else {
            "fresh"
        }
    }

    /// Starts a persistent interpreter for the env's `session` mode.
    pub async fn open_session(&self, limits: Option<Limits>) -> Result<PySession, SandboxError> {
        self.open_session_with_tools(limits, None).await
    }

    /// [`Sandbox::open_session`] whose cells may call `tools` (issue 12; with a report spec).
    pub async fn open_session_with_tools(
        &self,
        limits: Option<Limits>,
        tools: Option<ToolHost>,
    ) -> Result<PySession, SandboxError> {
        let limits = limits.unwrap_or(self.inner.config.limits);
        let id = self.inner.next_id();
        PySession::open(self.inner.clone(), id, limits, tools).await
    }
}

/// Runs `print('ok')` under every layer once, through the warm backend when given, so that a
/// broken layer fails `Sandbox::new`, not every step.
fn self_test(inner: &Inner, warm: Option<&Arc<WarmBackend>>) -> Result<(), SandboxError> {
    let limits = Limits {
        wall_ms: 30_000,
        ..inner.config.limits
    };
    // A private runtime: `new` is sync and may run inside or outside another runtime.
    let result = std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(SandboxError::setup("self-test runtime"))?;
            rt.block_on(async {
                let files = [(PathBuf::from("main.py"), &b"import sys\nprint('ok')\n"[..])];
                match warm {
                    Some(warm) => {
                        let run = warm.start_run_as(u64::MAX - 1, &files, &limits).await?;
                        supervise::script(run, None, &limits, Vec::new()).await
                    }
                    None => {
                        let run =
                            fresh::start_script(inner, u64::MAX, &files, &limits, false, None)
                                .await?;
                        supervise::script(run, None, &limits, Vec::new()).await
                    }
                }
            })
        })
        .join()
        .unwrap_or(Err(SandboxError::Closed))
    })?
    .0;
    if result.exit_code != Some(0) || result.stdout != "ok\n" {
        return Err(SandboxError::Setup {
            stage: "self-test",
            source: std::io::Error::other(format!(
                "`print('ok')` gave {:?}/{:?}: {}",
                result.exit_code, result.signal, result.stderr
            )),
        });
    }
    Ok(())
}
