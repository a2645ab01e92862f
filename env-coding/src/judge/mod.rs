//! The stdin/stdout judge (competitive programming): a program in any supported language runs once
//! per test case with the test's input on stdin and its own time and memory limits; its output is
//! judged by a [`Checker`] (built-in comparisons, or a special judge program in any language).
//!
//! One compile serves every test (the sandbox's artifact cache; a compile error is verdict `CE` on
//! every test). With `partial: false` (a binary reward) tests run in order and the judge stops at
//! the first failure (later tests are `skipped`); with `partial: true` every test runs, all at once
//! (bounded by the sandbox's own concurrency), and the score is the fraction accepted.
//!
//! Verdicts (`AC`, `WA`, `PE`, `TLE`, `MLE`, `RE`, `CE`) with the checker's message are the
//! component's detail in the reward breakdown (`info["reward_breakdown"]`): they describe the
//! scoring, not the observation, so no proto field is needed for them.

pub mod checker;

use env_core::ExecutionResult;
use futures::future::join_all;
use serde::{Deserialize, Serialize};
use serde_json::json;

pub use checker::Checker;

use crate::timeouts::{self, RerunPolicy, TimeoutRerun};
use codegym_sandbox::lang::Language;
use codegym_sandbox::{ExecRequest, Limits, Sandbox, SandboxError};

/// One test case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct TestCase {
    #[serde(default, alias = "stdin")]
    pub input: String,
    #[serde(alias = "stdout", alias = "expected")]
    pub output: String,
}

// From JSON objects only (`reward/strict.rs`).
crate::reward::strict::object_only!(TestCase);

fn default_time_limit() -> u64 {
    2_000
}

/// A judged problem: tests, checker, limits and the scoring rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSpec {
    pub tests: Vec<TestCase>,
    #[serde(default)]
    pub checker: Checker,
    /// CPU time per test (the wall clock gets a generous backstop on top: shared machines are
    /// noisy); at most the server's CPU limit, whatever the task asks.
    #[serde(default = "default_time_limit")]
    pub time_limit_ms: u64,
    /// Memory per test (`None`: the sandbox's limit); at most the server's.
    #[serde(default)]
    pub memory_limit_mb: Option<u64>,
    /// Run every test and score the fraction accepted; `false`: stop at the first failure, score
    /// 1 only when all pass.
    #[serde(default)]
    pub partial: bool,
    /// The component's weight in a reward spec.
    #[serde(default = "one")]
    pub weight: f64,
    /// Code appended to the program for every test (a call-based problem's driver, which reads
    /// the arguments from stdin and prints the result; see `tasks::contests::call_driver`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
}

fn one() -> f64 {
    1.0
}

impl JudgeSpec {
    /// The CPU time a test gets: the task's time limit, at most the server's (`base`).
    pub fn time_limit_within(&self, base: &Limits) -> u64 {
        self.time_limit_ms.max(1).min(base.cpu_ms)
    }

    /// What serde cannot check.
    pub fn validate(&self) -> Result<(), String> {
        if self.tests.is_empty() {
            return Err("judge component has no tests".into());
        }
        if self.time_limit_ms == 0 || self.memory_limit_mb == Some(0) {
            return Err("judge component: limits must be positive".into());
        }
        if let Checker::Float { abs_tol, rel_tol } = self.checker
            && !(abs_tol.is_finite() && rel_tol.is_finite() && abs_tol >= 0.0 && rel_tol >= 0.0)
        {
            return Err("judge component: float tolerances must be finite and >= 0".into());
        }
        Ok(())
    }
}

/// A test's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// Accepted.
    AC,
    /// Wrong answer.
    WA,
    /// Presentation error (a special judge's exit code 2).
    PE,
    /// Time limit exceeded (CPU or the wall-clock backstop).
    TLE,
    /// Memory limit exceeded.
    MLE,
    /// Runtime error: non-zero exit or a signal.
    RE,
    /// Compilation error.
    CE,
}

/// One test's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestVerdict {
    /// `None`: not run (an earlier test failed and the reward is binary).
    pub verdict: Option<Verdict>,
    /// The checker's message (or why the run failed).
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub message: String,
}

/// The judge's result for one program.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeReport {
    pub tests: Vec<TestVerdict>,
    /// The compile step's result (compiled languages).
    pub compile: Option<ExecutionResult>,
    /// A run hit its time limit.
    pub timed_out: bool,
    /// Tests whose run timed out on the wall clock under the CPU limit (`crate::timeouts`), with
    /// their re-runs; the verdicts above are the re-runs'.
    pub reruns: Vec<TimeoutRerun>,
}

impl JudgeReport {
    pub fn passed(&self) -> usize {
        self.tests
            .iter()
            .filter(|t| t.verdict == Some(Verdict::AC))
            .count()
    }

    /// Fraction accepted (`partial`), or 1/0 for all accepted.
    pub fn score(&self, partial: bool) -> f64 {
        let n = self.tests.len();
        if n == 0 {
            return 0.0;
        }
        let p = self.passed();
        if partial {
            p as f64 / n as f64
        } else if p == n {
            1.0
        } else {
            0.0
        }
    }

