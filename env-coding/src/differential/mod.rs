//! Differential testing against a reference solution (HumanEval+ / MBPP+, EvalPlus's semantics).
//!
//! A task gives a function name, a reference program and argument lists (`base` inputs, and the
//! `plus` inputs EvalPlus added). The reference's outputs are computed once, in the sandbox, and
//! cached process-wide by the hash of everything that determines them ([`expected`]): a GRPO group
//! scoring 16 completions of one task runs the reference once, and a failing reference is an
//! error (never a reward), not cached, so a retry recomputes it.
//!
//! A candidate runs under the same runner (`runner.py`, `main.py` of a fresh execution with the
//! candidate as `solution.py`), once for the base inputs and once for the plus inputs, both at
//! once. The runner is the unit-test harness's machinery in another mode (`reward/candidate.py`,
//! `reward/harness.rs`): it forks the program into a process of its own before it reads the inputs
//! and the host's nonce, and calls the function through pipes with plain data only. It never sees
//! expected outputs: it copies what the function returns into plain tagged data and writes one
//! record after every input, authenticated by the nonce. The host compares ([`compare`]), so an
//! object whose `__eq__` is always true is an opaque value equal to nothing, an early `sys.exit(0)`
//! fails the input it ran in (or the load), `os._exit` fails the input it ran in and ends the run,
//! and printing fake records goes to `/dev/null`.
//!
//! Per-input time limits follow EvalPlus: `max(time_limit_ms, 4 x the reference's time)`, at most
//! the server's CPU limit; the first input past its limit ends the run (the rest are not run, and
//! fail). The runner's process enforces each limit as a deadline (the program is killed at it) and
//! measures each time from its side of the pipes, the reference's as the candidate's: a program
//! that switches off timers, ignores `SIGALRM`, patches `time` or rewrites frames changes neither.

pub mod compare;
mod expected;
pub mod outputs;
pub mod value;

use env_core::ExecutionResult;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};

pub use compare::Oracle;
pub use expected::{Expected, reference_runs};

use crate::reward::harness::CANDIDATE_FILE;
use codegym_sandbox::{ExecRequest, Limits, Sandbox, SandboxError};
use value::PyVal;

/// The runner's source (`main.py` of every differential run): the unit-test harness's codec and
/// candidate process (`reward/candidate.py`), then the runner itself.
pub const RUNNER_SOURCE: &str = concat!(
    include_str!("../reward/plain_codec.py"),
    include_str!("../reward/candidate.py"),
    include_str!("runner.py")
);

/// Which inputs count for the reward.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestSet {
    /// The original HumanEval / MBPP inputs only.
    Base,
    /// Base and plus inputs (EvalPlus's headline score).
    #[default]
    Plus,
}

fn one() -> f64 {
    1.0
}

fn default_time_limit() -> u64 {
    // EvalPlus's `DEFAULT_MIN_TIME_LIMIT`.
    4_000
}

/// A differential-testing component (`"type": "differential"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffSpec {
    /// The function called with each argument list.
    pub entry_point: String,
    /// The reference program (EvalPlus: `prompt + canonical_solution`).
    pub reference: String,
    /// The base argument lists: a JSON array of arrays, kept as text (integers of any size reach
    /// Python unchanged). A JSON array is accepted too.
    #[serde(deserialize_with = "json_text")]
    pub base_inputs: String,
    /// The plus argument lists (same form); empty: none.
    #[serde(default, deserialize_with = "json_text")]
    pub plus_inputs: String,
    /// Absolute tolerance for float outputs (EvalPlus `atol`; 0: 1e-6 for float outputs, exact
    /// otherwise).
    #[serde(default)]
    pub atol: f64,
    /// Which inputs count (`plus`: base and plus, the default).
    #[serde(default)]
    pub tests: TestSet,
    #[serde(default, skip_serializing_if = "is_exact")]
    pub oracle: Oracle,
    /// How the runner restores Python types the JSON inputs cannot carry (tuples, sets, complex
    /// numbers; MBPP+ tasks, set by the loader).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deserialize: Option<String>,
    /// Least time per input (the reference's time x 4 when larger); at most the server's CPU
    /// limit, whatever the task asks.
    #[serde(default = "default_time_limit")]
    pub time_limit_ms: u64,
    /// Score the fraction of counted inputs passed; `false`: 1 only when all pass.
    #[serde(default)]
    pub partial: bool,
    #[serde(default = "one")]
    pub weight: f64,
}

