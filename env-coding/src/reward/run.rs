//! Evaluating a [`RewardSpec`] by running the program through the sandbox.
//!
//! Every execution a spec needs (the plain run, one run per stdin case, one harness run per unit-test
//! component) is independent, so they all run concurrently, bounded by the sandbox's own limit.

use env_core::ExecutionResult;
use futures::future::join_all;

use super::harness::{self, CANDIDATE_FILE, TestSuite};
use super::{Component, RewardOutcome, RewardSpec, score};
use crate::sandbox::{ExecRequest, Limits, Sandbox, SandboxError};

/// A program to score: `main.py` plus files (session mode accumulates both).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Program {
    pub source: String,
    pub files: Vec<(String, Vec<u8>)>,
}

impl Program {
    pub fn new(source: impl Into<String>) -> Self {
        Program {
            source: source.into(),
            files: Vec::new(),
        }
    }

    /// Files except the names the runs reserve (`main.py`, and the harness's candidate file).
    fn extra_files(&self) -> impl Iterator<Item = &(String, Vec<u8>)> {
        self.files.iter().filter(|(p, _)| {
            let p = p.trim_start_matches("./");
            p != "main.py" && p != CANDIDATE_FILE
        })
    }
}

/// Knobs of an evaluation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EvalOptions {
    /// Limits of every run (`None`: the sandbox's defaults).
    pub limits: Option<Limits>,
    /// Wall-clock budget of each unit test inside the harness (`0`: none; the run's limits still
    /// apply). One slow test then fails alone instead of taking the whole record down.
    pub per_test_timeout_ms: u64,
}

enum Job {
    Plain,
    Case {
        component: usize,
        case: usize,
    },
    Tests {
        component: usize,
        input: harness::HarnessInput,
    },
}

/// Scores `program` under `spec`. `plain` is the program's plain run when the caller already has it
/// (script mode: the step's own run); otherwise it is run here when a component needs it.
///
/// `Err` only for sandbox failures (infrastructure): never a reward.
pub async fn evaluate(
    sandbox: &Sandbox,
    spec: &RewardSpec,
    program: &Program,
    plain: Option<&ExecutionResult>,
    opts: EvalOptions,
) -> Result<RewardOutcome, SandboxError> {
    evaluate_inner(sandbox, spec, program, plain, false, opts)
        .await
        .map(|(_, outcome)| outcome)
}

/// Runs the program (its observation) and scores it, with every execution in flight at once: a
/// unit-test task's step then costs one run's latency, not two.
pub async fn run_and_evaluate(
    sandbox: &Sandbox,
    spec: &RewardSpec,
    program: &Program,
    opts: EvalOptions,
) -> Result<(ExecutionResult, RewardOutcome), SandboxError> {
    let (plain, outcome) = evaluate_inner(sandbox, spec, program, None, true, opts).await?;
    Ok((plain.unwrap_or_default(), outcome))
}