    pub fn compile_failed(&self) -> bool {
        self.tests.iter().any(|t| t.verdict == Some(Verdict::CE))
    }

    /// The breakdown's detail: counts, per-test verdicts, the compile message when it failed.
    pub fn detail(&self) -> serde_json::Value {
        let mut d = json!({
            "passed": self.passed(),
            "total": self.tests.len(),
            "verdicts": self.tests.iter().map(|t| t.verdict.map_or("skipped".to_string(), |v| format!("{v:?}"))).collect::<Vec<_>>(),
            "messages": self.tests.iter().map(|t| t.message.clone()).collect::<Vec<_>>(),
        });
        if let Some(c) = &self.compile
            && !c.success()
        {
            d["compile_error"] = json!(c.stderr);
        }
        d
    }
}

/// A failure of the judge's machinery: the sandbox, or the special judge itself (exit code 3, a
/// crash, a timeout, a compile error of the checker). Never a reward.
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("the special judge failed: {0}")]
    Checker(String),
}

impl From<JudgeError> for SandboxError {
    /// A special judge that fails is machinery, like the sandbox: reported as a setup failure
    /// (retryable, never a reward).
    fn from(e: JudgeError) -> Self {
        match e {
            JudgeError::Sandbox(e) => e,
            JudgeError::Checker(why) => SandboxError::Setup {
                stage: "special judge",
                source: std::io::Error::other(why),
            },
        }
    }
}

/// Bytes of a message kept in a verdict.
const MESSAGE_CAP: usize = 1024;

fn cap_message(s: &str) -> String {
    let s = s.trim();
    if s.len() <= MESSAGE_CAP {
        return s.to_string();
    }
    let mut end = MESSAGE_CAP;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// The limits of one test: CPU at the time limit, a wall-clock backstop, the memory limit (each at
/// most `base`'s, the server's: a task can only lower them), and room in the output cap for the
/// expected output (a correct answer is never truncated).
fn test_limits(spec: &JudgeSpec, base: Limits, expected_len: usize) -> Limits {
    let tl = spec.time_limit_within(&base);
    let asked = Limits {
        cpu_ms: tl,
        wall_ms: tl.saturating_mul(3).max(tl.saturating_add(2_000)),
        memory_bytes: spec
            .memory_limit_mb
            .map_or(base.memory_bytes, |mb| mb.saturating_mul(1 << 20)),
        ..base
    };
    Limits {
        stdout_cap: base
            .stdout_cap
            .max(expected_len.saturating_mul(2) + (64 << 10)),
        ..asked.within(&base)
    }
}

/// Judges `source` in `language` on `spec`'s tests. `base`: the limits the judge's per-test
/// limits refine (the sandbox's, or the env's); `policy`: what a test that timed out under its CPU
/// limit gets. `Err` only for machinery failures.
pub async fn judge<'a>(
    sandbox: &'a Sandbox,
    language: Language,
    source: &'a str,
    files: &'a [(String, Vec<u8>)],
    spec: &'a JudgeSpec,
    base: Limits,
    policy: RerunPolicy,
) -> Result<JudgeReport, JudgeError> {
    let full: String;
    let source: &str = match &spec.driver {
        Some(driver) => {
            full = format!("{source}\n{driver}");
            &full
        }
        None => source,
    };
    let run_one = |(k, test): (usize, &'a TestCase)| {
        let req = test_request(language, source, files, spec, test, base);
        async move {
            let (run, rerun) =
                timeouts::run(sandbox, req, Some(policy), || format!("test {k}")).await?;
            let verdict = verdict_of(sandbox, spec, test, &run, base).await?;
            Ok::<_, JudgeError>((run, verdict, rerun))
        }
    };
    let mut tests = vec![
        TestVerdict {
            verdict: None,
            message: String::new(),
        };
        spec.tests.len()
    ];
    let mut compile = None;
    let mut timed_out = false;
    let mut reruns = Vec::new();
    if spec.partial {
        let results = join_all(spec.tests.iter().enumerate().map(run_one)).await;
        for (slot, r) in tests.iter_mut().zip(results) {
            let (run, v, rerun) = r?;
            reruns.extend(rerun);
            timed_out |= run.timed_out;
            compile = compile.or(run.compile.map(|c| *c));
            *slot = v;
        }
    } else {
        for (slot, test) in tests.iter_mut().zip(spec.tests.iter().enumerate()) {
            let (run, v, rerun) = run_one(test).await?;
            reruns.extend(rerun);
            timed_out |= run.timed_out;
            compile = compile.or(run.compile.map(|c| *c));
            let failed = v.verdict != Some(Verdict::AC);
            *slot = v;
            if failed {
                break;
            }
        }
    }
    if compile.as_ref().is_some_and(|c| !c.success()) {
        // One compile serves every test: a compile error is every test's verdict.
        // Its message is the detail's `compile_error`, once.
        for t in &mut tests {
            t.verdict = Some(Verdict::CE);
            t.message.clear();
        }
    }
    Ok(JudgeReport {
        tests,
        compile,
        timed_out,
        reruns,
    })
}

