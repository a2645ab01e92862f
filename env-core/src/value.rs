//! Dynamically typed observations and actions, the currency of the object-safe [`crate::DynEnv`].
//!
//! Python's Gymnasium is dynamically typed; `Value` is its Rust image and maps one to one onto the
//! `codegym.v1.Value` protobuf message.

use ndarray::ArrayD;
use serde::{Deserialize, Serialize};

/// A dense array with its element type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dtype", content = "array", rename_all = "lowercase")]
pub enum Tensor {
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
    I32(ArrayD<i32>),
    I64(ArrayD<i64>),
    U8(ArrayD<u8>),
    Bool(ArrayD<bool>),
}

impl Tensor {
    /// The shape of the array.
    pub fn shape(&self) -> &[usize] {
        match self {
            Tensor::F32(a) => a.shape(),
            Tensor::F64(a) => a.shape(),
            Tensor::I32(a) => a.shape(),
            Tensor::I64(a) => a.shape(),
            Tensor::U8(a) => a.shape(),
            Tensor::Bool(a) => a.shape(),
        }
    }

    /// Every element widened to `f64` in row-major order (bools as 0/1).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self {
            Tensor::F32(a) => a.iter().map(|&x| f64::from(x)).collect(),
            Tensor::F64(a) => a.iter().copied().collect(),
            Tensor::I32(a) => a.iter().map(|&x| f64::from(x)).collect(),
            // i64 -> f64 is lossy above 2^53, which no space bound here reaches.
            Tensor::I64(a) => a.iter().map(|&x| x as f64).collect(),
            Tensor::U8(a) => a.iter().map(|&x| f64::from(x)).collect(),
            Tensor::Bool(a) => a.iter().map(|&x| f64::from(u8::from(x))).collect(),
        }
    }
}

/// What one program execution did: THE execution result of the workspace. The sandbox assembles
/// it, the coding env returns it as an observation, rewards score it, the proto's
/// `codegym.v1.ExecutionResult` and the Python client's dict carry it unchanged.
///
/// Output is text, decided once: the sandbox captures stdout and stderr as bytes, cuts each at its
/// cap (in bytes, `*_truncated` then set), and decodes the kept bytes exactly once, as lossy UTF-8,
/// when it assembles this value. For comparing output this means:
/// - Programs that print text (Python's `print` with the sandbox's `PYTHONIOENCODING=utf-8`) are
///   unaffected: their bytes are valid UTF-8 and decode to exactly what they printed.
/// - Invalid bytes (written with `sys.stdout.buffer` or `os.write`) become U+FFFD, so outputs that
///   differ only in invalid bytes compare equal, and a cap that cuts a multi-byte character leaves
///   one U+FFFD at the end. `stdout.len()` may therefore exceed the cap (at most 3 bytes per kept
///   byte); it equals the cap when the kept bytes are ASCII.
/// - Nothing downstream sees raw bytes: checks that need exact bytes must run inside the program.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionResult {
    /// `None` when a signal ended the process.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The CPU or wall-clock limit ended the execution.
    pub timed_out: bool,
    /// The memory limit was hit (cgroup OOM kill, or a `MemoryError`).
    pub memory_exceeded: bool,
    /// Captured output, decoded once as lossy UTF-8 (see the type's doc).
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub wall_ms: u64,
    pub cpu_ms: u64,
    /// Peak memory in bytes (cgroup peak when available, else the max RSS of a process).
    pub peak_rss_bytes: u64,
    // Issue 14 (languages): the compile step of a compiled language, reported separately.
    /// The compile's own result when the program's language compiles (also on a compile-cache
    /// hit: the cached compile's result). When the compile failed the program never ran: the
    /// fields above are empty and `exit_code` is `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile: Option<Box<ExecutionResult>>,
    // Typed outputs (issue 13, data tasks).
    /// The outputs the run declared, by name: each parsed by its declared type from the file the
    /// program wrote to `outputs/<name>`, or why it could not be (missing, malformed). Empty when the
    /// run declared none. A missing or malformed output is an outcome, never an error.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub outputs: std::collections::BTreeMap<String, OutputValue>,

    // --- Results as agents use them (issue 12): return value, variables, error. Reported by the
    // program's runner inside the sandbox over a private descriptor (never parsed from stdout or
    // stderr), so printing cannot fake them; a program writing to that descriptor on purpose can
    // change only its own values, which rewards never read.
    /// The value of the program's last top-level expression statement, as a REPL shows it. `None`
    /// when the last statement is not an expression or its value is Python's `None` (a REPL shows
    /// nothing), when the program raised or was killed, or when the run did not ask for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_value: Option<ReturnValue>,
    /// The program's top-level variables, when they were requested (boxed: most results have
    /// none, and `Value`s stay small).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<Box<Variables>>,
    /// Why the program failed: its uncaught exception, or the limit that ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ProgramError>,
}

