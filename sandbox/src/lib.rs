//! The process sandbox: the only crate of the workspace that starts processes. It runs untrusted
//! programs (Python, and the languages of [`lang`]) and knows nothing of tasks or rewards: a caller
//! passes what a run needs ([`ExecRequest`], [`RunData`], [`SandboxConfig::precompiled`]) and gets
//! the one [`ExecutionResult`] back.
//!
//! The isolation contract: every run, on every path (warm-fork children forked ahead or on demand,
//! fresh runs, compiled runs, session interpreters), has its own PID namespace (it is PID 1 and its
//! `/proc` shows only its own processes), mount namespace and IPC namespace, its own network
//! namespace (warm-fork script runs share the fork server's empty one only where Landlock scopes
//! abstract sockets and signals), its own uid, memory and pids cgroups (where the machine has
//! writable ones), rlimits, cleared environment, private work dir, Landlock domain and seccomp
//! filter, nothing of another run in its memory, and is killed with its whole tree when it ends.
//! A run that cannot get a layer the sandbox reports active fails ([`SandboxError`]); a sandbox
//! below [`SandboxConfig::min_isolation`] (default strict) is refused at [`Sandbox::new`]. The
//! tests that prove each clause are listed in ARCHITECTURE.md; `tests/isolation.rs` runs 40 probes
//! at once per path and checks what each can see of the others.
//!
//! The layout, by concept:
//! - the API (here) and what callers pass: `config.rs`, `request.rs` (requests and errors);
//! - what the machine offers, probed once: `probe.rs`, `isolation.rs` (the report, Landlock),
//!   `seccomp/`, `cgroup/` (and how a process joins its groups: born in them; a warm run's, reused
//!   from run to run, entered by its child), `python.rs` (the real interpreter);
//! - the execution toolbox both backends use: `prepare.rs` (shared state, work dir and cgroup
//!   guard, pipes, rlimits, argv, environment, Landlock ruleset), `uids.rs` (a uid no other live
//!   run on the host has), `workdir.rs`, `beneath.rs`
//!   (the host's file access beneath a work dir), and the spawner `spawn/` + `child.rs`
//!   (a clone into namespaces sharing the host's memory until its exec, async-signal-safe child
//!   setup);
//! - two backends that start scripts: `fresh.rs` (a new interpreter per execution) and `warm/`
//!   (forks of a pre-started interpreter: `server.rs` + `server.py` + the native `fork_loop.c`, one
//!   run in `run.rs`); neither imports the other;
//! - `session.rs` + `session_driver.py`: a persistent interpreter per episode (fresh backend);
//! - `supervise.rs`: driving a started execution to its end, and the one function that assembles
//!   every [`ExecutionResult`]; `report.rs` + `report.py`: what a run reports besides its output;
//! - `compiled.rs`: every other language: a cached, sandboxed compile step, then a fresh run (see
//!   [`lang`] for the per-language table); [`packages`]: the task package cache;
//! - `workspace/`: repositories as read-only layers and per-episode copy-on-write workspaces
//!   (an overlay mounted in each run's own mount namespace, on a tmpfs quota of its own);
//! - `metrics.rs`: what the sandbox reports to the `metrics` facade.

mod beneath;
mod cgroup;
mod child;
mod compiled;
mod config;
mod fresh;
pub mod host_tool;
pub mod image;
mod isolation;
pub mod lang;
pub mod metrics;
pub mod packages;
mod prepare;
mod probe;
mod python;
mod report;
mod request;
mod seccomp;
mod session;
mod spawn;
mod supervise;
mod uids;
mod warm;
mod workdir;
mod workspace;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use env_core::ExecutionResult;

pub use beneath::{MAX_READ_BYTES, read_beneath, validate_rel_path, write_beneath};
pub use config::{
    Backend, IsolationLevel, Limits, SandboxConfig, SitePackages, default_compile_limits,
};
pub use isolation::{IsolationReport, Layer, SandboxInfo};
pub use report::{
    MAX_REPR_CHARS, MAX_RETURN_BYTES, MAX_VARIABLES, MAX_VARIABLES_BYTES, MAX_VARS, MAX_VARS_BYTES,
};
pub use request::{
    CollectOutputs, ExecRequest, HostToolCall, ReportSpec, RunData, SandboxError, ToolHandler,
    ToolHost, ToolLimits,
};
pub use session::PySession;
pub use workspace::{
    FsLayer, PreparedConfig, PreparedStore, PruneReport, REPO_DIR, StoredState, Workspace,
    WorkspaceRun,
};

