//! Scoring a program under a [`RewardSpec`] by running it through the sandbox: [`score_program`]
//! (the caller may already have the plain run) and [`run_and_score`] (the plain run is the
//! caller's observation too).
//!
//! Three steps: plan the executions the spec needs (`plan`: the plain run, one run per stdin
//! case, one harness run per unit-test component), run them (`run`: all independent, so all
//! concurrent, bounded by the sandbox's own limit), and score what they produced (`score_runs`).

use env_core::ExecutionResult;
use futures::future::join_all;

use super::harness::{self, CANDIDATE_FILE, TestReport, TestSuite};
pub use super::program::{Program, vars_prologue};
use super::{Component, ComponentScore, RewardOutcome, RewardSpec, score};
use crate::timeouts::{self, RerunPolicy, TimeoutRerun};
use codegym_sandbox::RunData;
use codegym_sandbox::lang::Language;
use codegym_sandbox::{ExecRequest, Limits, Sandbox, SandboxError};

/// Knobs of scoring a program.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EvalOptions {
    /// Limits of every run (`None`: the sandbox's defaults).
    pub limits: Option<Limits>,
    /// Wall-clock budget of each unit test inside the harness (`0`: none; the run's limits still
    /// apply). One slow test then fails alone instead of taking the whole record down.
    pub per_test_timeout_ms: u64,
    /// Whether and when a timeout under the CPU limit is re-run (`crate::timeouts`).
    pub timeout_rerun: RerunPolicy,
}

/// Whether the program's plain run (no stdin, no tests) is among the executions.
#[derive(Debug, Clone, Copy)]
enum PlainRun<'a> {
    /// The caller already has it (script mode: the step's own run).
    Given(&'a ExecutionResult),
    /// Run here only if a component reads it.
    IfNeeded,
    /// Run here in any case: it is also the caller's observation.
    Always,
}

/// One planned execution and what its result is for.
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
    /// Issue 14: the program with an `appended_tests` component's tests after it.
    Appended {
        component: usize,
    },
}

/// Scores `program` under `spec`. `plain` is the program's plain run when the caller already has it
/// (script mode: the step's own run); otherwise it is run here when a component needs it.
///
/// `Err` only for sandbox failures (infrastructure): never a reward.
pub async fn score_program(
    sandbox: &Sandbox,
    spec: &RewardSpec,
    program: &Program,
    plain: Option<&ExecutionResult>,
    opts: EvalOptions,
) -> Result<RewardOutcome, SandboxError> {
    let plain = plain.map_or(PlainRun::IfNeeded, PlainRun::Given);
    run_and_score_with(sandbox, spec, program, plain, opts)
        .await
        .map(|(_, outcome)| outcome)
}

/// Runs the program (its observation) and scores it, with every execution in flight at once: a
/// unit-test task's step then costs one run's latency, not two.
pub async fn run_and_score(
    sandbox: &Sandbox,
    spec: &RewardSpec,
    program: &Program,
    opts: EvalOptions,
) -> Result<(ExecutionResult, RewardOutcome), SandboxError> {
    let (plain, outcome) =
        run_and_score_with(sandbox, spec, program, PlainRun::Always, opts).await?;
    Ok((plain.unwrap_or_default(), outcome))
}

