//! Conversions between env-core's types and the `codegym.v1` messages.
//!
//! Server and clients use the same functions, so an observation survives a round trip bit for bit.
//! Decoding never panics: malformed messages (a tensor whose byte length does not match its shape, an
//! unset `oneof`, invalid JSON) are a [`ConvertError`], which servers report as INVALID_ARGUMENT.

use env_core::{
    DType, DroppedVariable, EnvSpec, ExecutionResult, Info, ProgramError, ReturnValue, Space, Step,
    Tensor, Value, Variables,
};
use ndarray::{ArrayD, IxDyn};

use crate::v1;

/// A message that cannot be turned into an env-core value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConvertError {
    #[error("`{0}` is required")]
    Missing(&'static str),
    #[error("`{field}` is not a valid JSON object: {reason}")]
    Json { field: &'static str, reason: String },
    #[error("tensor dtype is unspecified or unknown ({0})")]
    DType(i32),
    #[error("tensor data has {actual} bytes, shape {shape:?} of {dtype} needs {expected}")]
    TensorSize {
        shape: Vec<u64>,
        dtype: &'static str,
        expected: usize,
        actual: usize,
    },
    #[error("tensor shape {0:?} is too large")]
    TensorShape(Vec<u64>),
    #[error("dict value has {keys} keys but {values} values")]
    DictArity { keys: usize, values: usize },
}

/// Parses a `*_json` field holding a JSON object; the empty string means `{}`.
pub fn json_object(
    text: &str,
    field: &'static str,
) -> Result<serde_json::Map<String, serde_json::Value>, ConvertError> {
    if text.trim().is_empty() {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_str(text) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(other) => Err(ConvertError::Json {
            field,
            reason: format!("expected an object, got {}", json_kind(&other)),
        }),
        Err(e) => Err(ConvertError::Json {
            field,
            reason: e.to_string(),
        }),
    }
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Serializes an `info`/`options` map (never fails: it is already JSON).
pub fn json_text(map: &serde_json::Map<String, serde_json::Value>) -> String {
    serde_json::Value::Object(map.clone()).to_string()
}

/// A listed task as its message; `messages` are the opening chat messages `(role, content)`.
pub fn task_to_proto(task: &env_core::TaskInfo, messages: &[(&str, &str)]) -> v1::TaskEntry {
    let messages: Vec<serde_json::Value> = messages
        .iter()
        .map(|(role, content)| serde_json::json!({"role": role, "content": content}))
        .collect();
    v1::TaskEntry {
        id: task.id.clone(),
        prompt: task.prompt.clone(),
        metadata_json: json_text(&task.metadata),
        completion_prefix: task.completion_prefix.clone(),
        messages_json: serde_json::Value::Array(messages).to_string(),
        language: task.language.clone().unwrap_or_default(),
    }
}

pub fn dtype_to_proto(d: DType) -> v1::Dtype {
    match d {
        DType::F32 => v1::Dtype::Float32,
        DType::F64 => v1::Dtype::Float64,
        DType::I32 => v1::Dtype::Int32,
        DType::I64 => v1::Dtype::Int64,
        DType::U8 => v1::Dtype::Uint8,
        DType::Bool => v1::Dtype::Bool,
    }
}

pub fn tensor_to_proto(t: &Tensor) -> v1::Tensor {
    fn le<T: Copy, const N: usize>(a: &ArrayD<T>, f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        let mut out = Vec::with_capacity(a.len() * N);
        a.iter().for_each(|&x| out.extend_from_slice(&f(x)));
        out
    }
    let (dtype, data) = match t {
        Tensor::F32(a) => (DType::F32, le(a, f32::to_le_bytes)),
        Tensor::F64(a) => (DType::F64, le(a, f64::to_le_bytes)),
        Tensor::I32(a) => (DType::I32, le(a, i32::to_le_bytes)),
        Tensor::I64(a) => (DType::I64, le(a, i64::to_le_bytes)),
        Tensor::U8(a) => (DType::U8, a.iter().copied().collect()),
        Tensor::Bool(a) => (DType::Bool, a.iter().map(|&b| u8::from(b)).collect()),
    };
    v1::Tensor {
        dtype: dtype_to_proto(dtype) as i32,
        shape: t.shape().iter().map(|&d| d as u64).collect(),
        data,
    }
}

pub fn tensor_from_proto(t: v1::Tensor) -> Result<Tensor, ConvertError> {
    let dims: Vec<usize> = t
        .shape
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<_>>()
        .ok_or_else(|| ConvertError::TensorShape(t.shape.clone()))?;
    let count = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| ConvertError::TensorShape(t.shape.clone()))?;
    let dtype = v1::Dtype::try_from(t.dtype).map_err(|_| ConvertError::DType(t.dtype))?;
    let (name, width) = match dtype {
        v1::Dtype::Unspecified => return Err(ConvertError::DType(t.dtype)),
        v1::Dtype::Float32 => ("float32", 4),
        v1::Dtype::Float64 => ("float64", 8),
        v1::Dtype::Int32 => ("int32", 4),
        v1::Dtype::Int64 => ("int64", 8),
        v1::Dtype::Uint8 => ("uint8", 1),
        v1::Dtype::Bool => ("bool", 1),
    };
    let expected = count
        .checked_mul(width)
        .ok_or_else(|| ConvertError::TensorShape(t.shape.clone()))?;
    if t.data.len() != expected {
        return Err(ConvertError::TensorSize {
            shape: t.shape,
            dtype: name,
            expected,
            actual: t.data.len(),
        });
    }
    fn le<T, const N: usize>(data: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
        // chunks_exact(N) yields exactly N bytes, so the conversion cannot fail.
        data.chunks_exact(N)
            .map(|c| f(c.try_into().unwrap_or([0; N])))
            .collect()
    }
    Ok(match dtype {
        v1::Dtype::Float32 => {
            Tensor::F32(shaped(&dims, &t.shape, le(&t.data, f32::from_le_bytes))?)
        }
        v1::Dtype::Float64 => {
            Tensor::F64(shaped(&dims, &t.shape, le(&t.data, f64::from_le_bytes))?)
        }
        v1::Dtype::Int32 => Tensor::I32(shaped(&dims, &t.shape, le(&t.data, i32::from_le_bytes))?),
        v1::Dtype::Int64 => Tensor::I64(shaped(&dims, &t.shape, le(&t.data, i64::from_le_bytes))?),
        v1::Dtype::Uint8 => Tensor::U8(shaped(&dims, &t.shape, t.data.clone())?),
        v1::Dtype::Bool => Tensor::Bool(shaped(
            &dims,
            &t.shape,
            t.data.iter().map(|&b| b != 0).collect(),
        )?),
        v1::Dtype::Unspecified => return Err(ConvertError::DType(t.dtype)),
    })
}

fn shaped<T>(dims: &[usize], shape: &[u64], elems: Vec<T>) -> Result<ArrayD<T>, ConvertError> {
    ArrayD::from_shape_vec(IxDyn(dims), elems)
        .map_err(|_| ConvertError::TensorShape(shape.to_vec()))
}

/// The one conversion of an execution result to the wire (same fields, same names).
pub fn execution_to_proto(e: &ExecutionResult) -> v1::ExecutionResult {
    v1::ExecutionResult {
        exit_code: e.exit_code,
        signal: e.signal,
        timed_out: e.timed_out,
        memory_exceeded: e.memory_exceeded,
        stdout: e.stdout.clone(),
        stderr: e.stderr.clone(),
        stdout_truncated: e.stdout_truncated,
        stderr_truncated: e.stderr_truncated,
        wall_ms: e.wall_ms,
        cpu_ms: e.cpu_ms,
        peak_rss_bytes: e.peak_rss_bytes,
        // Issue 12: results as agents use them.
        return_value_json: match &e.return_value {
            Some(ReturnValue::Json { value }) => Some(value.to_string()),
            _ => None,
        },
        return_value_unrepresentable: match &e.return_value {
            Some(ReturnValue::Unrepresentable {
                type_name,
                repr,
                reason,
            }) => Some(v1::UnrepresentableValue {
                type_name: type_name.clone(),
                repr: repr.clone(),
                reason: reason.clone(),
            }),
            _ => None,
        },
        variables_json: e
            .variables
            .as_ref()
            .map(|v| serde_json::Value::Object(v.values.clone()).to_string()),
        dropped_variables: e
            .variables
            .iter()
            .flat_map(|v| &v.dropped)
            .map(|d| v1::DroppedVariable {
                name: d.name.clone(),
                reason: d.reason.clone(),
            })
            .collect(),
        error: e.error.as_ref().map(|x| v1::ProgramError {
            type_name: x.type_name.clone(),
            message: x.message.clone(),
        }),
        success: e.success(),
        // Issue 14: the compile step.
        compile: e
            .compile
            .as_deref()
            .map(|c| Box::new(execution_to_proto(c))),
        outputs: e
            .outputs
            .iter()
            .map(|(k, v)| (k.clone(), output_to_proto(v)))
            .collect(),
    }
}

// Issue 13 (data tasks): typed outputs on the wire, their value as JSON text.
fn output_to_proto(v: &env_core::OutputValue) -> v1::OutputValue {
    use v1::output_value::Kind;
    let kind = match v {
        env_core::OutputValue::Value(j) => Kind::Json(j.to_string()),
        env_core::OutputValue::Error(e) => Kind::Error(e.clone()),
    };
    v1::OutputValue { kind: Some(kind) }
}

/// A value that does not parse (a foreign sender) keeps its text as the error, never a panic.
fn output_from_proto(v: v1::OutputValue) -> env_core::OutputValue {
    use v1::output_value::Kind;
    match v.kind {
        Some(Kind::Json(j)) => match serde_json::from_str(&j) {
            Ok(value) => env_core::OutputValue::Value(value),
            Err(e) => env_core::OutputValue::Error(format!("invalid output JSON on the wire: {e}")),
        },
        Some(Kind::Error(e)) => env_core::OutputValue::Error(e),
        None => env_core::OutputValue::Error("empty output value".into()),
    }
}

/// The one conversion of an execution result from the wire.
pub fn execution_from_proto(e: v1::ExecutionResult) -> Result<ExecutionResult, ConvertError> {
    let json = |field: &'static str, text: &str| {
        serde_json::from_str::<serde_json::Value>(text).map_err(|err| ConvertError::Json {
            field,
            reason: err.to_string(),
        })
    };
    // Issue 12: results as agents use them.
    let return_value = match (e.return_value_json, e.return_value_unrepresentable) {
        (Some(text), _) => Some(ReturnValue::Json {
            value: json("execution.return_value_json", &text)?,
        }),
        (None, Some(u)) => Some(ReturnValue::Unrepresentable {
            type_name: u.type_name,
            repr: u.repr,
            reason: u.reason,
        }),
        (None, None) => None,
    };
    let variables = match e.variables_json {
        Some(text) => match json("execution.variables_json", &text)? {
            serde_json::Value::Object(values) => Some(Box::new(Variables {
                values,
                dropped: e
                    .dropped_variables
                    .into_iter()
                    .map(|d| DroppedVariable {
                        name: d.name,
                        reason: d.reason,
                    })
                    .collect(),
            })),
            _ => {
                return Err(ConvertError::Json {
                    field: "execution.variables_json",
                    reason: "not a JSON object".into(),
                });
            }
        },
        None => None,
    };
    Ok(ExecutionResult {
        exit_code: e.exit_code,
        signal: e.signal,
        timed_out: e.timed_out,
        memory_exceeded: e.memory_exceeded,
        stdout: e.stdout,
        stderr: e.stderr,
        stdout_truncated: e.stdout_truncated,
        stderr_truncated: e.stderr_truncated,
        wall_ms: e.wall_ms,
        cpu_ms: e.cpu_ms,
        peak_rss_bytes: e.peak_rss_bytes,
        outputs: e
            .outputs
            .into_iter()
            .map(|(k, v)| (k, output_from_proto(v)))
            .collect(),
        // Issue 14: the compile step.
        compile: e
            .compile
            .map(|c| execution_from_proto(*c).map(Box::new))
            .transpose()?,
        return_value,
        variables,
        error: e.error.map(|x| ProgramError {
            type_name: x.type_name,
            message: x.message,
        }),
    })
}

