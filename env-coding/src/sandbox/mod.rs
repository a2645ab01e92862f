//! The process sandbox: the only module of the workspace that spawns processes.
//!
//! Every execution is a fresh interpreter `clone3`d into new PID, mount, network, IPC and UTS
//! namespaces, with its own cgroup (memory, pids), rlimits, a cleared environment, a private work
//! dir owned by a per-execution uid, Landlock and seccomp. The layers the kernel refuses are
//! reported by [`IsolationReport`] (logged at [`Sandbox::new`], printed by `codegym doctor`).
//! Sessions ([`PySession`]) keep one interpreter alive across `exec`s for notebook-like episodes.
//!
//! The seam for another backend (e.g. forking a warm interpreter) is `plan::Prepared::new`: everything
//! up to the `spawn` call is backend-agnostic, and so is supervision.

mod cgroup;
mod child;
mod config;
mod forked;
mod forkserver;
mod isolation;
mod outcome;
mod plan;
mod probe;
mod python;
mod seccomp;
mod session;
mod spawn;
mod supervise;
mod workdir;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use config::{Backend, IsolationLevel, Limits, SandboxConfig, SitePackages};
pub use isolation::{IsolationReport, Layer};
pub use outcome::{ExecOutcome, ExecRequest, SandboxError};
pub use session::PySession;

/// Runs untrusted Python. `Send + Sync`; clone it or share it via `Arc`.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
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

pub(crate) struct Inner {
    config: SandboxConfig,
    python: python::PythonInfo,
    report: IsolationReport,
    layers: probe::Layers,
    /// This sandbox's private dir under the configured work root.
    work_root: PathBuf,
    permits: tokio::sync::Semaphore,
    max_concurrent: usize,
    counter: AtomicU64,
    /// The warm-fork backend's server; `None` with the fresh backend.
    fork_server: Option<Mutex<Option<Arc<forkserver::ForkServer>>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // First: the server's cgroup lives under the root removed below.
        if let Some(server) = &self.fork_server
            && let Ok(mut s) = server.lock()
        {
            drop(s.take());
        }
        workdir::remove(&self.work_root);
        if let Some(cg) = &self.layers.cgroup {
            cgroup::remove_root(cg);
        }
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
        let mut inner = Inner {
            config,
            python,
            report,
            layers,
            work_root,
            permits: tokio::sync::Semaphore::new(max),
            max_concurrent: max,
            counter: AtomicU64::new(0),
            fork_server: None,
        };
        if inner.report.level < inner.config.min_isolation {
            return Err(SandboxError::InsufficientIsolation {
                required: inner.config.min_isolation,
                actual: inner.report.level,
                report: inner.report.to_string(),
            });
        }
        probe::self_test(&inner, false)?;
        start_fork_server(&mut inner)?;
        Ok(Sandbox {
            inner: Arc::new(inner),
        })
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

    /// Runs one program in a fresh sandboxed interpreter. A failing program is an `Ok` outcome.
    pub async fn run(&self, req: ExecRequest) -> Result<ExecOutcome, SandboxError> {
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
        // A fork server that died since the last run is noticed when asked to fork: the run is
        // then retried once on a new server instead of failing.
        let mut attempts = 0;
        let run = loop {
            let id = self.inner.counter.fetch_add(1, Ordering::Relaxed);
            let Some(server) = self.fork_server().await? else {
                break plan::Prepared::new(
                    &self.inner,
                    id,
                    &files,
                    &limits,
                    plan::Mode::Script,
                    with_stdin,
                )
                .await?;
            };
            attempts += 1;
            match forked::prepare(&self.inner, server.clone(), id, &files, &limits, with_stdin)
                .await
            {
                Err(_) if attempts == 1 && !server.is_alive() => continue,
                prepared => break prepared?,
            }
        };
        run.execute(req.stdin, &limits).await
    }

    /// The live fork server (restarted if it died), or `None` with the fresh backend.
    async fn fork_server(&self) -> Result<Option<Arc<forkserver::ForkServer>>, SandboxError> {
        let Some(slot) = &self.inner.fork_server else {
            return Ok(None);
        };
        if let Some(server) = slot.lock().map_err(|_| SandboxError::Closed)?.as_ref()
            && server.is_alive()
        {
            return Ok(Some(server.clone()));
        }
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let Some(slot) = &inner.fork_server else {
                return Ok(None);
            };
            let mut slot = slot.lock().map_err(|_| SandboxError::Closed)?;
            // Another run may have restarted it while this one waited for the lock.
            if let Some(server) = slot.as_ref()
                && server.is_alive()
            {
                return Ok(Some(server.clone()));
            }
            tracing::warn!("the fork server exited; starting a new one");
            let server = Arc::new(forkserver::ForkServer::start(&inner)?);
            *slot = Some(server.clone());
            Ok(Some(server))
        })
        .await
        .map_err(|_| SandboxError::Closed)?
    }

    /// Which backend runs scripts: `"warm fork"` or `"fresh"`.
    pub fn backend(&self) -> &'static str {
        if self.inner.fork_server.is_some() {
            "warm fork"
        } else {
            "fresh"
        }
    }

    /// Starts a persistent interpreter for the env's `session` mode.
    pub async fn open_session(&self, limits: Option<Limits>) -> Result<PySession, SandboxError> {
        let limits = limits.unwrap_or(self.inner.config.limits);
        let id = self.inner.counter.fetch_add(1, Ordering::Relaxed);
        PySession::open(self.inner.clone(), id, limits).await
    }
}

/// Starts the warm-fork server when the configuration asks for it and the machine allows it, and
/// reports the choice as a layer (a missing one is logged like any other).
fn start_fork_server(inner: &mut Inner) -> Result<(), SandboxError> {
    let wanted = inner.config.backend;
    if wanted == Backend::Fresh {
        return Ok(());
    }
    let started = match forkserver::unavailable(inner) {
        Some(why) => Err(why.to_string()),
        None => forkserver::ForkServer::start(inner).map_err(|e| e.to_string()),
    };
    let layer = |active, detail: String| Layer {
        name: "warm fork",
        active,
        detail,
    };
    match started {
        Ok(server) => {
            inner.fork_server = Some(Mutex::new(Some(Arc::new(server))));
            inner.report.layers.push(layer(
                true,
                "scripts fork from a pre-started interpreter, each into its own namespaces".into(),
            ));
            probe::self_test(inner, true)
        }
        Err(why) if wanted == Backend::WarmFork => Err(SandboxError::Setup {
            stage: "warm fork",
            source: std::io::Error::other(why),
        }),
        Err(why) => {
            tracing::warn!(reason = %why, "warm-fork backend not available; every script starts a fresh interpreter");
            inner
                .report
                .layers
                .push(layer(false, format!("fresh interpreter per script: {why}")));
            Ok(())
        }
    }
}
