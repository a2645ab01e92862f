//! Mutation testing (`codegym audit --mutants N`): how strong a task's tests are, as a number.
//!
//! For each task with a reference solution: the reference is scored first (a reference that is
//! not solved makes the task "reference fails", not scored); then up to N mutants of it (small
//! deliberate bugs: [`python`] from the syntax tree, [`tokens`] for the other languages) are
//! scored through the one scoring engine, exactly as a submission would be
//! ([`super::score_source`]). A mutant the tests reject (not solved, or a reward below the
//! reference's) is killed; one they accept survives. A survivor is then compared with the
//! reference on inputs derived from the task ([`crate::inputs`]): agreeing on all of them, it is
//! "probably equivalent" (no test could tell it apart) rather than a weakness. The score is
//! `killed / (mutants - equivalent)`; [`report`] holds the per-task and per-set numbers.
//!
//! Mutants run with one second of CPU per run (and per unit test) when the reference passes so,
//! else under the task's own limits: many loop forever, and would each spend the full limit of
//! every run they make.

pub mod python;
pub mod report;
pub mod tokens;

use std::sync::Arc;
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use serde::Deserialize;

use super::{AuditError, score_source};
use crate::inputs::{self, Rng};
use crate::reward::Component;
use crate::reward::run::EvalOptions;
use crate::scoring::Scorer;
use crate::tasks::Task;
use codegym_sandbox::lang::Language;
use codegym_sandbox::{ExecRequest, Limits, Sandbox, SandboxError};
pub use report::{Distribution, MutationReport, MutationStatus, SurvivingMutant, TaskMutation};

/// Tasks mutated at once, and mutants of one task scored at once (the sandbox bounds the runs).
const TASKS_IN_FLIGHT: usize = 8;
const MUTANTS_IN_FLIGHT: usize = 16;
/// Token-level candidates tried per mutant asked for (some do not compile).
const CANDIDATES_PER_MUTANT: usize = 3;
/// CPU per run of a mutant (and per unit test), when the reference passes within it.
const MUTANT_CPU_MS: u64 = 1_000;
/// Inputs a survivor must agree with the reference on to be called probably equivalent: on
/// fewer (a task whose mutated inputs the reference mostly rejects), it stays a survivor.
const MIN_EQUIVALENCE_INPUTS: usize = 10;

/// One mutant of a reference solution.
#[derive(Debug, Clone, Deserialize)]
pub struct Mutant {
    /// `arithmetic`, `comparison`, `boolean`, `constant`, `boundary`, `return`, `statement` or
    /// `augmented_assignment`.
    pub operator: String,
    /// The line of the reference it changes.
    pub line: usize,
    pub what: String,
    pub source: String,
    /// Its diff against the reference.
    pub diff: Vec<String>,
}