fn is_exact(o: &Oracle) -> bool {
    *o == Oracle::Exact
}

/// An input list given as JSON text or as a JSON array, stored as text.
fn json_text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

/// The transforms `runner.py` knows (`deserialize`).
pub const DESERIALIZERS: &[&str] = &[
    "args_to_tuples",
    "args_to_tuple_lists",
    "args_to_tuples_of_tuples",
    "first_to_tuple_list",
    "first_to_tuple",
    "second_to_tuple",
    "first_items_to_sets",
    "float_complex",
    "complex",
    "first_lists_to_tuples_then_args",
    "first_dict_values_to_tuples",
    "all_to_tuples",
];

impl DiffSpec {
    /// What serde cannot check: the inputs are arrays of argument arrays, limits and tolerances
    /// are sane, the transform exists.
    pub fn validate(&self) -> Result<(), String> {
        if !crate::reward::harness::is_identifier(&self.entry_point) {
            return Err(format!(
                "differential: entry_point {:?} is not an identifier",
                self.entry_point
            ));
        }
        let base = count_inputs(&self.base_inputs).map_err(|e| format!("base_inputs: {e}"))?;
        let plus = if self.plus_inputs.trim().is_empty() {
            0
        } else {
            count_inputs(&self.plus_inputs).map_err(|e| format!("plus_inputs: {e}"))?
        };
        if base + plus == 0 || (self.tests == TestSet::Base && base == 0) {
            return Err("differential: no inputs to test".into());
        }
        if !self.atol.is_finite() || self.atol < 0.0 || self.time_limit_ms == 0 {
            return Err("differential: atol must be finite and >= 0, time_limit_ms > 0".into());
        }
        if let Some(d) = &self.deserialize
            && !DESERIALIZERS.contains(&d.as_str())
        {
            return Err(format!(
                "differential: unknown deserialize {d:?} (known: {})",
                DESERIALIZERS.join(", ")
            ));
        }
        Ok(())
    }

    /// The input sets run for this spec: `(name, JSON text)`, base first.
    fn sets(&self) -> Vec<(&'static str, &str)> {
        let mut sets = vec![("base", self.base_inputs.as_str())];
        if self.tests == TestSet::Plus && !self.plus_inputs.trim().is_empty() {
            sets.push(("plus", self.plus_inputs.as_str()));
        }
        sets
    }
}

/// The number of argument lists in `text`, if it is a JSON array of arrays (numbers are not
/// converted: integers of any size are fine).
fn count_inputs(text: &str) -> Result<usize, String> {
    let list: Vec<&serde_json::value::RawValue> = serde_json::from_str(text)
        .map_err(|e| format!("expected a JSON array of argument lists: {e}"))?;
    if let Some(i) = list.iter().position(|a| !a.get().starts_with('[')) {
        return Err(format!("input {i} is not an argument list"));
    }
    Ok(list.len())
}

/// One input set's outcome for one program.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SetReport {
    pub passed: usize,
    pub total: usize,
    /// Why no input could pass (does not compile, failed to load, no record).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The first few failing inputs: `(index, why)`.
    pub failures: Vec<(usize, String)>,
}

/// Failing inputs listed per set in the breakdown.
const FAILURES_SHOWN: usize = 5;

/// A program's differential-testing result.
#[derive(Debug, Clone, PartialEq)]
pub struct DiffReport {
    pub base: SetReport,
    pub plus: Option<SetReport>,
    pub tests: TestSet,
    /// A run (or an input) hit its time limit.
    pub timed_out: bool,
    /// The program does not compile.
    pub syntax_error: bool,
}

impl DiffReport {
    /// The sets that count: base, and plus when `tests` is `plus`.
    fn counted(&self) -> impl Iterator<Item = &SetReport> {
        std::iter::once(&self.base).chain(self.plus.iter())
    }