/// One declared output of a run (issue 13, data tasks): its parsed value (JSON: a string, number,
/// bool, or for a file `{"size", "text" | "base64"}`), or why it has none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputValue {
    Value(serde_json::Value),
    Error(String),
}

impl OutputValue {
    /// The value, if the output parsed.
    pub fn value(&self) -> Option<&serde_json::Value> {
        match self {
            OutputValue::Value(v) => Some(v),
            OutputValue::Error(_) => None,
        }
    }
}

/// The value of a program's last expression statement (issue 12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ReturnValue {
    /// The value as JSON.
    Json { value: serde_json::Value },
    /// The value has no JSON form (or its JSON is over the cap): its type and capped `repr`.
    Unrepresentable {
        type_name: String,
        repr: String,
        reason: String,
    },
}

/// A program's top-level variables whose values are JSON, and the names left out (issue 12).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variables {
    pub values: serde_json::Map<String, serde_json::Value>,
    pub dropped: Vec<DroppedVariable>,
}

/// A variable left out of [`Variables::values`], and why (not JSON, over a cap).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedVariable {
    pub name: String,
    pub reason: String,
}

/// Why a program failed, as an agent reads it (issue 12): the exception type and message
/// (`TimeoutError` / `MemoryError` for the sandbox's limits).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramError {
    pub type_name: String,
    pub message: String,
}

impl ExecutionResult {
    /// True when the program exited with status 0 within its limits.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.memory_exceeded
    }

    /// Issue 14: the program's compile step ran and failed (so the program never ran).
    pub fn compile_failed(&self) -> bool {
        self.compile.as_ref().is_some_and(|c| !c.success()) && self.exit_code.is_none()
    }
}

/// An observation or an action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Value {
    Text(String),
    Tensor(Tensor),
    Json(serde_json::Value),
    Execution(ExecutionResult),
    /// An element of a `Discrete` space.
    Discrete(i64),
    List(Vec<Value>),
    /// Ordered like the `Dict` space's keys.
    Dict(Vec<(String, Value)>),
}

impl Value {
    /// A short name of the variant, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Text(_) => "text",
            Value::Tensor(_) => "tensor",
            Value::Json(_) => "json",
            Value::Execution(_) => "execution",
            Value::Discrete(_) => "discrete",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
        }
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Text(s)
    }
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Self {
        Value::Tensor(t)
    }
}

impl From<ExecutionResult> for Value {
    fn from(e: ExecutionResult) -> Self {
        Value::Execution(e)
    }
}

impl TryFrom<Value> for String {
    type Error = crate::EnvError;
    fn try_from(v: Value) -> Result<Self, Self::Error> {
        match v {
            Value::Text(s) => Ok(s),
            other => Err(crate::EnvError::InvalidAction(format!(
                "expected text, got {}",
                other.kind()
            ))),
        }
    }
}

macro_rules! tensor_from_array {
    ($($t:ty => $variant:ident),*) => {$(
        impl<D: ndarray::Dimension> From<ndarray::Array<$t, D>> for Tensor {
            fn from(a: ndarray::Array<$t, D>) -> Self {
                Tensor::$variant(a.into_dyn())
            }
        }

        impl<D: ndarray::Dimension> From<ndarray::Array<$t, D>> for Value {
            fn from(a: ndarray::Array<$t, D>) -> Self {
                Value::Tensor(a.into())
            }
        }
    )*};
}

tensor_from_array!(f32 => F32, f64 => F64, i32 => I32, i64 => I64, u8 => U8, bool => Bool);

impl Tensor {
    /// The element type.
    pub fn dtype(&self) -> crate::DType {
        use crate::DType;
        match self {
            Tensor::F32(_) => DType::F32,
            Tensor::F64(_) => DType::F64,
            Tensor::I32(_) => DType::I32,
            Tensor::I64(_) => DType::I64,
            Tensor::U8(_) => DType::U8,
            Tensor::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape().iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
