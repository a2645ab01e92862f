//! What callers hand the sandbox ([`ExecRequest`]) and its one error type ([`SandboxError`]). A
//! failing program is an [`ExecutionResult`](env_core::ExecutionResult), never an error; only a
//! failure of the sandbox itself (infrastructure) is a [`SandboxError`].

use std::path::PathBuf;

use super::config::{IsolationLevel, Limits};
use crate::data::TaskData;
use crate::lang::Language;

/// One execution: `source` becomes `main.py` in a fresh work dir, run with `python -I main.py` (or,
/// for another `language`, its source file, compiled and run with that language's toolchain).
#[derive(Debug, Clone, Default)]
pub struct ExecRequest {
    pub source: String,
    /// Extra files, by relative path (no `..`, not absolute); parent dirs are created.
    pub files: Vec<(String, Vec<u8>)>,
    /// `None`: stdin is closed (reads see EOF).
    pub stdin: Option<Vec<u8>>,
    /// `None`: the sandbox's default limits.
    pub limits: Option<Limits>,
    // Data tasks (issue 13).
    /// Read-only input files (owned by the server, mode 0444), `--name value` arguments after
    /// `main.py`, and the typed outputs read back from `outputs/` after the run.
    pub data: TaskData,
    // Issue 14 (languages): what the source is written in, and its compile step's limits.
    /// The source's language (default Python). Other languages start fresh under the same layers
    /// (`compiled.rs`); compiled ones compile first, once per distinct source (artifact cache).
    pub language: Language,
    /// Limits of the compile step (`None`: the sandbox's `compile_limits`).
    pub compile_limits: Option<Limits>,
    /// Arguments after the program (`argv[1..]`), for languages other than Python (a special
    /// judge's testlib-style `input output answer`); a Python program runs as `main.py` alone.
    pub args: Vec<String>,
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
    /// Issue 14: the request names a language whose toolchain this machine lacks (a deployment
    /// precondition, not a machinery failure: retrying elsewhere with the same setup won't help).
    #[error("language {language} is not available here: {reason}")]
    LanguageUnavailable { language: Language, reason: String },
}

impl SandboxError {
    pub(crate) fn setup(stage: &'static str) -> impl FnOnce(std::io::Error) -> SandboxError {
        move |source| SandboxError::Setup { stage, source }
    }
}