    pub fn score(&self, partial: bool) -> f64 {
        let (passed, total) = self
            .counted()
            .fold((0, 0), |(p, t), s| (p + s.passed, t + s.total));
        if total == 0 {
            0.0
        } else if partial {
            passed as f64 / total as f64
        } else if passed == total {
            1.0
        } else {
            0.0
        }
    }

    /// The breakdown's detail: both sets' counts and first failures, which set counts.
    pub fn detail(&self) -> Value {
        json!({"tests": self.tests, "base": self.base, "plus": self.plus})
    }
}

/// Runs `source` (Python) on the spec's inputs and compares its outputs with the reference's.
/// `Err` only for machinery failures, the reference's included.
pub async fn compare_with_reference(
    sandbox: &Sandbox,
    source: &str,
    files: &[(String, Vec<u8>)],
    spec: &DiffSpec,
    base: Limits,
) -> Result<DiffReport, SandboxError> {
    let sets = spec.sets();
    let runs = futures::future::join_all(sets.iter().map(|(_, inputs)| async move {
        let expected = expected::get(sandbox, spec, inputs, base).await?;
        let run = run_candidate(sandbox, source, files, spec, inputs, &expected, base).await?;
        Ok::<_, SandboxError>(judge_set(spec, inputs, &expected, &run))
    }))
    .await;
    let mut reports = Vec::new();
    for r in runs {
        reports.push(r?);
    }
    let timed_out = reports.iter().any(|(_, t, _)| *t);
    let syntax_error = reports.iter().any(|(_, _, s)| *s);
    let mut reports = reports.into_iter().map(|(r, _, _)| r);
    Ok(DiffReport {
        base: reports.next().unwrap_or(SetReport {
            passed: 0,
            total: 0,
            error: Some("not run".into()),
            failures: Vec::new(),
        }),
        plus: reports.next(),
        tests: spec.tests,
        timed_out,
        syntax_error,
    })
}

/// The parsed record of one runner execution.
#[derive(Debug, Deserialize)]
struct Record {
    v: u32,
    #[serde(default)]
    outputs: Vec<Value>,
    #[serde(default)]
    times: Vec<f64>,
    #[serde(default)]
    compile_error: Option<String>,
    #[serde(default)]
    load_error: Option<String>,
    /// The runner could not keep the program away from its own process (`candidate.py`).
    #[serde(default)]
    harness_error: Option<String>,
}

/// What one runner execution produced: its record, or why there is none.
struct RunOutcome {
    record: Result<Record, String>,
    timed_out: bool,
}

/// One runner execution of `source` on `inputs`, stdin carrying a fresh nonce and the config.
async fn run_runner(
    sandbox: &Sandbox,
    source: &str,
    files: &[(String, Vec<u8>)],
    config: Value,
    limits: Limits,
) -> Result<(RunOutcome, ExecutionResult), SandboxError> {
    let nonce = crate::reward::harness::fresh_nonce();
    let mut stdin = nonce.clone().into_bytes();
    stdin.push(b'\n');
    stdin.extend_from_slice(config.to_string().as_bytes());
    let mut all_files: Vec<(String, Vec<u8>)> = files.to_vec();
    all_files.push((CANDIDATE_FILE.to_string(), source.as_bytes().to_vec()));
    let req = ExecRequest {
        source: RUNNER_SOURCE.to_string(),
        files: all_files,
        stdin: Some(stdin),
        limits: Some(limits),
        ..ExecRequest::default()
    };
    let result = sandbox.run(req).await?;
    let prefix = format!("{nonce} ");
    let line = result
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .next_back();
    let record = match line {
        None if result.stdout_truncated => Err("the result record exceeded the output cap".into()),
        None if result.timed_out => Err("the run hit its time limit before reporting".into()),
        None => Err("the run ended without a result record (exited or was killed early)".into()),
        Some(text) => match serde_json::from_str::<Record>(text) {
            Ok(r) if r.v == 1 => Ok(r),
            Ok(r) => Err(format!("unknown result record version {}", r.v)),
            Err(e) => Err(format!("malformed result record: {e}")),
        },
    };
    // The runner could not set up its isolation from the program: the machinery failed, never a
    // verdict on the program.
    if let Ok(Record {
        harness_error: Some(why),
        ..
    }) = &record
    {
        return Err(SandboxError::Setup {
            stage: "differential runner",
            source: std::io::Error::other(why.clone()),
        });
    }
    let timed_out = result.timed_out;
    Ok((RunOutcome { record, timed_out }, result))
}

