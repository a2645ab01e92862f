//! Where the AutoCoder loop's code runs: the episode's env session, and only it (the rollout crate
//! never spawns a process).
//!
//! - The model's tests: `reset` on the episode's task with the solution and the tests as input files
//!   (`program.py`, `test_program.py`, read-only beside the task's own files) and the requirements
//!   plus pytest (`test_requirements`, resolved by the server's package cache), then one
//!   `run_python` step of a fixed runner that calls `pytest.main` and prints the counts on a marker
//!   line. The env scores that step with the task's hidden checks as it scores every step, but the
//!   runner is not the solution: the score is discarded (recorded as 0) and never shown to the model.
//! - The final solution: `reset` with the solution's requirements, then the normal coding-env step of
//!   its code, whose reward (the task's outputs and unit tests) is the episode's reward.

use std::time::Instant;

use env_core::contract::info;
use env_core::{EnvError, Value};
use serde_json::json;

use trajectory::record::{
    ActionRecord, EnvStepRecord, ErrorKind, ErrorRecord, ModelTestRun, StopReason,
};

use crate::client::millis;
use crate::episode::format;
use crate::episode::primitives::{StepResult, env_step, push_failed_step, push_step, run_python};
use crate::episode::state::{Ending, EpisodeContext, EpisodePlan, EpisodeState};

pub(super) const SOLUTION_FILE: &str = "program.py";
pub(super) const TESTS_FILE: &str = "test_program.py";
const MARKER: &str = "CODEGYM_MODEL_TESTS ";

/// Runs the model's tests and prints `MARKER {"passed", "failed", "errors"}` last. Bytecode is not
/// written (the files are read-only) and the cache plugin is off (it would write `.pytest_cache`).
const RUNNER: &str = r#"import json, sys
sys.dont_write_bytecode = True
try:
    import pytest
except ImportError as e:
    print("CODEGYM_MODEL_TESTS " + json.dumps({"not_run": "pytest is not available: %s" % e}))
    raise SystemExit(0)

class _Count:
    passed = failed = errors = 0

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            if report.passed:
                self.passed += 1
            elif report.failed:
                self.failed += 1
        elif report.failed:
            self.errors += 1

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors += 1

_c = _Count()
_code = pytest.main(["-q", "-p", "no:cacheprovider", "test_program.py"], plugins=[_c])
print("CODEGYM_MODEL_TESTS " + json.dumps({"passed": _c.passed, "failed": _c.failed, "errors": _c.errors, "exit": int(_code)}))
"#;

/// The loop's current solution.
#[derive(Debug, Clone, Default)]
pub(super) struct Solution {
    pub code: String,
    pub requirements: Vec<String>,
    pub tests: String,
}

/// Runs the model's tests against the solution; the run and the report shown to the model. Errs
/// only on machinery failures (the episode ends); a refused package or a crash is an outcome.
pub(super) async fn run_model_tests(
    ctx: &EpisodeContext,
    plan: &EpisodePlan,
    st: &mut EpisodeState,
    sol: &Solution,
) -> Result<(ModelTestRun, String), Ending> {
    let action = ActionRecord::ModelTests {
        solution: sol.code.clone(),
        tests: sol.tests.clone(),
        requirements: sol.requirements.clone(),
    };
    let mut requirements = ctx.config.episode.autocoder.test_requirements.clone();
    merge(&mut requirements, &sol.requirements);
    let mut options = base_options(plan, &requirements);
    options.insert(
        "files".into(),
        json!({SOLUTION_FILE: {"text": sol.code}, TESTS_FILE: {"text": sol.tests}}),
    );
    let t = Instant::now();
    let reset = match st.session.as_mut() {
        Some(s) => s.reset(Some(plan.seed), options).await,
        None => Err(EnvError::ClosedEnvironment),
    };
    st.env_ms += millis(t.elapsed());
    if let Err(e) = reset {
        return refused(st, action, e, millis(t.elapsed()));
    }
    let t = Instant::now();
    let step = match st.session.as_mut() {
        Some(s) => s.step(run_python(RUNNER)).await,
        None => Err(EnvError::ClosedEnvironment),
    };
    let duration_ms = millis(t.elapsed());
    st.env_ms += duration_ms;
    let step = match step {
        Ok(step) => step,
        Err(e) => return refused(st, action, e, duration_ms),
    };
    let Value::Execution(exec) = &step.obs else {
        return Err(Ending::error(
            StopReason::Error,
            ErrorKind::Env,
            "the env answered the test runner without an execution result",
        ));
    };
    let run = parse_counts(&exec.stdout).unwrap_or_else(|| ModelTestRun {
        passed: 0,
        failed: 0,
        errors: 0,
        pass_rate: 0.0,
        not_run: Some(format!(
            "the test run ended before pytest reported ({})",
            format::status(exec, false)
        )),
    });
    let max = ctx.config.episode.feedback_max_chars;
    let shown: String = exec
        .stdout
        .lines()
        .filter(|l| !l.starts_with(MARKER))
        .collect::<Vec<_>>()
        .join("\n");
    let mut report = format!(
        "pytest output:\n{}\n\nstderr:\n{}",
        format::truncate_middle(&shown, max),
        format::truncate_middle(&exec.stderr, max)
    );
    if let Some(why) = &run.not_run {
        report = format!("{why}\n\n{report}");
    }
    // The env's reward, breakdown and `solved` score the runner against the hidden checks: they are
    // meaningless here and must not leak into the record as if they were the solution's.
    let mut info = step.info.clone();
    for k in [info::SOLVED, info::REWARD_BREAKDOWN, info::PROVENANCE] {
        info.remove(k);
    }
    push_step(
        st,
        EnvStepRecord {
            action,
            tool_call_id: None,
            execution: Some(exec.clone()),
            observation: None,
            reward: 0.0,
            reward_breakdown: None,
            terminated: false,
            truncated: false,
            info,
            duration_ms,
            error: None,
            provenance: None,
            rescore: None,
            cross_check: None,
        },
    );
    Ok((run, report))
}