pub fn value_to_proto(v: &Value) -> v1::Value {
    use v1::value::Kind;
    let kind = match v {
        Value::Text(s) => Kind::Text(s.clone()),
        Value::Tensor(t) => Kind::Tensor(tensor_to_proto(t)),
        Value::Json(j) => Kind::Json(j.to_string()),
        Value::Execution(e) => Kind::Execution(execution_to_proto(e)),
        Value::Discrete(i) => Kind::Discrete(*i),
        Value::List(items) => Kind::List(v1::ValueList {
            items: items.iter().map(value_to_proto).collect(),
        }),
        Value::Dict(entries) => Kind::Dict(v1::ValueDict {
            keys: entries.iter().map(|(k, _)| k.clone()).collect(),
            values: entries.iter().map(|(_, v)| value_to_proto(v)).collect(),
        }),
    };
    v1::Value { kind: Some(kind) }
}

pub fn value_from_proto(v: v1::Value) -> Result<Value, ConvertError> {
    use v1::value::Kind;
    Ok(match v.kind.ok_or(ConvertError::Missing("value.kind"))? {
        Kind::Text(s) => Value::Text(s),
        Kind::Tensor(t) => Value::Tensor(tensor_from_proto(t)?),
        Kind::Json(j) => Value::Json(serde_json::from_str(&j).map_err(|e| ConvertError::Json {
            field: "value.json",
            reason: e.to_string(),
        })?),
        Kind::Execution(e) => Value::Execution(execution_from_proto(e)?),
        Kind::Discrete(i) => Value::Discrete(i),
        Kind::List(l) => Value::List(
            l.items
                .into_iter()
                .map(value_from_proto)
                .collect::<Result<_, _>>()?,
        ),
        Kind::Dict(d) => {
            if d.keys.len() != d.values.len() {
                return Err(ConvertError::DictArity {
                    keys: d.keys.len(),
                    values: d.values.len(),
                });
            }
            Value::Dict(
                d.keys
                    .into_iter()
                    .zip(d.values)
                    .map(|(k, v)| Ok((k, value_from_proto(v)?)))
                    .collect::<Result<_, ConvertError>>()?,
            )
        }
    })
}