/// The execution of the program on one test.
fn test_request(
    language: Language,
    source: &str,
    files: &[(String, Vec<u8>)],
    spec: &JudgeSpec,
    test: &TestCase,
    base: Limits,
) -> ExecRequest {
    ExecRequest {
        source: source.to_string(),
        files: files.to_vec(),
        stdin: Some(test.input.clone().into_bytes()),
        limits: Some(test_limits(spec, base, test.output.len())),
        language,
        ..ExecRequest::default()
    }
}

/// The verdict of one run: its ending first (CE, TLE, MLE, RE), then the checker.
async fn verdict_of(
    sandbox: &Sandbox,
    spec: &JudgeSpec,
    test: &TestCase,
    run: &ExecutionResult,
    base: Limits,
) -> Result<TestVerdict, JudgeError> {
    let v = |verdict: Verdict, message: String| TestVerdict {
        verdict: Some(verdict),
        message,
    };
    if run.compile_failed() {
        let msg = run.compile.as_ref().map_or("", |c| c.stderr.as_str());
        return Ok(v(Verdict::CE, cap_message(msg)));
    }
    if run.timed_out {
        return Ok(v(
            Verdict::TLE,
            format!("time limit {} ms", spec.time_limit_within(&base)),
        ));
    }
    if run.memory_exceeded {
        return Ok(v(Verdict::MLE, String::new()));
    }
    if run.exit_code != Some(0) {
        let how = match (run.exit_code, run.signal) {
            (_, Some(s)) => format!("killed by signal {s}"),
            (Some(c), None) => format!("exit code {c}"),
            (None, None) => "ended abnormally".to_string(),
        };
        let tail = run
            .stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Ok(v(Verdict::RE, cap_message(&format!("{how}: {tail}"))));
    }
    if run.stdout_truncated {
        return Ok(v(Verdict::WA, "output limit exceeded".into()));
    }
    match spec.checker.check(&run.stdout, &test.output) {
        Some(Ok(())) => Ok(v(Verdict::AC, String::new())),
        Some(Err(why)) => Ok(v(Verdict::WA, why)),
        None => special(sandbox, &spec.checker, test, &run.stdout, base).await,
    }
}

/// Python, Java and Node exit 1 on an uncaught exception, testlib's "wrong answer": a stderr that
/// shows one is the checker crashing, not a verdict.
fn uncaught_exception(language: Language, stderr: &str) -> bool {
    match language {
        Language::Python => stderr.contains("Traceback (most recent call last):"),
        Language::Java => stderr.contains("Exception in thread \""),
        Language::NodeJs | Language::TypeScript => {
            stderr.contains("\n    at ") && stderr.contains("Node.js v")
        }
        _ => false,
    }
}

/// Runs the special judge on one test (testlib's exit codes).
async fn special(
    sandbox: &Sandbox,
    checker: &Checker,
    test: &TestCase,
    output: &str,
    base: Limits,
) -> Result<TestVerdict, JudgeError> {
    let Checker::Special { language, source } = checker else {
        return Err(JudgeError::Checker("not a special judge".into()));
    };
    let req = ExecRequest {
        source: source.clone(),
        files: vec![
            ("input.txt".into(), test.input.clone().into_bytes()),
            ("output.txt".into(), output.as_bytes().to_vec()),
            ("answer.txt".into(), test.output.clone().into_bytes()),
        ],
        args: vec!["input.txt".into(), "output.txt".into(), "answer.txt".into()],
        limits: Some(Limits {
            // The checker reads three files of test size: give it the test's memory and a fixed,
            // generous time (a slow checker is not the contestant's fault).
            cpu_ms: 10_000,
            wall_ms: 30_000,
            ..base
        }),
        language: *language,
        ..ExecRequest::default()
    };
    let r = sandbox.run(req).await?;
    let msg = if r.stderr.trim().is_empty() {
        cap_message(&r.stdout)
    } else {
        cap_message(&r.stderr)
    };
    let verdict = match (r.exit_code, r.timed_out || r.memory_exceeded) {
        (Some(1), false) if uncaught_exception(*language, &r.stderr) => {
            return Err(JudgeError::Checker(format!("it crashed: {msg}")));
        }
        (Some(0), false) => Verdict::AC,
        (Some(1), false) => Verdict::WA,
        (Some(2), false) => Verdict::PE,
        _ => {
            let why = if r.compile_failed() {
                format!(
                    "it does not compile: {}",
                    cap_message(r.compile.as_ref().map_or("", |c| c.stderr.as_str()))
                )
            } else {
                format!(
                    "exit {:?} signal {:?} timed out {}: {msg}",
                    r.exit_code, r.signal, r.timed_out
                )
            };
            return Err(JudgeError::Checker(why));
        }
    };
    Ok(TestVerdict {
        verdict: Some(verdict),
        message: msg,
    })
}
