//! Cross-checks of rewarded programs during a run (`--cross-check FRACTION`): a sampled fraction
//! of the env steps that earned a reward have their program compared with the task's reference
//! on inputs derived from the task's own tests, off the episode's critical path.
//!
//! The engine knows no environment: the comparison is a [`CrossCheck`] the caller hands to
//! [`crate::runner::run_checked`] (the `codegym` binary implements it with the coding env's
//! derived inputs and its sandbox). Which steps are checked and what a disagreement does to the
//! record are the `trajectory` crate's rules ([`trajectory::cross_check`]), shared with
//! `codegym rescore`. Here: a check starts as soon as its step is recorded (a spawned task, bounded
//! by the run's permits so checks never starve the episodes' own scoring), the episode goes on
//! to its next model call, and [`EpisodeChecks::finish`] joins every check before the record is
//! written, applying the penalty and counting the outcome.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use trajectory::cross_check::{apply, selected};
use trajectory::record::{CrossCheckRecord, EnvStepRecord, OnDisagreement, TrajectoryRecord};

use crate::config::CrossCheckConfig;

/// Why a check could not be made (the machinery failed): recorded as outcome `error`.
pub type CheckError = Box<dyn std::error::Error + Send + Sync>;

/// The future of one check.
pub type CheckFuture<'a> =
    Pin<Box<dyn Future<Output = Result<CrossCheckRecord, CheckError>> + Send + 'a>>;

/// Compares a rewarded program with its task's reference solution.
pub trait CrossCheck: Send + Sync + 'static {
    /// Whether steps of `task_id` are checked at all (the task has a reference solution): no
    /// step of another task is.
    fn covers(&self, task_id: &str) -> bool;

    /// `program` (in `language`, SandboxFusion's name), as the env scored it for `task_id`,
    /// compared with the reference: a record whose outcome is `agree`, `disagree` or
    /// `unavailable` (its `action` and `original_reward` are the engine's to set). `Err` only
    /// when the machinery failed.
    fn check<'a>(
        &'a self,
        task_id: &'a str,
        program: &'a str,
        language: &'a str,
    ) -> CheckFuture<'a>;
}

/// A run's cross-checks: the checker, which fraction of rewarded steps, what a disagreement does,
/// and the permits that bound the checks in flight.
pub struct CrossChecks {
    checker: Arc<dyn CrossCheck>,
    fraction: f64,
    on_disagreement: OnDisagreement,
    permits: Semaphore,
}

impl std::fmt::Debug for CrossChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrossChecks")
            .field("fraction", &self.fraction)
            .field("on_disagreement", &self.on_disagreement)
            .finish_non_exhaustive()
    }
}

impl CrossChecks {
    /// The checks `config` asks for, made by `checker`.
    pub fn new(config: &CrossCheckConfig, checker: Arc<dyn CrossCheck>) -> Self {
        CrossChecks {
            checker,
            fraction: config.fraction,
            on_disagreement: config.on_disagreement,
            permits: Semaphore::new(config.in_flight()),
        }
    }
}

/// A check started for a step, or its outcome when none had to run.
enum Check {
    Done(CrossCheckRecord),
    Running(AbortOnDropHandle<CrossCheckRecord>),
}

/// One episode's checks: started as its steps are recorded, joined before its record is written.
/// Dropped with an attempt lost to an env server, which aborts them (the steps go too).
#[derive(Default)]
pub(crate) struct EpisodeChecks {
    run: Option<Arc<CrossChecks>>,
    task_id: String,
    seed: u64,
    /// Env steps recorded so far (the sampling index of the next one).
    steps: u64,
    /// (turn, step) of each checked step, and its check.
    pending: Vec<((usize, usize), Check)>,
}

impl std::fmt::Debug for EpisodeChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpisodeChecks")
            .field("steps", &self.steps)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl EpisodeChecks {
    /// The checks of the episode of `task_id` seeded `seed` (none when `run` is `None`).
    pub(crate) fn new(run: Option<Arc<CrossChecks>>, task_id: &str, seed: u64) -> Self {
        EpisodeChecks {
            run,
            task_id: task_id.to_string(),
            seed,
            ..EpisodeChecks::default()
        }
    }

    /// `step` is recorded at `at`: starts its check if it is one to check. Returns at once.
    pub(crate) fn recorded(&mut self, at: (usize, usize), step: &EnvStepRecord) {
        let index = self.steps;
        self.steps += 1;
        let Some(run) = &self.run else { return };
        let Some(candidate) = selected(run.fraction, self.seed, index, step) else {
            return;
        };
        if !run.checker.covers(&self.task_id) {
            return;
        }
        let check = match candidate {
            Err(why) => Check::Done(CrossCheckRecord::unavailable(why)),
            Ok(c) => {
                let run = run.clone();
                let task_id = self.task_id.clone();
                Check::Running(AbortOnDropHandle::new(tokio::spawn(async move {
                    // The semaphore is never closed: acquiring fails only if it were.
                    let _permit = run.permits.acquire().await;
                    run.checker
                        .check(&task_id, &c.program, &c.language)
                        .await
                        .unwrap_or_else(|e| CrossCheckRecord::error(e.to_string()))
                })))
            }
        };
        self.pending.push((at, check));
    }

    /// Waits for every check (a cancelled run stops waiting: the check is an `error`) and
    /// writes each on its step of `record`, with the run's penalty; counts the outcomes.
    pub(crate) async fn finish(self, record: &mut TrajectoryRecord, cancel: &CancellationToken) {
        let Some(run) = self.run else { return };
        for (at, check) in self.pending {
            let check = match check {
                Check::Done(c) => c,
                Check::Running(handle) => tokio::select! {
                    joined = handle => joined.unwrap_or_else(|e| {
                        CrossCheckRecord::error(format!("the check's task failed: {e}"))
                    }),
                    () = cancel.cancelled() => CrossCheckRecord::error(
                        "the run was interrupted before the check finished",
                    ),
                },
            };
            if check.outcome == trajectory::record::CrossCheckOutcome::Disagree {
                tracing::info!(
                    episode = %record.episode_id,
                    disagreeing = check.disagreeing,
                    inputs = check.inputs,
                    "a rewarded program disagrees with the task's reference"
                );
            }
            crate::metrics::cross_check(check.outcome);
            apply(record, at, check, run.on_disagreement);
        }
    }
}