/// Plans, runs and scores; returns the plain run when it was run here.
async fn run_and_score_with(
    sandbox: &Sandbox,
    spec: &RewardSpec,
    program: &Program,
    plain: PlainRun<'_>,
    opts: EvalOptions,
) -> Result<(Option<ExecutionResult>, RewardOutcome), SandboxError> {
    // The server's limits (the sandbox's, or an env's lower ones) are the ceiling of every run
    // scored here, whatever surface the task came from: what a task asks for (a judge's time and
    // memory, a differential input's time) is capped at `base` where its runs' limits are made,
    // so a task's limits can only lower the server's.
    let base = opts
        .limits
        .map_or(*sandbox.limits(), |l| l.within(sandbox.limits()));
    let opts = EvalOptions {
        limits: Some(base),
        ..opts
    };
    let jobs = plan(sandbox, spec, program, plain, opts);
    // Issue 14: judge components run beside the other executions.
    let judged = join_all(spec.components.iter().map(|c| async move {
        match c {
            Component::Judge(j) => crate::judge::judge(
                sandbox,
                program.language,
                &program.source,
                &program.extra_files().cloned().collect::<Vec<_>>(),
                j,
                base,
                opts.timeout_rerun,
            )
            .await
            .map(Some),
            _ => Ok(None),
        }
    }));
    // Issue 14: differential components (HumanEval+ / MBPP+) too; they need Python.
    let scored = program.scored_source();
    let extra: Vec<(String, Vec<u8>)> = program.extra_files().cloned().collect();
    let diffed = join_all(spec.components.iter().map(|c| {
        let (scored, extra) = (&scored, &extra);
        async move {
            match c {
                Component::Differential(d) if program.language == Language::Python => {
                    crate::differential::compare_with_reference(sandbox, scored, extra, d, base)
                        .await
                        .map(Some)
                }
                _ => Ok(None),
            }
        }
    }));
    let (runs, judged, diffed) =
        futures::join!(run(sandbox, spec, jobs, opts.timeout_rerun), judged, diffed);
    let mut runs = runs?;
    for (i, d) in diffed.into_iter().enumerate() {
        let report = d?;
        if let Some(r) = &report {
            runs.timed_out |= r.timed_out;
            runs.syntax_error |= r.syntax_error;
        }
        runs.diffed[i] = report;
    }
    for (i, j) in judged.into_iter().enumerate() {
        let mut report = j.map_err(SandboxError::from)?;
        if let Some(r) = &mut report {
            runs.timed_out |= r.timed_out;
            runs.syntax_error |= r.compile_failed();
            runs.reruns.extend(r.reruns.drain(..).map(|mut t| {
                t.run = format!("component {i} {}", t.run);
                t
            }));
        }
        runs.judged[i] = report;
    }
    if program.language != Language::Python {
        // Issue 14: the harness imports the candidate as Python; other languages get an honest
        // zero for unit-test components (use `io_cases` or `judge` for them).
        for (i, c) in spec.components.iter().enumerate() {
            if matches!(
                c,
                Component::CheckFunction { .. }
                    | Component::Asserts { .. }
                    | Component::Differential(_)
            ) {
                runs.reports[i] = Some(TestReport {
                    tests: Vec::new(),
                    error: Some(format!(
                        "{} tests run Python programs only; this program is {}",
                        c.kind(),
                        program.language
                    )),
                    syntax_error: false,
                });
            }
        }
    }
    let own_plain = runs.plain.take();
    let plain = match plain {
        PlainRun::Given(p) => Some(p),
        PlainRun::IfNeeded | PlainRun::Always => own_plain.as_ref(),
    };
    let outcome = score_runs(spec, plain, runs);
    Ok((own_plain, outcome))
}

/// The executions `spec` needs for `program`, each with its request.
fn plan(
    sandbox: &Sandbox,
    spec: &RewardSpec,
    program: &Program,
    plain: PlainRun<'_>,
    opts: EvalOptions,
) -> Vec<(Job, ExecRequest)> {
    let files: Vec<(String, Vec<u8>)> = program.extra_files().cloned().collect();
    let mut jobs: Vec<(Job, ExecRequest)> = Vec::new();
    let request =
        |source: String, stdin: Option<Vec<u8>>, extra: Vec<(String, Vec<u8>)>| ExecRequest {
            source,
            files: extra,
            stdin,
            limits: opts.limits,
            data: program.data.run_data(),
            language: program.language,
            report: None,
            tools: None,
            ..ExecRequest::default()
        };
    let scored = program.scored_source();
    let run_plain = match plain {
        PlainRun::Given(_) => false,
        PlainRun::IfNeeded => spec.needs_plain_run(),
        PlainRun::Always => true,
    };
    if run_plain {
        let mut req = request(program.source.clone(), None, files.clone());
        req.report = program.report.clone();
        req.tools = program.tools.clone();
        jobs.push((Job::Plain, req));
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
                        request(scored.clone(), stdin, files.clone()),
                    ));
                }
                continue;
            }
            // Issue 14: unit-test harnesses are Python (see `run_and_score_with`).
            Component::CheckFunction { .. } | Component::Asserts { .. }
                if program.language != Language::Python =>
            {
                continue;
            }
            Component::AppendedTests {
                code,
                fail_marker: None,
                in_process: false,
                ..
            } if program.language == Language::Python => TestSuite::Asserts {
                asserts: std::slice::from_ref(code),
                setup: "",
                candidate_names: None,
            },
            Component::AppendedTests { code, .. } => {
                jobs.push((
                    Job::Appended { component: i },
                    request(
                        super::splice::append_tests(&scored, code, program.language),
                        None,
                        files.clone(),
                    ),
                ));
                continue;
            }
            Component::CheckFunction {
                code,
                entry_point,
                prelude,
                candidate_names,
                ..
            } => TestSuite::Check {
                code,
                entry_point,
                prelude,
                candidate_names: candidate_names.as_deref(),
            },
            Component::Asserts {
                asserts,
                setup,
                candidate_names,
                ..
            } => TestSuite::Asserts {
                asserts,
                setup,
                candidate_names: candidate_names.as_deref(),
            },
            _ => continue,
        };
        let input = harness::prepare(&suite, opts.per_test_timeout_ms as f64 / 1000.0);
        let mut extra = files.clone();
        extra.push((CANDIDATE_FILE.to_string(), scored.clone().into_bytes()));
        let mut req = request(
            harness::HARNESS_SOURCE.to_string(),
            Some(input.stdin.clone()),
            extra,
        );
        // Tests read the input files, but take no arguments and write no outputs.
        req.data = RunData {
            inputs: program.data.files().clone(),
            ..RunData::default()
        };
        // The record lists every test with its error, and may offer the compiled suite: make room
        // for both whatever the caller's cap.
        let mut limits = opts.limits.unwrap_or(*sandbox.limits());
        limits.stdout_cap = limits.stdout_cap.max(1 << 20) + super::compiled::MAX_HEX;
        req.limits = Some(limits);
        jobs.push((
            Job::Tests {
                component: i,
                input,
            },
            req,
        ));
    }
    jobs
}