/// Mutation-tests every task of `tasks`: up to `n` mutants each, scored under `opts`; `gate`
/// names the tasks whose score is below it.
pub async fn mutation_audit(
    scorer: &Scorer,
    tasks: &[&Arc<Task>],
    n: usize,
    gate: Option<f64>,
    opts: EvalOptions,
) -> Result<MutationReport, AuditError> {
    let started = Instant::now();
    let results: Vec<TaskMutation> = futures::stream::iter(tasks)
        .map(|task| task_mutation(scorer, task, n, opts))
        .buffered(TASKS_IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(MutationReport::new(
        n,
        gate,
        results,
        started.elapsed().as_secs_f64(),
    ))
}

/// The task's scoring options with the CPU time of each run (and each unit test's budget) cut to
/// [`MUTANT_CPU_MS`]: a mutant that loops forever (a dropped increment, a flipped loop condition)
/// is common and would spend the full limit of every run it makes. Used only where the reference
/// passes under them; the limits only ever shrink.
fn quick_options(opts: EvalOptions, sandbox_limits: Limits) -> EvalOptions {
    let base = opts.limits.unwrap_or(sandbox_limits);
    let cpu_ms = base.cpu_ms.min(MUTANT_CPU_MS);
    EvalOptions {
        limits: Some(Limits {
            cpu_ms,
            wall_ms: base.wall_ms.min(cpu_ms.saturating_mul(3)),
            ..base
        }),
        per_test_timeout_ms: match opts.per_test_timeout_ms {
            0 => 0,
            t => t.min(cpu_ms),
        },
        ..opts
    }
}

/// The line the solution starts on: after the completion prefix when the reference begins with
/// it (the prompt's code is not the solution's to mutate).
fn first_line(task: &Task, reference: &str) -> usize {
    match task.completion_prefix.as_deref() {
        Some(p) if !p.is_empty() && reference.starts_with(p) => {
            p.matches('\n').count() + if p.ends_with('\n') { 1 } else { 2 }
        }
        _ => 1,
    }
}

fn machinery(task: &Task, stage: &'static str) -> impl FnOnce(SandboxError) -> AuditError {
    let task = task.id.clone();
    move |source| AuditError::Machinery {
        task,
        stage,
        source,
    }
}

async fn task_mutation(
    scorer: &Scorer,
    task: &Arc<Task>,
    n: usize,
    given: EvalOptions,
) -> Result<TaskMutation, AuditError> {
    let unscored =
        |status, note: String| TaskMutation::unscored(&task.id, task.language, status, note);
    let Some(reference) = task.reference_solution.clone() else {
        return Ok(unscored(MutationStatus::NoReference, "no reference".into()));
    };
    // The quick limits when the reference passes under them, else the task's own.
    let quick = quick_options(given, *scorer.sandbox().limits());
    let mut reference_outcome = score_source(scorer, task, &reference, quick, "the reference")
        .await?
        .outcome;
    let mut opts = quick;
    if !reference_outcome.solved && quick != given {
        reference_outcome = score_source(scorer, task, &reference, given, "the reference")
            .await?
            .outcome;
        opts = given;
    }
    if !reference_outcome.solved {
        return Ok(unscored(
            MutationStatus::ReferenceFails,
            format!(
                "reference fails (reward {:.3}): run `codegym tasks check`",
                reference_outcome.reward
            ),
        ));
    }
    let sandbox = scorer.sandbox();
    let first = first_line(task, &reference);
    let (mutants, uncompilable) = if task.language == Language::Python {
        let made = python::mutants(sandbox, &reference, first, n, &task.id)
            .await
            .map_err(machinery(task, "mutant generator"))?;
        match made {
            Ok(m) => (m, 0),
            Err(why) => return Ok(unscored(MutationStatus::NoMutants, why)),
        }
    } else {
        let mut rng = Rng::new(&task.id);
        let candidates = tokens::candidates(
            &reference,
            task.language,
            first,
            n * CANDIDATES_PER_MUTANT,
            &mut rng,
        );
        compiling(sandbox, task, candidates, n).await?
    };
    if mutants.is_empty() {
        return Ok(unscored(
            MutationStatus::NoMutants,
            "the reference has nothing to mutate".into(),
        ));
    }
    let floor = reference_outcome.reward - 1e-9;
    let scored: Vec<(Mutant, f64, bool)> = futures::stream::iter(mutants)
        .enumerate()
        .map(|(k, m)| async move {
            let label = format!("mutant {k} ({}: {})", m.operator, m.what);
            let o = score_source(scorer, task, &m.source, opts, &label)
                .await?
                .outcome;
            let killed = !(o.solved && o.reward >= floor);
            Ok::<_, AuditError>((m, o.reward, killed))
        })
        .buffered(MUTANTS_IN_FLIGHT)
        .try_collect()
        .await?;
    let mut result = TaskMutation::empty(&task.id, task.language, MutationStatus::Scored);
    result.mutants = scored.len();
    result.uncompilable = uncompilable;
    result.killed = scored.iter().filter(|(.., k)| *k).count();
    let survivors: Vec<(Mutant, f64)> = scored
        .into_iter()
        .filter(|(.., k)| !k)
        .map(|(m, r, _)| (m, r))
        .collect();
    if !survivors.is_empty() {
        let prepared =
            scorer
                .prepare(Arc::clone(task))
                .await
                .map_err(|source| AuditError::Scoring {
                    task: task.id.clone(),
                    program: "the task's packages".into(),
                    source,
                })?;
        let derived = inputs::derive(sandbox, &prepared)
            .await
            .map_err(machinery(task, "deriving inputs"))?;
        result.equivalence_inputs = derived.len();
        result.inputs_unavailable = derived.why_none().or_else(|| {
            (derived.len() < MIN_EQUIVALENCE_INPUTS).then(|| {
                format!(
                    "only {} input(s) to compare on: too few to call a survivor equivalent",
                    derived.len()
                )
            })
        });
        let derived = &derived;
        result.surviving = futures::stream::iter(survivors)
            .map(|(m, reward)| async move {
                let found = derived
                    .disagreements(sandbox, &m.source)
                    .await
                    .map_err(machinery(task, "comparing a survivor with the reference"))?;
                Ok::<_, AuditError>(SurvivingMutant {
                    probably_equivalent: derived.len() >= MIN_EQUIVALENCE_INPUTS
                        && found.is_empty(),
                    disagreement: found.into_iter().next(),
                    operator: m.operator,
                    line: m.line,
                    what: m.what,
                    diff: m.diff,
                    reward,
                })
            })
            .buffered(MUTANTS_IN_FLIGHT / 4)
            .try_collect()
            .await?;
    }
    result.equivalent = result
        .surviving
        .iter()
        .filter(|s| s.probably_equivalent)
        .count();
    result.survivors = result.surviving.len() - result.equivalent;
    let counted = result.mutants - result.equivalent;
    result.mutation_score = if counted == 0 {
        result.status = MutationStatus::NoMutants;
        result.note = Some("every mutant is probably equivalent to the reference".into());
        None
    } else {
        Some(result.killed as f64 / counted as f64)
    };
    Ok(result)
}

/// The first `n` of `candidates` that compile (in order), and how many did not. Languages without
/// a compile step take the first `n`.
async fn compiling(
    sandbox: &Sandbox,
    task: &Task,
    candidates: Vec<Mutant>,
    n: usize,
) -> Result<(Vec<Mutant>, usize), AuditError> {
    if !task.language.is_compiled() {
        return Ok((candidates.into_iter().take(n).collect(), 0));
    }
    let probes = futures::stream::iter(candidates)
        .map(|m| async move {
            let ok = compiles(sandbox, task, &m.source)
                .await
                .map_err(machinery(task, "compiling a mutant"))?;
            Ok::<_, AuditError>((m, ok))
        })
        .buffered(MUTANTS_IN_FLIGHT / 4);
    futures::pin_mut!(probes);
    let (mut kept, mut dropped) = (Vec::new(), 0);
    while kept.len() < n
        && let Some(probe) = probes.next().await
    {
        match probe? {
            (m, true) => kept.push(m),
            (_, false) => dropped += 1,
        }
    }
    Ok((kept, dropped))
}

/// Whether `source` compiles as the task's scoring assembles it (a judge's driver or appended
/// tests after it). The compiled artifact is cached: scoring the mutant compiles nothing again.
async fn compiles(sandbox: &Sandbox, task: &Task, source: &str) -> Result<bool, SandboxError> {
    let assembled = task
        .reward
        .components
        .iter()
        .find_map(|c| match c {
            Component::Judge(j) => j.driver.as_ref().map(|d| format!("{source}\n{d}")),
            Component::AppendedTests { code, .. } => Some(crate::reward::splice::append_tests(
                source,
                code,
                task.language,
            )),
            _ => None,
        })
        .unwrap_or_else(|| source.to_string());
    let run = sandbox
        .run(ExecRequest {
            source: assembled,
            language: task.language,
            limits: Some(Limits {
                cpu_ms: 1_000,
                wall_ms: 5_000,
                ..*sandbox.limits()
            }),
            ..ExecRequest::default()
        })
        .await?;
    Ok(!run.compile_failed())
}
