//! What callers hand the sandbox ([`ExecRequest`]) and its one error type ([`SandboxError`]). A
//! failing program is an [`ExecutionResult`](env_core::ExecutionResult), never an error; only a
//! failure of the sandbox itself (infrastructure) is a [`SandboxError`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use env_core::OutputValue;

use super::config::{IsolationLevel, Limits};
use crate::lang::Language;

/// One execution: `source` becomes `main.py` in a fresh work dir, run with `python -I main.py` (or,
/// for another `language`, its source file, compiled and run with that language's toolchain).
#[derive(Clone, Default)]
pub struct ExecRequest {
    pub source: String,
    /// Extra files, by relative path (no `..`, not absolute); parent dirs are created.
    pub files: Vec<(String, Vec<u8>)>,
    /// `None`: stdin is closed (reads see EOF).
    pub stdin: Option<Vec<u8>>,
    /// `None`: the sandbox's default limits.
    pub limits: Option<Limits>,
    /// Read-only input files, arguments after `main.py`, a package dir, and the outputs read
    /// back after the run.
    pub data: RunData,
    // Issue 14 (languages): what the source is written in, and its compile step's limits.
    /// The source's language (default Python). Other languages start fresh under the same layers
    /// (`compiled.rs`); compiled ones compile first, once per distinct source (artifact cache).
    pub language: Language,
    /// Limits of the compile step (`None`: the sandbox's `compile_limits`).
    pub compile_limits: Option<Limits>,
    /// Arguments after the program (`argv[1..]`), for languages other than Python (a special
    /// judge's testlib-style `input output answer`); a Python program runs as `main.py` alone.
    pub args: Vec<String>,
    /// Issue 12: report the return value, error and (on request) variables, and inject `vars`
    /// first. `None`: a plain script run (test harness runs, SandboxFusion) with no report channel.
    pub report: Option<ReportSpec>,
    /// Issue 12: host tools the program may call as Python functions (script runs; implies a
    /// report channel, over which the calls travel).
    pub tools: Option<ToolHost>,
}

impl std::fmt::Debug for ExecRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecRequest")
            .field("source", &self.source.len())
            .field("files", &self.files.len())
            .field("stdin", &self.stdin.as_ref().map(Vec::len))
            .field("limits", &self.limits)
            .field("data", &self.data)
            .field("language", &self.language)
            .field("compile_limits", &self.compile_limits)
            .field("args", &self.args)
            .field("report", &self.report)
            .field("tools", &self.tools.as_ref().map(|t| &t.names))
            .finish()
    }
}

/// What a run reads and writes besides its program and files: what a caller's data (a task's input
/// files, inputs and declared outputs) becomes for the sandbox, which knows nothing of tasks.
#[derive(Clone, Default)]
pub struct RunData {
    /// Read-only input files by relative path: owned by the server, mode 0444, never over the
    /// program's own files.
    pub inputs: BTreeMap<String, Arc<[u8]>>,
    /// Arguments after `main.py` (Python runs and sessions).
    pub argv: Vec<String>,
    /// A package site dir, first on the run's import path (read-only, see
    /// [`crate::SandboxConfig::read_only_dirs`]).
    pub site_dir: Option<PathBuf>,
    /// When set, the run gets an `outputs/` directory (also `$CODEGYM_OUTPUTS`), and this reads it
    /// after every process of the run has ended, before the work dir is removed.
    pub outputs: Option<Arc<dyn CollectOutputs>>,
}

impl std::fmt::Debug for RunData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunData")
            .field("inputs", &self.inputs.keys().collect::<Vec<_>>())
            .field("argv", &self.argv)
            .field("site_dir", &self.site_dir)
            .field("outputs", &self.outputs.is_some())
            .finish()
    }
}

/// Reads a finished run's outputs from its work dir. The program wrote them and may have planted
/// anything there: read with [`crate::read_beneath`] (no symlinks, regular files only).
pub trait CollectOutputs: Send + Sync {
    fn collect(&self, workdir: &Path) -> BTreeMap<String, OutputValue>;
}

// A host tool call (issue 12) and its handler are protocol types of their own crate, shared with
// the server's stream and the rollout engine.
pub use host_tool_calls::{HostToolCall, ToolHandler};

/// The host tools of one run (issue 12): their names (each a global function in the program),
/// the handler, and the caps.
#[derive(Clone)]
pub struct ToolHost {
    pub names: Vec<String>,
    pub handler: ToolHandler,
    pub limits: ToolLimits,
}

impl std::fmt::Debug for ToolHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolHost")
            .field("names", &self.names)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Equal when the same handler serves the same tools under the same caps.
impl PartialEq for ToolHost {
    fn eq(&self, other: &Self) -> bool {
        self.names == other.names
            && self.limits == other.limits
            && std::sync::Arc::ptr_eq(&self.handler, &other.handler)
    }
}

impl Eq for ToolHost {}

/// Caps on a run's tool calls. The run's own wall clock keeps running during calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLimits {
    /// A call not answered within this is an error in the program (`TimeoutError` message).
    pub call_timeout_ms: u64,
    /// Calls per run; later calls fail at once.
    pub max_calls: u32,
    /// Largest call (its JSON: name, args, kwargs) and result, in bytes.
    pub max_arg_bytes: usize,
    pub max_result_bytes: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            call_timeout_ms: 30_000,
            max_calls: 256,
            max_arg_bytes: 1 << 20,
            max_result_bytes: 1 << 20,
        }
    }
}

/// What the program's runner reports besides its output, and the names it injects first (issue
/// 12). Travels to the runner over the run's private report descriptor, never through a file.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReportSpec {
    /// Global names set before the program runs (checked by [`ReportSpec::check_vars`]).
    pub vars: serde_json::Map<String, serde_json::Value>,
    /// Also report the top-level variables (capped, see [`super::report`]).
    pub variables: bool,
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
    #[error(
        "the sandbox's isolation level here is {actual}, below the required {required}; a \
         deployment that accepts less must ask for it (`--isolation {actual}`, or the sandbox \
         config's `min_isolation`). Layers:\n{report}"
    )]
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
    /// Issue 14 (HumanEval+ / MBPP+): the task's reference solution failed in the sandbox, so
    /// there are no expected outputs to compare with (a broken task: not a reward, not
    /// retryable).
    #[error("the task's reference solution failed: {0}")]
    Reference(String),
}

impl SandboxError {
    pub(crate) fn setup(stage: &'static str) -> impl FnOnce(std::io::Error) -> SandboxError {
        move |source| SandboxError::Setup { stage, source }
    }
}
