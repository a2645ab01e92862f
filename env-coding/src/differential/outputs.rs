//! What a program returns on each input, through the same runner and the same candidate run as
//! a differential score ([`super::run_candidate`]: `runner.py`, the per-input time limits, the
//! record's nonce), without expected outputs: for callers that compare two programs themselves
//! (`crate::inputs`, which keeps the inputs a reference handles and compares a second program's
//! outputs with its outputs there).
//!
//! The reference's own run in [`super::expected`] refuses a reference that raises on any input
//! (its outputs define a task's expectations). Here an input on which the program raises or runs
//! out of time is one outcome among others.

use super::value::PyVal;
use super::{DiffSpec, Expected, run_candidate};
use codegym_sandbox::{Limits, Sandbox, SandboxError};

/// What the program did on one input.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// It returned this value (tagged plain data; an opaque part equals nothing).
    Value(PyVal),
    /// It raised (the exception's type and text).
    Raised(String),
    /// It ran past the input's time limit (the runner stops there: later inputs are not run).
    TimedOut,
    /// Not run: an earlier input timed out, the program did not load, or the run left no record.
    NotRun,
}

impl Output {
    /// A short rendering for reports.
    pub fn render(&self) -> String {
        match self {
            Output::Value(v) => v.render(),
            Output::Raised(e) => format!("raised {e}"),
            Output::TimedOut => "time limit exceeded".into(),
            Output::NotRun => "not run".into(),
        }
    }
}

/// A program's outputs on a list of inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Outputs {
    /// One per input, in order.
    pub outputs: Vec<Output>,
    /// Seconds per input that ran (the runner's clock).
    pub times: Vec<f64>,
    /// Why no input ran: the program does not compile or load, or the run left no record.
    pub error: Option<String>,
}

/// Runs `source`'s `spec.entry_point` on `inputs` (a JSON array of argument lists, restored by
/// `spec.deserialize`), each input limited to `max(spec.time_limit_ms, 4 x times[i])` as a
/// differential score limits it (`times`: a reference's seconds per input; zeros for none).
/// `Err` only for machinery failures.
pub async fn outputs_of(
    sandbox: &Sandbox,
    source: &str,
    files: &[(String, Vec<u8>)],
    spec: &DiffSpec,
    inputs: &str,
    times: &[f64],
    base: Limits,
) -> Result<Outputs, SandboxError> {
    let n = times.len();
    let limits_from = Expected {
        outputs: Vec::new(),
        times: times.to_vec(),
        record_bytes: 0,
    };
    let run = run_candidate(sandbox, source, files, spec, inputs, &limits_from, base).await?;
    let record = match run.record {
        Ok(r) => r,
        Err(why) => return Ok(none_ran(n, why)),
    };
    if let Some(e) = record.compile_error {
        return Ok(none_ran(n, format!("the program does not compile: {e}")));
    }
    if let Some(e) = record.load_error {
        return Ok(none_ran(n, format!("the program failed to load: {e}")));
    }
    let outputs = (0..n)
        .map(|i| match record.outputs.get(i) {
            None => Output::NotRun,
            Some(out) => match (out.get("ok"), out.get("error"), out.get("timeout")) {
                (Some(v), _, _) => PyVal::decode(v).map_or_else(
                    |e| Output::Raised(format!("undecodable output: {e}")),
                    Output::Value,
                ),
                (None, Some(e), _) => Output::Raised(e.as_str().unwrap_or("?").to_string()),
                (None, None, Some(_)) => Output::TimedOut,
                _ => Output::NotRun,
            },
        })
        .collect();
    Ok(Outputs {
        outputs,
        times: record.times,
        error: None,
    })
}

fn none_ran(n: usize, why: String) -> Outputs {
    Outputs {
        outputs: vec![Output::NotRun; n],
        times: Vec::new(),
        error: Some(why),
    }
}
