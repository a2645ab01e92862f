//! A task's seed inputs: the inputs its own tests use, found from its reward spec.
//!
//! - `differential` (HumanEval+ / MBPP+): the argument lists the component carries.
//! - `check_function` (HumanEval), `asserts` (MBPP), `appended_tests` in Python: the tests are
//!   code, so the argument lists are recovered by running them against the reference with a
//!   recording wrapper in place of the entry point (`record.py`, a trusted helper run in the
//!   sandbox: the reference and the tests are the task author's). Only arguments that are plain
//!   JSON (or tuples where a call holds no list) are kept.
//! - `judge` and `io_cases`: the tests' stdin, and the prompt's sample inputs.
//! - Anything else reads one plain run: the program's only input is the task itself.

use serde::Deserialize;
use serde_json::json;

use super::samples::fenced_after;
use crate::differential::Oracle;
use crate::judge::Checker;
use crate::reward::{Component, MatchMode};
use crate::tasks::Task;
use codegym_sandbox::lang::Language;
use codegym_sandbox::{ExecRequest, Limits, RunData, Sandbox, SandboxError};

/// The recorder (`main.py` of its run).
pub const RECORD_SOURCE: &str = include_str!("record.py");

/// Most seed inputs kept per task.
const MAX_SEEDS: usize = 50;

/// How a task's output on one stdin is judged.
#[derive(Debug, Clone, PartialEq)]
pub enum TextCheck {
    /// The judge's checker (a special judge compares tokens here: it needs the expected answer
    /// only as a reference, and two programs agreeing token by token agree for it too).
    Checker(Checker),
    /// An `io_cases` component's match mode.
    Match(MatchMode),
}

/// What a task's tests feed its programs.
#[derive(Debug, Clone, PartialEq)]
pub enum Seeds {
    /// Argument lists of a Python function, grouped by how the runner restores their types
    /// (`None`: plain JSON; `Some("all_to_tuples")`: every list a tuple).
    Calls {
        entry_point: String,
        groups: Vec<(Option<String>, Vec<String>)>,
        atol: f64,
        oracle: Oracle,
    },
    /// Stdin texts, judged as the task judges them.
    Stdin {
        inputs: Vec<String>,
        check: TextCheck,
        /// Appended to the program (a call-based judge task's driver).
        driver: Option<String>,
        /// CPU per run (a judge's time limit), else the sandbox's.
        time_limit_ms: Option<u64>,
    },
    /// One plain run (output checks, typed outputs).
    Plain,
    /// No inputs could be found, and why.
    Unavailable(String),
}

#[derive(Deserialize)]
struct Recorded {
    calls: Vec<RecordedCall>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct RecordedCall {
    args: String,
    tuples: bool,
}

/// The seed inputs of `task`, whose reference solution is `reference`.
pub async fn seeds(sandbox: &Sandbox, task: &Task, reference: &str) -> Result<Seeds, SandboxError> {
    for c in &task.reward.components {
        let tests = match c {
            Component::Differential(d) => {
                let mut args = split(&d.base_inputs);
                args.extend(split(&d.plus_inputs));
                args.truncate(MAX_SEEDS);
                return Ok(Seeds::Calls {
                    entry_point: d.entry_point.clone(),
                    groups: vec![(d.deserialize.clone(), args)],
                    atol: d.atol,
                    oracle: d.oracle,
                });
            }
            Component::CheckFunction { code, .. } => json!({"style": "check", "code": code}),
            Component::Asserts { asserts, setup, .. } => {
                json!({"style": "asserts", "tests": asserts, "setup": setup})
            }
            Component::AppendedTests { code, .. } if task.language == Language::Python => {
                json!({"style": "asserts", "tests": [code]})
            }
            Component::Judge(j) => {
                return Ok(stdin_seeds(
                    task,
                    j.tests.iter().map(|t| t.input.clone()),
                    TextCheck::Checker(j.checker.clone()),
                    j.driver.clone(),
                    Some(j.time_limit_ms),
                ));
            }
            Component::IoCases { cases, mode, .. } => {
                return Ok(stdin_seeds(
                    task,
                    cases.iter().map(|c| c.stdin.clone()),
                    TextCheck::Match(*mode),
                    None,
                    None,
                ));
            }
            _ => continue,
        };
        let Some(entry_point) = task.entry_point() else {
            return Ok(Seeds::Unavailable("the task names no function".into()));
        };
        return record(sandbox, task, reference, &entry_point, tests).await;
    }
    Ok(Seeds::Plain)
}

/// The argument lists of a JSON array of them, each as its own text.
fn split(text: &str) -> Vec<String> {
    serde_json::from_str::<Vec<&serde_json::value::RawValue>>(text)
        .map(|all| all.into_iter().map(|r| r.get().to_string()).collect())
        .unwrap_or_default()
}

fn stdin_seeds(
    task: &Task,
    tests: impl Iterator<Item = String>,
    check: TextCheck,
    driver: Option<String>,
    time_limit_ms: Option<u64>,
) -> Seeds {
    let mut inputs: Vec<String> = Vec::new();
    for input in tests.chain(fenced_after(&task.prompt, "input")) {
        if inputs.len() < MAX_SEEDS && !inputs.contains(&input) {
            inputs.push(input);
        }
    }
    Seeds::Stdin {
        inputs,
        check,
        driver,
        time_limit_ms,
    }
}

/// Runs the tests against the reference with the entry point recorded.
async fn record(
    sandbox: &Sandbox,
    task: &Task,
    reference: &str,
    entry_point: &str,
    mut config: serde_json::Value,
) -> Result<Seeds, SandboxError> {
    config["reference"] = json!(reference);
    config["entry_point"] = json!(entry_point);
    config["max_calls"] = json!(MAX_SEEDS);
    let base = *sandbox.limits();
    let req = ExecRequest {
        source: RECORD_SOURCE.to_string(),
        stdin: Some(config.to_string().into_bytes()),
        limits: Some(Limits {
            cpu_ms: base.cpu_ms.max(30_000),
            wall_ms: base.wall_ms.max(90_000),
            stdout_cap: base.stdout_cap.max(16 << 20),
            ..base
        }),
        // Tests may read the task's input files, as in the harness.
        data: RunData {
            inputs: task.data.files().clone(),
            ..RunData::default()
        },
        ..ExecRequest::default()
    };
    let result = sandbox.run(req).await?;
    let line = result.stdout.lines().next_back().unwrap_or("");
    let recorded = match serde_json::from_str::<Recorded>(line) {
        Ok(r) => r,
        Err(_) if result.timed_out => {
            return Ok(Seeds::Unavailable(
                "recording the tests' calls hit the time limit".into(),
            ));
        }
        Err(e) => {
            return Ok(Seeds::Unavailable(format!(
                "recording the tests' calls left no record ({e})"
            )));
        }
    };
    let mut plain = Vec::new();
    let mut tuples = Vec::new();
    for call in recorded.calls {
        if call.tuples { &mut tuples } else { &mut plain }.push(call.args);
    }
    if plain.is_empty() && tuples.is_empty() {
        let why = recorded.error.map_or(String::new(), |e| format!(": {e}"));
        return Ok(Seeds::Unavailable(format!(
            "the tests pass no plain-data arguments to {entry_point}{why}"
        )));
    }
    let groups = [(None, plain), (Some("all_to_tuples".to_string()), tuples)]
        .into_iter()
        .filter(|(_, args)| !args.is_empty())
        .collect();
    Ok(Seeds::Calls {
        entry_point: entry_point.to_string(),
        groups,
        atol: 0.0,
        oracle: Oracle::Exact,
    })
}