use crate::lang::Language;
use crate::lang::cache::{ArtifactCache, CacheStats};
use prepare::{Inner, RunLayout};
use warm::WarmBackend;

/// Runs untrusted programs (Python, and the languages of [`crate::lang`]). `Send + Sync`; clone it
/// or share it via `Arc`.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
    /// The warm backend; `None`: scripts start fresh interpreters.
    warm: Option<Arc<WarmBackend>>,
    /// Issue 14: compiled artifacts of the other languages, shared by clones of this sandbox.
    artifacts: Arc<ArtifactCache>,
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
        let mut python = python::resolve(config.python.as_deref())?;
        // Data tasks (issue 13): readable, never writable, trees (the package cache), on every layer
        // that knows the interpreter's own (mount plan, Landlock).
        python
            .prefixes
            .extend(config.read_only_dirs.iter().filter(|d| d.is_dir()).cloned());
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
            4 * std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            config.max_concurrent
        };
        if layers.drop_uid && (config.uid_count as usize) < max {
            // A run never shares a uid: beyond `uid_count` at once, runs fail (retryably).
            tracing::warn!(
                uid_count = config.uid_count,
                max_concurrent = max,
                "fewer uids than executions in flight: runs beyond the uid range fail"
            );
        }
        let mut inner = Inner::new(config, python, report, layers, work_root, max);
        if inner.report.level < inner.config.min_isolation {
            return Err(SandboxError::InsufficientIsolation {
                required: inner.config.min_isolation,
                actual: inner.report.level,
                report: inner.report.to_string(),
            });
        }
        // The fresh backend's self-test and the first fork server's start (tens of ms each, both
        // on the way to a command's first verdict) overlap.
        let (tested, launched) = std::thread::scope(|s| {
            let tested = s.spawn(|| self_test(&inner, None));
            let launched = warm::launch(&inner);
            (tested.join().unwrap_or(Err(SandboxError::Closed)), launched)
        });
        tested?;
        let first_server = warm::adopt(&mut inner, launched)?;
        let inner = Arc::new(inner);
        let warm = first_server.map(|s| Arc::new(WarmBackend::new(inner.clone(), s)));
        if let Some(warm) = &warm {
            self_test(&inner, Some(warm))?;
        }
        let artifacts = Arc::new(ArtifactCache::new(inner.config.compile_cache_bytes));
        Ok(Sandbox {
            inner,
            warm,
            artifacts,
        })
    }

    /// Which layers are active.
    pub fn isolation(&self) -> &IsolationReport {
        &self.inner.report
    }

    /// What this sandbox offers, for clients and operators.
    pub fn info(&self) -> SandboxInfo {
        SandboxInfo {
            isolation_level: self.inner.report.level,
            required_level: self.inner.config.min_isolation,
            backend: self.backend(),
            layers: self.inner.report.layers.clone(),
            languages: Language::ALL
                .iter()
                .filter(|l| self.supports(**l).is_ok())
                .map(|l| l.name())
                .collect(),
        }
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
        if req.language != Language::Python {
            // Issue 14: other languages compile (cached) and run fresh on either backend.
            return compiled::run(&self.inner, &self.artifacts, req, fetch).await;
        }
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
        // Data tasks (issue 13): read-only inputs beside the program's files, never over them.
        let read_only = workdir::inputs(&req.data.inputs, &files)?;
        let layout = RunLayout {
            files,
            read_only,
            outputs_dir: req.data.outputs.is_some(),
            args: req.data.argv.clone(),
            python_path: req.data.site_dir.clone(),
            overlay: None,
            image_root: None,
        };
        let outputs = req.data.outputs;
        let admitted = metrics::admit(&self.inner.permits).await?;
        // Issue 12: host tools travel over the report channel, so they imply one.
        let spec = req
            .report
            .clone()
            .or_else(|| req.tools.as_ref().map(|_| ReportSpec::default()));
        let report = spec.as_ref().map(|s| (s, req.tools.as_ref()));
        let out = self
            .run_admitted(&layout, &limits, req.stdin, fetch, outputs, report)
            .await;
        admitted.finished(out.as_ref().map(|(r, _)| r).map_err(|_| ()));
        out
    }

    /// One run that holds a concurrency slot, on the configured backend.
    async fn run_admitted(
        &self,
        layout: &RunLayout<'_>,
        limits: &Limits,
        stdin: Option<Vec<u8>>,
        fetch: Vec<String>,
        outputs: Option<Arc<dyn CollectOutputs>>,
        report: Option<(&ReportSpec, Option<&ToolHost>)>,
    ) -> Result<(ExecutionResult, Vec<(String, Vec<u8>)>), SandboxError> {
        let with_stdin = stdin.is_some();
        match &self.warm {
            Some(warm) => {
                // A run whose fork server died under it is run again, once, on the new server
                // (from a new work dir: nothing of the first attempt remains), like a run that
                // found the server dead (`WarmBackend::start_run`); a program's own fate never is.
                let mut retry = Some((stdin.clone(), fetch.clone(), outputs.clone()));
                let (mut stdin, mut fetch, mut outputs) = (stdin, fetch, outputs);
                loop {
                    let run = warm.start_run(layout, limits, with_stdin, report).await?;
                    match supervise::script(run, stdin, limits, fetch, outputs).await {
                        Err(e) if warm::server_died(&e) && retry.is_some() => {
                            tracing::warn!("a run's fork server died under it; running it again");
                            (stdin, fetch, outputs) = retry.take().expect("checked");
                        }
                        out => return out,
                    }
                }
            }
            None => {
                let id = self.inner.next_id();
                let run = fresh::start_script(&self.inner, id, layout, limits, with_stdin, report)
                    .await?;
                supervise::script(run, stdin, limits, fetch, outputs).await
            }
        }
    }

    /// A read-only layer holding a copy of the directory `src` (a repository), for
    /// [`Sandbox::workspace`]; removed once every holder has dropped it.
    pub async fn import_layer(&self, src: &Path) -> Result<Arc<FsLayer>, SandboxError> {
        workspace::import_layer(&self.inner, src).await
    }

    /// A layer holding the tar archive `src` (plain, gzip or zstd) unpacked by the image
    /// unpacker: an entry leaving the archive's root, a hard link outside it or a device node
    /// fails it; when every entry lies under one top-level dir (an sdist, `git archive
    /// --prefix`), that dir is the layer's root.
    pub async fn import_archive_layer(
        &self,
        src: &Path,
    ) -> Result<Arc<FsLayer>, image::ImageError> {
        workspace::import_archive_layer(&self.inner, src).await
    }

    /// A layer holding one file, a copy of `src` named `name`.
    pub async fn import_file_layer(
        &self,
        src: &Path,
        name: &str,
    ) -> Result<Arc<FsLayer>, SandboxError> {
        workspace::import_file_layer(&self.inner, src, name).await
    }

    /// A copy-on-write workspace over `layers` (bottom first): an episode's own copy of a
    /// prepared state, whose runs start fresh, on a tmpfs of `disk_mib` MiB (`None`: the config's
    /// `workspace_disk_mib`; above `workspace_disk_max_mib`: an error). See `workspace/`.
    pub fn workspace(
        &self,
        layers: Vec<Arc<FsLayer>>,
        disk_mib: Option<u64>,
    ) -> Result<Workspace, SandboxError> {
        Workspace::create(self.inner.clone(), layers, disk_mib, None)
    }

    /// The layer store of this sandbox's images, in its work root (root-only, hidden from runs
    /// like the workspace layers); opened (created) on each call.
    pub fn layer_store(&self) -> Result<image::LayerStore, image::ImageError> {
        image::LayerStore::open(self.inner.work_root.join("images"))
    }

    /// `image` (from a [`LayerStore`](image::LayerStore)) prepared as the root filesystem of
    /// runs: see `image/root.rs`.
    pub fn image_root(&self, image: &image::Image) -> Result<Arc<image::ImageRoot>, SandboxError> {
        self.image_root_with(image, image::RootPaths::default())
    }

    /// [`image_root`](Self::image_root) with `paths` of the image's own: the repository's place
    /// and per-run scratch dirs (`image::RootPaths`).
    pub fn image_root_with(
        &self,
        image: &image::Image,
        paths: image::RootPaths,
    ) -> Result<Arc<image::ImageRoot>, SandboxError> {
        image::ImageRoot::create(&self.inner, image, paths).map(Arc::new)
    }

    /// A workspace like [`workspace`](Self::workspace) whose runs see `root`'s image as their
    /// whole filesystem (the repository at `image::WORK_DIR/repo`), nothing of the host's.
    pub fn workspace_in(
        &self,
        layers: Vec<Arc<FsLayer>>,
        root: Arc<image::ImageRoot>,
        disk_mib: Option<u64>,
    ) -> Result<Workspace, SandboxError> {
        Workspace::create(self.inner.clone(), layers, disk_mib, Some(root))
    }

    /// Which backend runs scripts: `"warm fork"` or `"fresh"`.
    pub fn backend(&self) -> &'static str {
        if self.warm.is_some() {
            "warm fork"
        } else {
            "fresh"
        }
    }

    // Issue 14 (languages).
    /// Whether this sandbox can run `language`, and why not (its toolchain is missing).
    pub fn supports(&self, language: Language) -> Result<(), SandboxError> {
        if language == Language::Python {
            return Ok(());
        }
        compiled::toolchain_for(language).map(|_| ())
    }

    /// The version of `language`'s toolchain as its tool prints it (probed once per process;
    /// `unknown: ...` when it cannot be found): what a verdict's provenance records.
    pub async fn toolchain_version(&self, language: Language) -> String {
        lang::toolchain_version(self.python(), language).await
    }

    /// The default limits of a compile step.
    pub fn compile_limits(&self) -> &Limits {
        &self.inner.config.compile_limits
    }

    /// The compile cache's counters.
    pub fn compile_cache_stats(&self) -> CacheStats {
        self.artifacts.stats()
    }

    /// Starts a persistent interpreter for the env's `session` mode.
    pub async fn open_session(&self, limits: Option<Limits>) -> Result<PySession, SandboxError> {
        self.open_session_with(limits, &RunData::default(), None)
            .await
    }

    /// A session whose work dir holds a data task's read-only input files and `outputs/`, with its
    /// inputs in `sys.argv[1:]` and its packages importable (issue 13; typed outputs are read by
    /// the reward runs, which replay the session's program), and whose cells may call `tools`
    /// (issue 12; with a report spec).
    pub async fn open_session_with(
        &self,
        limits: Option<Limits>,
        data: &RunData,
        tools: Option<ToolHost>,
    ) -> Result<PySession, SandboxError> {
        let limits = limits.unwrap_or(self.inner.config.limits);
        let id = self.inner.next_id();
        let mut read_only = Vec::with_capacity(data.inputs.len());
        for (name, bytes) in &data.inputs {
            read_only.push((workdir::validate_rel(name)?, &bytes[..]));
        }
        let layout = RunLayout {
            read_only,
            outputs_dir: data.outputs.is_some(),
            python_path: data.site_dir.clone(),
            overlay: None,
            image_root: None,
            args: data.argv.clone(),
            ..RunLayout::default()
        };
        PySession::open(self.inner.clone(), id, limits, &layout, tools).await
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
                let layout = RunLayout {
                    files: vec![(PathBuf::from("main.py"), &b"import sys\nprint('ok')\n"[..])],
                    ..RunLayout::default()
                };
                let none = Default::default();
                match warm {
                    Some(warm) => {
                        let run = warm.start_run_as(u64::MAX - 1, &layout, &limits).await?;
                        supervise::script(run, None, &limits, Vec::new(), none).await
                    }
                    None => {
                        let run =
                            fresh::start_script(inner, u64::MAX, &layout, &limits, false, None)
                                .await?;
                        supervise::script(run, None, &limits, Vec::new(), none).await
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