/// Seconds allowed per input: EvalPlus's `max(min, 4 x reference time)`, at most the server's CPU
/// limit (`base`): neither the task's `time_limit_ms` nor a slow reference raises it.
fn per_input_limits(spec: &DiffSpec, expected: &Expected, base: &Limits) -> Vec<f64> {
    let ceiling = base.cpu_ms as f64 / 1000.0;
    let min = (spec.time_limit_ms as f64 / 1000.0).min(ceiling);
    expected
        .times
        .iter()
        .map(|t| min.max(4.0 * t).min(ceiling))
        .collect()
}

async fn run_candidate(
    sandbox: &Sandbox,
    source: &str,
    files: &[(String, Vec<u8>)],
    spec: &DiffSpec,
    inputs: &str,
    expected: &Expected,
    base: Limits,
) -> Result<RunOutcome, SandboxError> {
    let per_input = per_input_limits(spec, expected, &base);
    // The whole run: the inputs' limits (at most a minute, as EvalPlus) and start-up slack.
    let total_ms = ((per_input.iter().sum::<f64>() * 1000.0) as u64).min(60_000) + 2_000;
    let limits = Limits {
        cpu_ms: total_ms,
        wall_ms: total_ms * 2,
        stdout_cap: base.stdout_cap.max(expected.record_bytes * 2 + (1 << 20)),
        ..base
    };
    let config = json!({"entry_point": spec.entry_point, "inputs": inputs,
        "deserialize": spec.deserialize, "per_input": per_input});
    Ok(run_runner(sandbox, source, files, config, limits).await?.0)
}

/// Compares a candidate's run with the expected outputs: `(report, timed out, syntax error)`.
fn judge_set(
    spec: &DiffSpec,
    inputs: &str,
    expected: &Expected,
    run: &RunOutcome,
) -> (SetReport, bool, bool) {
    let total = expected.outputs.len();
    let mut report = SetReport {
        passed: 0,
        total,
        error: None,
        failures: Vec::new(),
    };
    let record = match &run.record {
        Ok(r) => r,
        Err(why) => {
            report.error = Some(why.clone());
            return (report, run.timed_out, false);
        }
    };
    if let Some(e) = &record.compile_error {
        report.error = Some(format!("the program does not compile: {e}"));
        return (report, run.timed_out, true);
    }
    if let Some(e) = &record.load_error {
        report.error = Some(format!("the program failed to load: {e}"));
        return (report, run.timed_out, false);
    }
    // Oracles that read the arguments parse them once (the host never needs them otherwise).
    let args: Vec<Value> = if matches!(
        spec.oracle,
        Oracle::PolyRoot | Oracle::PyramidSurfaceArea | Oracle::DigitDistance
    ) {
        serde_json::from_str(inputs).unwrap_or_default()
    } else {
        Vec::new()
    };
    let mut timed_out = run.timed_out;
    for (i, exp) in expected.outputs.iter().enumerate() {
        let verdict = match record.outputs.get(i) {
            None => Err("not run".to_string()),
            Some(out) => match (out.get("ok"), out.get("error"), out.get("timeout")) {
                (Some(v), _, _) => match PyVal::decode(v) {
                    Ok(v) => compare::check(
                        &v,
                        exp,
                        args.get(i).unwrap_or(&Value::Null),
                        spec.atol,
                        spec.oracle,
                    ),
                    Err(e) => Err(format!("undecodable output: {e}")),
                },
                (None, Some(e), _) => Err(format!("raised {}", e.as_str().unwrap_or("?"))),
                (None, None, Some(_)) => {
                    timed_out = true;
                    Err("time limit exceeded".to_string())
                }
                _ => Err("malformed output entry".to_string()),
            },
        };
        match verdict {
            Ok(()) => report.passed += 1,
            Err(why) if report.failures.len() < FAILURES_SHOWN => report.failures.push((i, why)),
            Err(_) => {}
        }
    }
    (report, timed_out, false)
}