async fn evaluate_inner(
    sandbox: &Sandbox,
    spec: &RewardSpec,
    program: &Program,
    plain: Option<&ExecutionResult>,
    always_run_plain: bool,
    opts: EvalOptions,
) -> Result<(Option<ExecutionResult>, RewardOutcome), SandboxError> {
    let files: Vec<(String, Vec<u8>)> = program.extra_files().cloned().collect();
    let mut jobs: Vec<(Job, ExecRequest)> = Vec::new();
    let request =
        |source: String, stdin: Option<Vec<u8>>, extra: Vec<(String, Vec<u8>)>| ExecRequest {
            source,
            files: extra,
            stdin,
            limits: opts.limits,
        };
    if plain.is_none() && (always_run_plain || spec.needs_plain_run()) {
        jobs.push((
            Job::Plain,
            request(program.source.clone(), None, files.clone()),
        ));
    }
    for (i, c) in spec.components.iter().enumerate() {
        let suite = match c {
            Component::IoCases { cases, .. } => {
                for (k, case) in cases.iter().enumerate() {
                    let stdin = Some(case.stdin.clone().into_bytes());
                    jobs.push((
                        Job::Case {
                            component: i,
                            case: k,
                        },
                        request(program.source.clone(), stdin, files.clone()),
                    ));
                }
                continue;
            }
            Component::CheckFunction {
                code, entry_point, ..
            } => TestSuite::Check { code, entry_point },
            Component::Asserts { asserts, setup, .. } => TestSuite::Asserts { asserts, setup },
            _ => continue,
        };
        let input = harness::prepare(&suite, opts.per_test_timeout_ms as f64 / 1000.0);
        let mut extra = files.clone();
        extra.push((
            CANDIDATE_FILE.to_string(),
            program.source.clone().into_bytes(),
        ));
        let mut req = request(
            harness::HARNESS_SOURCE.to_string(),
            Some(input.stdin.clone()),
            extra,
        );
        // The record lists every test with its error: make room for it whatever the caller's cap.
        let mut limits = opts.limits.unwrap_or(*sandbox.limits());
        limits.stdout_cap = limits.stdout_cap.max(1 << 20);
        req.limits = Some(limits);
        jobs.push((
            Job::Tests {
                component: i,
                input,
            },
            req,
        ));
    }

    let (kinds, requests): (Vec<Job>, Vec<ExecRequest>) = jobs.into_iter().unzip();
    let outcomes = join_all(requests.into_iter().map(|r| sandbox.run(r))).await;
    let mut own_plain = None;
    let mut cases: Vec<Vec<Option<ExecutionResult>>> = spec
        .components
        .iter()
        .map(|c| match c {
            Component::IoCases { cases, .. } => vec![None; cases.len()],
            _ => Vec::new(),
        })
        .collect();
    let mut reports = vec![None; spec.components.len()];
    let mut any_timeout = false;
    let mut any_syntax_error = false;
    for (job, outcome) in kinds.into_iter().zip(outcomes) {
        let outcome = outcome?;
        let result = outcome.to_execution_result();
        match job {
            Job::Plain => own_plain = Some(result),
            Job::Case { component, case } => {
                any_timeout |= result.timed_out;
                any_syntax_error |= score::is_syntax_error(&result);
                cases[component][case] = Some(result);
            }
            Job::Tests { component, input } => {
                let report = harness::parse(&input, &result.stdout, result.timed_out);
                any_timeout |= result.timed_out;
                any_syntax_error |= report.syntax_error;
                reports[component] = Some(report);
            }
        }
    }
    let plain = plain.or(own_plain.as_ref());
    if let Some(p) = plain {
        any_timeout |= p.timed_out;
        any_syntax_error |= score::is_syntax_error(p);
    }
    let empty = ExecutionResult::default();
    let p = plain.unwrap_or(&empty);
    let mut scores = Vec::with_capacity(spec.components.len());
    for (i, c) in spec.components.iter().enumerate() {
        let s = match c {
            Component::ExitCode { expected, weight } => score::exit_code(p, *expected, *weight),
            Component::Stdout {
                expected,
                mode,
                weight,
            } => score::stdout(p, expected, *mode, *weight),
            Component::Contains {
                text,
                case_insensitive,
                weight,
            } => score::contains(p, text, *case_insensitive, *weight),
            Component::Regex { pattern, weight } => score::regex(p, pattern, *weight),
            Component::Numeric {
                expected,
                rel_tol,
                abs_tol,
                pattern,
                weight,
            } => score::numeric(
                p,
                *expected,
                *rel_tol,
                *abs_tol,
                pattern.as_deref(),
                *weight,
            ),
            Component::IoCases {
                cases: spec_cases,
                mode,
                weight,
            } => {
                let runs: Vec<ExecutionResult> = cases[i]
                    .iter()
                    .map(|r| r.clone().unwrap_or_default())
                    .collect();
                let expected: Vec<&str> = spec_cases.iter().map(|c| c.stdout.as_str()).collect();
                score::io_cases(&runs, &expected, *mode, *weight)
            }
            Component::CheckFunction { weight, .. } | Component::Asserts { weight, .. } => {
                let report = reports[i].take().unwrap_or_else(|| harness::TestReport {
                    tests: Vec::new(),
                    error: Some("tests were not run".into()),
                    syntax_error: false,
                });
                super::ComponentScore {
                    kind: c.kind(),
                    weight: *weight,
                    score: report.score(),
                    detail: report.detail(),
                }
            }
        };
        scores.push(s);
    }
    let penalties = vec![
        (
            "timeout",
            if any_timeout {
                spec.penalties.timeout
            } else {
                0.0
            },
        ),
        (
            "syntax_error",
            if any_syntax_error {
                spec.penalties.syntax_error
            } else {
                0.0
            },
        ),
    ];
    Ok((own_plain, RewardOutcome::combine(scores, penalties)))
}