/// A `reset` or `step` that failed: the request's fault (a package the policy refuses or that
/// cannot be installed, bad files) is an outcome shown to the model; anything else ends the episode.
fn refused(
    st: &mut EpisodeState,
    action: ActionRecord,
    e: EnvError,
    duration_ms: u64,
) -> Result<(ModelTestRun, String), Ending> {
    let request_fault = matches!(
        e,
        EnvError::FailedPrecondition(_) | EnvError::InvalidOptions(_) | EnvError::InvalidAction(_)
    );
    let error = ErrorRecord {
        kind: ErrorKind::Env,
        status: None,
        message: e.to_string(),
    };
    push_failed_step(st, action, None, error, duration_ms);
    if !request_fault {
        return Err(Ending::env(e));
    }
    let why = format!("the tests could not run: {e}");
    let run = ModelTestRun {
        passed: 0,
        failed: 0,
        errors: 0,
        pass_rate: 0.0,
        not_run: Some(why.clone()),
    };
    Ok((run, why))
}

/// Scores the final solution with the task's own checks: the episode's reward. A requirement the
/// server refuses is dropped (the program then fails on its import, an outcome) and the refusal
/// returned.
pub(super) async fn score_solution(
    plan: &EpisodePlan,
    st: &mut EpisodeState,
    sol: &Solution,
) -> (Ending, Option<String>) {
    let mut refusal = None;
    for requirements in [sol.requirements.as_slice(), &[]] {
        let t = Instant::now();
        let reset = match st.session.as_mut() {
            Some(s) => {
                s.reset(Some(plan.seed), base_options(plan, requirements))
                    .await
            }
            None => Err(EnvError::ClosedEnvironment),
        };
        st.env_ms += millis(t.elapsed());
        match reset {
            Ok(_) => {
                let code = sol.code.clone();
                let ending = match env_step(
                    st,
                    run_python(&code),
                    ActionRecord::RunPython { code },
                    None,
                )
                .await
                {
                    Ok(StepResult::Done(ending)) | Err(ending) => ending,
                    Ok(StepResult::Continue { .. }) => Ending::new(StopReason::Submitted),
                };
                return (ending, refusal);
            }
            Err(e @ (EnvError::FailedPrecondition(_) | EnvError::InvalidOptions(_)))
                if !requirements.is_empty() =>
            {
                refusal = Some(e.to_string());
            }
            Err(e) => return (Ending::env(e), refusal),
        }
    }
    (
        Ending::error(StopReason::Error, ErrorKind::Env, "no evaluation ran"),
        refusal,
    )
}

fn base_options(
    plan: &EpisodePlan,
    requirements: &[String],
) -> serde_json::Map<String, serde_json::Value> {
    let mut options = serde_json::Map::new();
    options.insert("task_id".into(), json!(plan.task_id));
    if !requirements.is_empty() {
        options.insert("requirements".into(), json!(requirements));
    }
    options
}

/// Appends the requirements of `more` not yet in `into`.
pub(super) fn merge(into: &mut Vec<String>, more: &[String]) {
    for r in more {
        if !into.contains(r) {
            into.push(r.clone());
        }
    }
}

/// The counts on the runner's last marker line (the tests' own output is captured by pytest, so a
/// test printing the marker does not reach stdout; the last line wins regardless).
fn parse_counts(stdout: &str) -> Option<ModelTestRun> {
    let line = stdout.lines().rev().find_map(|l| l.strip_prefix(MARKER))?;
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let count = |k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_u64)
            .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    let (passed, failed, errors) = (count("passed"), count("failed"), count("errors"));
    let total = f64::from(passed) + f64::from(failed) + f64::from(errors);
    Some(ModelTestRun {
        passed,
        failed,
        errors,
        pass_rate: if total > 0.0 {
            f64::from(passed) / total
        } else {
            0.0
        },
        not_run: v
            .get("not_run")
            .and_then(serde_json::Value::as_str)
            .map(str::to_string)
            .or_else(|| (total == 0.0).then(|| "pytest collected no tests".to_string())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_come_from_the_last_marker_line() {
        let out = "..F\nCODEGYM_MODEL_TESTS {\"passed\": 9}\n1 failed\nCODEGYM_MODEL_TESTS {\"passed\": 2, \"failed\": 1, \"errors\": 1, \"exit\": 1}\n";
        let run = parse_counts(out).unwrap();
        assert_eq!((run.passed, run.failed, run.errors), (2, 1, 1));
        assert!((run.pass_rate - 0.5).abs() < 1e-9);
        assert!(run.not_run.is_none());
        let none =
            parse_counts("CODEGYM_MODEL_TESTS {\"passed\": 0, \"failed\": 0, \"errors\": 0}")
                .unwrap();
        assert!(none.not_run.is_some() && !none.all_passed());
        assert!(parse_counts("Traceback ...").is_none());
        assert!(parse_counts("CODEGYM_MODEL_TESTS {broken").is_none());
    }

    #[test]
    fn requirements_merge_without_duplicates() {
        let mut r = vec!["pytest==8.3.5".to_string()];
        merge(&mut r, &["tabulate".into(), "pytest==8.3.5".into()]);
        assert_eq!(r, ["pytest==8.3.5", "tabulate"]);
    }
}