pub fn space_to_proto(s: &Space) -> v1::Space {
    use v1::space::Kind;
    let kind = match s {
        Space::Discrete { n, start } => Kind::Discrete(v1::DiscreteSpace {
            n: *n,
            start: *start,
        }),
        Space::Box(b) => Kind::Box(v1::BoxSpace {
            dtype: dtype_to_proto(b.dtype) as i32,
            shape: b.low.shape().iter().map(|&d| d as u64).collect(),
            low: b.low.iter().copied().collect(),
            high: b.high.iter().copied().collect(),
        }),
        Space::MultiDiscrete { nvec } => {
            Kind::MultiDiscrete(v1::MultiDiscreteSpace { nvec: nvec.clone() })
        }
        Space::MultiBinary { shape } => Kind::MultiBinary(v1::MultiBinarySpace {
            shape: shape.iter().map(|&d| d as u64).collect(),
        }),
        Space::Text {
            min_length,
            max_length,
            charset,
        } => Kind::Text(v1::TextSpace {
            min_length: *min_length as u64,
            max_length: *max_length as u64,
            charset: charset.clone().unwrap_or_default(),
        }),
        Space::Dict(entries) => Kind::Dict(v1::DictSpace {
            keys: entries.iter().map(|(k, _)| k.clone()).collect(),
            spaces: entries.iter().map(|(_, s)| space_to_proto(s)).collect(),
        }),
        Space::Tuple(items) => Kind::Tuple(v1::TupleSpace {
            spaces: items.iter().map(space_to_proto).collect(),
        }),
    };
    v1::Space { kind: Some(kind) }
}

