//! Requests, outcomes and errors of the sandbox. A failing program is an [`ExecOutcome`]; only a
//! failure of the sandbox itself (infrastructure) is a [`SandboxError`].

use std::path::PathBuf;

use super::config::{IsolationLevel, Limits};

/// One execution: `source` becomes `main.py` in a fresh work dir, run with `python -I main.py`.
#[derive(Debug, Clone, Default)]
pub struct ExecRequest {
    pub source: String,
    /// Extra files, by relative path (no `..`, not absolute); parent dirs are created.
    pub files: Vec<(String, Vec<u8>)>,
    /// `None`: stdin is closed (reads see EOF).
    pub stdin: Option<Vec<u8>>,
    /// `None`: the sandbox's default limits.
    pub limits: Option<Limits>,
}

impl ExecRequest {
    /// A request running `source` with no files, no stdin and the default limits.
    pub fn new(source: impl Into<String>) -> Self {
        ExecRequest {
            source: source.into(),
            ..ExecRequest::default()
        }
    }
}

/// What happened to one execution.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutcome {
    /// `None` when a signal ended the main process.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The CPU or wall-clock limit ended the execution.
    pub timed_out: bool,
    /// The memory limit was hit (cgroup OOM kill, or a `MemoryError`).
    pub memory_exceeded: bool,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub wall_ms: u64,
    pub cpu_ms: u64,
    /// Peak memory in bytes (cgroup peak when available, else the max RSS of a process).
    pub peak_rss: u64,
}

impl ExecOutcome {
    /// True when the program exited with status 0 within its limits.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.memory_exceeded
    }

    /// The env-core view of this outcome (output decoded as lossy UTF-8).
    pub fn to_execution_result(&self) -> env_core::ExecutionResult {
        env_core::ExecutionResult {
            exit_code: self.exit_code,
            signal: self.signal,
            timed_out: self.timed_out,
            memory_exceeded: self.memory_exceeded,
            stdout: String::from_utf8_lossy(&self.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&self.stderr).into_owned(),
            stdout_truncated: self.stdout_truncated,
            stderr_truncated: self.stderr_truncated,
            wall_ms: self.wall_ms,
            cpu_ms: self.cpu_ms,
            peak_rss_bytes: self.peak_rss,
        }
    }
}

/// Infrastructure failures: the execution could not be set up or supervised. Retry elsewhere;
/// never turn this into a reward.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot find a Python interpreter: {0}")]
    PythonNotFound(String),
    #[error("invalid file path in request: {0:?}")]
    InvalidPath(String),
    #[error("work dir {path}: {source}")]
    WorkDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("sandbox setup failed ({stage}): {source}")]
    Setup {
        stage: &'static str,
        source: std::io::Error,
    },
    #[error("the sandboxed process failed before running Python ({stage}): {source}")]
    Child {
        stage: &'static str,
        source: std::io::Error,
    },
    #[error("isolation level {actual} is below the required {required}:\n{report}")]
    InsufficientIsolation {
        required: IsolationLevel,
        actual: IsolationLevel,
        report: String,
    },
    #[error("the session is dead (a previous exec timed out or crashed)")]
    SessionDead,
    #[error("session protocol error: {0}")]
    Session(String),
    #[error("the sandbox is shutting down")]
    Closed,
}

impl SandboxError {
    pub(crate) fn setup(stage: &'static str) -> impl FnOnce(std::io::Error) -> SandboxError {
        move |source| SandboxError::Setup { stage, source }
    }
}