impl Job {
    /// How a [`TimeoutRerun`] names the run.
    fn label(&self) -> String {
        match self {
            Job::Plain => "program".into(),
            Job::Case { component, case } => format!("component {component} case {case}"),
            Job::Tests { component, .. } => format!("component {component} tests"),
            Job::Appended { component } => format!("component {component}"),
        }
    }
}

/// What the executions produced, by component.
struct Runs {
    plain: Option<ExecutionResult>,
    /// `cases[component][case]`: the run on each stdin case of an `io_cases` component.
    cases: Vec<Vec<Option<ExecutionResult>>>,
    /// The harness's report of each unit-test component.
    reports: Vec<Option<TestReport>>,
    /// A case or test run hit its time limit.
    timed_out: bool,
    /// A case or test run found the program does not compile.
    syntax_error: bool,
    /// Issue 14: the judge's report of each `judge` component.
    judged: Vec<Option<crate::judge::JudgeReport>>,
    /// Issue 14: the report of each `differential` component.
    diffed: Vec<Option<crate::differential::DiffReport>>,
    /// Issue 14: the run of each `appended_tests` component.
    appended: Vec<Option<ExecutionResult>>,
    /// The false timeouts among them (and the judge's), in the breakdown as `timeout_reruns`.
    reruns: Vec<TimeoutRerun>,
}

/// Runs every job at once; the first infrastructure error fails them all.
async fn run(
    sandbox: &Sandbox,
    spec: &RewardSpec,
    jobs: Vec<(Job, ExecRequest)>,
    policy: RerunPolicy,
) -> Result<Runs, SandboxError> {
    // The plain run's ending reaches the verdict only through output components or a penalty;
    // otherwise (a judged task's observation, an ungraded step) it is not re-run.
    let plain_scored = spec.needs_plain_run();
    let (kinds, requests): (Vec<Job>, Vec<ExecRequest>) = jobs.into_iter().unzip();
    let results = join_all(kinds.iter().zip(requests).map(|(job, r)| {
        let policy = match job {
            Job::Plain if !plain_scored => None,
            _ => Some(policy),
        };
        timeouts::run(sandbox, r, policy, || job.label())
    }))
    .await;
    let mut runs = Runs {
        plain: None,
        cases: spec
            .components
            .iter()
            .map(|c| match c {
                Component::IoCases { cases, .. } => vec![None; cases.len()],
                _ => Vec::new(),
            })
            .collect(),
        reports: vec![None; spec.components.len()],
        timed_out: false,
        syntax_error: false,
        judged: vec![None; spec.components.len()],
        diffed: vec![None; spec.components.len()],
        appended: vec![None; spec.components.len()],
        reruns: Vec::new(),
    };
    for (job, result) in kinds.into_iter().zip(results) {
        let (result, rerun) = result?;
        runs.reruns.extend(rerun);
        match job {
            Job::Plain => runs.plain = Some(result),
            Job::Case { component, case } => {
                runs.timed_out |= result.timed_out;
                runs.syntax_error |= score::is_syntax_error(&result);
                runs.cases[component][case] = Some(result);
            }
            Job::Appended { component } => {
                runs.timed_out |= result.timed_out;
                runs.syntax_error |= score::is_syntax_error(&result);
                runs.appended[component] = Some(result);
            }
            Job::Tests { component, input } => {
                // The harness could not set up its isolation from the candidate: the machinery
                // failed, never a verdict on the program.
                if let Some(why) = harness::harness_failure(&input, &result.stdout) {
                    return Err(SandboxError::Setup {
                        stage: "unit-test harness",
                        source: std::io::Error::other(why),
                    });
                }
                let report = harness::parse(&input, &result.stdout, result.timed_out);
                runs.timed_out |= result.timed_out;
                runs.syntax_error |= report.syntax_error;
                runs.reports[component] = Some(report);
            }
        }
    }
    Ok(runs)
}