pub fn spec_to_proto(spec: &EnvSpec, supports_evaluate: bool) -> v1::EnvSpec {
    v1::EnvSpec {
        id: spec.id.clone(),
        description: spec.description.clone(),
        max_episode_steps: spec.max_episode_steps,
        reward_threshold: spec.reward_threshold,
        observation_space: Some(space_to_proto(&spec.observation_space)),
        action_space: Some(space_to_proto(&spec.action_space)),
        default_kwargs_json: json_text(&spec.default_kwargs),
        supports_evaluate,
        nondeterministic: spec.nondeterministic,
        metadata_json: json_text(&spec.metadata),
    }
}

pub fn step_to_proto(step: &Step<Value>) -> v1::StepResponse {
    v1::StepResponse {
        observation: Some(value_to_proto(&step.obs)),
        reward: step.reward,
        terminated: step.terminated,
        truncated: step.truncated,
        info_json: json_text(&step.info),
    }
}

pub fn step_from_proto(step: v1::StepResponse) -> Result<Step<Value>, ConvertError> {
    Ok(Step {
        obs: value_from_proto(
            step.observation
                .ok_or(ConvertError::Missing("observation"))?,
        )?,
        reward: step.reward,
        terminated: step.terminated,
        truncated: step.truncated,
        info: json_object(&step.info_json, "info_json")?,
    })
}

pub fn reset_from_proto(reset: v1::ResetResponse) -> Result<(Value, Info), ConvertError> {
    Ok((
        value_from_proto(
            reset
                .observation
                .ok_or(ConvertError::Missing("observation"))?,
        )?,
        json_object(&reset.info_json, "info_json")?,
    ))
}

#[cfg(test)]
mod tests;
