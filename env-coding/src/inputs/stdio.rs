//! Whole-program inputs: stdin texts (judge and `io_cases` tasks), or the one plain run of a
//! task whose checks read its output (stdout, typed outputs).
//!
//! The reference runs once on each input; an input on which it fails (a non-zero exit, a time
//! limit, output cut at the cap) is dropped. A second program then runs on each input kept, with
//! the same source assembly as the judge (a call-based task's driver appended), and its output
//! is compared with the reference's as the task compares outputs: the judge's checker (a special
//! judge's task compares tokens), or the `io_cases` match mode. A plain run compares stdout,
//! exit code and typed outputs exactly.

use env_core::ExecutionResult;
use futures::future::join_all;

use super::Disagreement;
use super::seeds::TextCheck;
use crate::data::TaskData;
use crate::judge::Checker;
use crate::reward::score::stdout_matches;
use crate::tasks::Task;
use codegym_sandbox::lang::Language;
use codegym_sandbox::{ExecRequest, Limits, Sandbox, SandboxError};

/// How to run a program of the task.
#[derive(Debug, Clone)]
struct Runner {
    language: Language,
    driver: Option<String>,
    limits: Limits,
    data: TaskData,
}

impl Runner {
    async fn run(
        &self,
        sandbox: &Sandbox,
        source: &str,
        stdin: Option<&str>,
    ) -> Result<ExecutionResult, SandboxError> {
        let source = match &self.driver {
            Some(driver) => format!("{source}\n{driver}"),
            None => source.to_string(),
        };
        sandbox
            .run(ExecRequest {
                source,
                stdin: stdin.map(|s| s.as_bytes().to_vec()),
                limits: Some(self.limits),
                language: self.language,
                data: self.data.run_data(),
                ..ExecRequest::default()
            })
            .await
    }
}

fn ran_cleanly(r: &ExecutionResult) -> bool {
    r.exit_code == Some(0) && !r.timed_out && !r.stdout_truncated && !r.memory_exceeded
}

/// Why a run is not an answer, or its stdout.
fn answer(r: &ExecutionResult) -> Result<&str, String> {
    if r.compile_failed() {
        return Err("does not compile".into());
    }
    if ran_cleanly(r) {
        return Ok(&r.stdout);
    }
    let tail: String = r
        .stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .into();
    Err(match (r.timed_out, r.exit_code, r.signal) {
        (true, ..) => "time limit exceeded".into(),
        (_, _, Some(s)) => format!("killed by signal {s}"),
        (_, Some(c), _) if c != 0 => format!("exit code {c}: {tail}"),
        _ => "output cut at the cap".into(),
    })
}

/// Stdin texts and the reference's output on each.
#[derive(Debug, Clone)]
pub struct StdinInputs {
    runner: Runner,
    check: TextCheck,
    /// (stdin, the reference's stdout).
    cases: Vec<(String, String)>,
}

impl StdinInputs {
    /// Runs `reference` on every input and keeps those it answers.
    pub(super) async fn new(
        sandbox: &Sandbox,
        reference: &str,
        task: &Task,
        inputs: Vec<String>,
        check: TextCheck,
        driver: Option<String>,
        time_limit_ms: Option<u64>,
    ) -> Result<StdinInputs, SandboxError> {
        let base = *sandbox.limits();
        let limits = match time_limit_ms {
            // The judge's per-test limits: CPU at the time limit, a wall-clock backstop.
            Some(tl) => Limits {
                cpu_ms: tl,
                wall_ms: (tl * 3).max(tl + 2_000),
                ..base
            },
            None => base,
        };
        let runner = Runner {
            language: task.language,
            driver,
            limits,
            data: task.data.clone(),
        };
        let runs = join_all(
            inputs
                .iter()
                .map(|i| runner.run(sandbox, reference, Some(i))),
        )
        .await;
        let mut cases = Vec::new();
        for (input, run) in inputs.into_iter().zip(runs) {
            let run = run?;
            if ran_cleanly(&run) {
                cases.push((input, run.stdout));
            }
        }
        Ok(StdinInputs {
            runner,
            check,
            cases,
        })
    }

    pub(super) fn len(&self) -> usize {
        self.cases.len()
    }

    pub async fn disagreements(
        &self,
        sandbox: &Sandbox,
        candidate: &str,
    ) -> Result<Vec<Disagreement>, SandboxError> {
        let runs = join_all(
            self.cases
                .iter()
                .map(|(stdin, _)| self.runner.run(sandbox, candidate, Some(stdin))),
        )
        .await;
        let mut out = Vec::new();
        for ((stdin, expected), run) in self.cases.iter().zip(runs) {
            let run = run?;
            let verdict = answer(&run).and_then(|got| {
                let same = match &self.check {
                    TextCheck::Match(mode) => stdout_matches(got, expected, *mode),
                    TextCheck::Checker(c) => match c.check(got, expected) {
                        Some(result) => result.is_ok(),
                        None => Checker::Tokens
                            .check(got, expected)
                            .is_some_and(|r| r.is_ok()),
                    },
                };
                if same { Ok(()) } else { Err(got.to_string()) }
            });
            if let Err(got) = verdict {
                out.push(Disagreement::new(stdin, expected, &got));
            }
        }
        Ok(out)
    }
}

/// The task's one plain run and what the reference's produced.
#[derive(Debug, Clone)]
pub struct PlainRun {
    runner: Runner,
    expected: ExecutionResult,
}

/// What a plain run produced that a task may check: exit code, stdout, typed outputs.
fn observed(r: &ExecutionResult) -> String {
    let outputs = serde_json::to_string(&r.outputs).unwrap_or_default();
    format!(
        "exit {:?}, stdout {:?}, outputs {outputs}",
        r.exit_code,
        r.stdout.trim_end()
    )
}

impl PlainRun {
    /// Runs the reference plainly; `None` when it fails (no input to compare on).
    pub(super) async fn new(
        sandbox: &Sandbox,
        reference: &str,
        task: &Task,
    ) -> Result<Option<PlainRun>, SandboxError> {
        let runner = Runner {
            language: task.language,
            driver: None,
            limits: *sandbox.limits(),
            data: task.data.clone(),
        };
        let expected = runner.run(sandbox, reference, None).await?;
        Ok(ran_cleanly(&expected).then_some(PlainRun { runner, expected }))
    }

    pub async fn disagreements(
        &self,
        sandbox: &Sandbox,
        candidate: &str,
    ) -> Result<Vec<Disagreement>, SandboxError> {
        let run = self.runner.run(sandbox, candidate, None).await?;
        let (want, got) = (observed(&self.expected), observed(&run));
        Ok(if want == got && run.timed_out == self.expected.timed_out {
            Vec::new()
        } else {
            vec![Disagreement::new("(the task's own run)", &want, &got)]
        })
    }
}