/// The reward: every component scored on its runs (output checks on `plain`), minus the penalties
/// that any run (`plain` included) earned.
fn score_runs(spec: &RewardSpec, plain: Option<&ExecutionResult>, mut runs: Runs) -> RewardOutcome {
    let (mut any_timeout, mut any_syntax_error) = (runs.timed_out, runs.syntax_error);
    if let Some(p) = plain {
        any_timeout |= p.timed_out;
        any_syntax_error |= score::is_syntax_error(p);
    }
    let empty = ExecutionResult::default();
    let p = plain.unwrap_or(&empty);
    let scores = spec
        .components
        .iter()
        .enumerate()
        .map(
            |(i, c)| match (c, runs.judged[i].take(), runs.diffed[i].take()) {
                (Component::Judge(j), Some(report), _) => ComponentScore {
                    kind: c.kind(),
                    weight: j.weight,
                    score: report.score(j.partial),
                    detail: report.detail(),
                },
                (Component::Differential(d), _, Some(report)) => ComponentScore {
                    kind: c.kind(),
                    weight: d.weight,
                    score: report.score(d.partial),
                    detail: report.detail(),
                },
                (
                    Component::AppendedTests {
                        fail_marker,
                        weight,
                        ..
                    },
                    _,
                    _,
                ) => match runs.reports[i].take() {
                    Some(report) => score::appended_tests_in_harness(&report, *weight),
                    None => score::appended_tests(
                        runs.appended[i].as_ref(),
                        fail_marker.as_deref(),
                        *weight,
                    ),
                },
                _ => score_component(c, p, &runs.cases[i], runs.reports[i].take()),
            },
        )
        .collect();
    let penalty = |applies: bool, amount: f64| if applies { amount } else { 0.0 };
    let penalties = vec![
        ("timeout", penalty(any_timeout, spec.penalties.timeout)),
        (
            "syntax_error",
            penalty(any_syntax_error, spec.penalties.syntax_error),
        ),
    ];
    RewardOutcome::combine(scores, penalties).with_timeout_reruns(runs.reruns)
}

/// One component's score: output checks read `plain`, `io_cases` its `cases`, unit tests their
/// harness `report`.
fn score_component(
    c: &Component,
    plain: &ExecutionResult,
    cases: &[Option<ExecutionResult>],
    report: Option<TestReport>,
) -> ComponentScore {
    match c {
        Component::ExitCode { expected, weight } => score::exit_code(plain, *expected, *weight),
        Component::Stdout {
            expected,
            mode,
            weight,
        } => score::stdout(plain, expected, *mode, *weight),
        Component::Contains {
            text,
            case_insensitive,
            weight,
        } => score::contains(plain, text, *case_insensitive, *weight),
        Component::Regex { pattern, weight } => score::regex(plain, pattern, *weight),
        Component::Numeric {
            expected,
            rel_tol,
            abs_tol,
            pattern,
            weight,
        } => score::numeric(
            plain,
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
            let runs: Vec<ExecutionResult> = cases
                .iter()
                .map(|r| r.clone().unwrap_or_default())
                .collect();
            let expected: Vec<&str> = spec_cases.iter().map(|c| c.stdout.as_str()).collect();
            score::io_cases(&runs, &expected, *mode, *weight)
        }
        Component::Output {
            name,
            expected,
            tolerance,
            weight,
        } => score::output(plain, name, expected, *tolerance, *weight),
        // Scored from the judge's report in `score_runs`; reaching here means it did not run.
        Component::Judge(j) => ComponentScore {
            kind: c.kind(),
            weight: j.weight,
            score: 0.0,
            detail: serde_json::json!({"error": "the judge did not run"}),
        },
        // Scored in `score_runs` (differential: here only when it could not run, a non-Python
        // program, whose report says why).
        Component::AppendedTests { weight, .. } => score::appended_tests(None, None, *weight),
        Component::CheckFunction { weight, .. }
        | Component::Asserts { weight, .. }
        | Component::Differential(crate::differential::DiffSpec { weight, .. }) => {
            let report = report.unwrap_or_else(|| TestReport {
                tests: Vec::new(),
                error: Some("tests were not run".into()),
                syntax_error: false,
            });
            ComponentScore {
                kind: c.kind(),
                weight: *weight,
                score: report.score(),
                detail: report.detail(),
            }
        }
    }
}
