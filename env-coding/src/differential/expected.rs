//! The reference's outputs, computed once per distinct (reference, function, inputs, transform)
//! in the sandbox and shared by every later score in this process.
//!
//! A process-wide cache is right here: the key is a hash of everything that determines the
//! outputs, so two sandboxes (or registrations) asking for the same key would compute the same
//! values, and concurrent askers share one computation (moka's single-flight `try_get_with`).
//! Failures are not cached: a reference that fails is reported to every waiter and recomputed on
//! the next request. Bounded by the records' size (LRU-like eviction beyond it).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use moka::future::Cache;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::value::PyVal;
use super::{DiffSpec, run_runner};
use codegym_sandbox::{Limits, Sandbox, SandboxError};

/// One input set's expected outputs.
#[derive(Debug)]
pub struct Expected {
    pub outputs: Vec<PyVal>,
    /// The reference's time per input (seconds), for the candidate's per-input limits only.
    pub times: Vec<f64>,
    /// Size of the reference's record (the candidate's output cap is sized from it).
    pub record_bytes: usize,
}

/// Bytes of reference records kept.
const CACHE_BYTES: u64 = 512 << 20;

/// The reference's own limits: generous (it is trusted to finish; EvalPlus runs it unlimited), and
/// room for its record.
const REFERENCE_TIME_MS: u64 = 120_000;
const REFERENCE_OUTPUT_CAP: usize = 256 << 20;

static CACHE: LazyLock<Cache<[u8; 32], Arc<Expected>>> = LazyLock::new(|| {
    Cache::builder()
        .weigher(|_, v: &Arc<Expected>| u32::try_from(v.record_bytes).unwrap_or(u32::MAX))
        .max_capacity(CACHE_BYTES)
        .build()
});

/// How many times each key's reference was run (a few bytes per task; what shows that a batch
/// shares one computation).
static RUNS: LazyLock<Mutex<HashMap<[u8; 32], u32>>> = LazyLock::new(Default::default);

/// How many times `spec`'s reference outputs were computed in this process (all its input
/// sets): 1 per set however many programs were scored, unless a failure or eviction forced a
/// recomputation.
pub fn reference_runs(spec: &DiffSpec) -> u32 {
    let runs = RUNS.lock().unwrap_or_else(|p| p.into_inner());
    spec.sets()
        .iter()
        .map(|(_, inputs)| runs.get(&key(spec, inputs)).copied().unwrap_or(0))
        .sum()
}

/// Why the reference did not give expected outputs (cloneable: every waiter gets it).
#[derive(Debug, Clone)]
enum RefError {
    /// The sandbox failed (retryable machinery).
    Sandbox(String),
    /// The reference ran out of time (possibly load on the host: retryable).
    Timeout(String),
    /// The reference itself failed: a broken task, not retryable.
    Failed(String),
}

fn key(spec: &DiffSpec, inputs: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [
        "codegym differential v1",
        super::RUNNER_SOURCE,
        &spec.reference,
        &spec.entry_point,
        inputs,
        spec.deserialize.as_deref().unwrap_or(""),
        if spec.oracle == super::Oracle::NotNone {
            "not_none"
        } else {
            ""
        },
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().into()
}

/// The expected outputs of `spec`'s reference on `inputs`, computed on first use.
pub(super) async fn get(
    sandbox: &Sandbox,
    spec: &DiffSpec,
    inputs: &str,
    base: Limits,
) -> Result<Arc<Expected>, SandboxError> {
    CACHE
        .try_get_with(key(spec, inputs), compute(sandbox, spec, inputs, base))
        .await
        .map_err(|e| match e.as_ref().clone() {
            RefError::Sandbox(why) | RefError::Timeout(why) => SandboxError::Setup {
                stage: "reference solution",
                source: std::io::Error::other(why),
            },
            RefError::Failed(why) => SandboxError::Reference(why),
        })
}

async fn compute(
    sandbox: &Sandbox,
    spec: &DiffSpec,
    inputs: &str,
    base: Limits,
) -> Result<Arc<Expected>, RefError> {
    *RUNS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(key(spec, inputs))
        .or_default() += 1;
    let limits = Limits {
        cpu_ms: REFERENCE_TIME_MS,
        wall_ms: REFERENCE_TIME_MS * 2,
        stdout_cap: REFERENCE_OUTPUT_CAP,
        ..base
    };
    let config = json!({"entry_point": spec.entry_point, "inputs": inputs,
        "deserialize": spec.deserialize, "not_none": spec.oracle == super::Oracle::NotNone});
    let (run, result) = run_runner(sandbox, &spec.reference, &[], config, limits)
        .await
        .map_err(|e| RefError::Sandbox(e.to_string()))?;
    let fail = |why: String| {
        let stderr = result.stderr.trim();
        RefError::Failed(if stderr.is_empty() {
            why
        } else {
            let head: String = stderr.chars().take(300).collect();
            format!("{why} (stderr: {head})")
        })
    };
    let record = match run.record {
        Ok(r) => r,
        Err(why) if run.timed_out => return Err(RefError::Timeout(why)),
        Err(why) => return Err(fail(why)),
    };
    if let Some(e) = record.compile_error.or(record.load_error) {
        return Err(fail(format!("it does not load: {e}")));
    }
    let total = super::count_inputs(inputs).map_err(RefError::Failed)?;
    if record.outputs.len() != total {
        return Err(fail(format!(
            "it reported {} of {total} outputs",
            record.outputs.len()
        )));
    }
    let mut outputs = Vec::with_capacity(total);
    for (i, out) in record.outputs.iter().enumerate() {
        let v = match (out.get("ok"), out.get("error")) {
            (Some(v), _) => PyVal::decode(v).map_err(|e| fail(format!("input {i}: {e}")))?,
            (None, Some(e)) => return Err(fail(format!("input {i} raised {e}"))),
            _ => return Err(fail(format!("input {i}: no output"))),
        };
        if let Some(t) = v.opaque_part() {
            return Err(fail(format!(
                "input {i}: it returned a {t}, which is not plain data and cannot be compared"
            )));
        }
        outputs.push(v);
    }
    let record_bytes = result.stdout.len();
    Ok(Arc::new(Expected {
        outputs,
        times: record.times,
        record_bytes,
    }))
}
