//! False timeouts: a scoring run that hit its wall-clock backstop while its CPU time was clearly
//! under the CPU limit did not prove the program slow, only the machine busy. Such a run is re-run
//! once ([`run`]) and the re-run's result counts; a re-run that times out again is a timeout.
//!
//! The CPU limit is what a task's time limit means (the judge's `time_limit_ms` is `cpu_ms`); the
//! wall clock is a backstop against programs that sleep or block, and it is the one a loaded
//! machine trips: 64 evaluations on two cores give each program a fraction of a core, so a
//! solution that needs half its CPU limit can need several times its wall limit. A program that
//! spent its CPU (a busy loop: SIGXCPU, or killed with the CPU at its limit) is never re-run.
//!
//! Re-runs are per run (one judge test, one `io_cases` case, one unit-test harness run, the plain
//! run when the reward reads it: output components or the timeout penalty), not per submission: runs are independent executions, so re-running only the one that
//! timed out gives the same verdict as re-running everything, at the cost of one run. They go
//! through a "quiet lane" (at most one re-run per core at once, process-wide), so a burst of false
//! timeouts does not double the load that caused it, and they get `wall_factor` times the wall
//! backstop (the CPU limit is unchanged: a program that needs more CPU than its limit still
//! fails). No deadlock: a re-run takes its lane slot only after its first attempt has returned its
//! sandbox slot, and nothing holding a sandbox slot waits for the lane.
//!
//! Every false timeout is recorded ([`TimeoutRerun`]) and listed in the reward breakdown
//! (`timeout_reruns`), with the re-run's outcome, or none when re-runs are off. A verdict whose
//! final runs still contain a false timeout is never kept in the verdict cache (`verdicts.rs`):
//! load is not a property of the submission, so it must not become every identical one's verdict.
//! Runs of programs with host tools are never re-run (their calls would reach the caller twice).

use std::sync::LazyLock;

use env_core::ExecutionResult;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use codegym_sandbox::{ExecRequest, Limits, Sandbox, SandboxError};

/// The policy (`coding.timeout_rerun` in the config file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RerunPolicy {
    /// Re-run a false timeout once (default `true`); `false` still lists it in the breakdown.
    pub enabled: bool,
    /// A timeout is false when the run's CPU time is under this percentage of its CPU limit
    /// (default 90, 1-100). Below 100 because the kernel's CPU clock for `RLIMIT_CPU` runs ahead
    /// of the rusage a run reports (see the sandbox's `supervise.rs`).
    pub cpu_percent: u32,
    /// The re-run's wall-clock backstop, as a multiple of the first's (default 2, at least 1).
    pub wall_factor: u32,
}

impl Default for RerunPolicy {
    fn default() -> Self {
        RerunPolicy {
            enabled: true,
            cpu_percent: 90,
            wall_factor: 2,
        }
    }
}

impl RerunPolicy {
    /// What serde cannot check.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=100).contains(&self.cpu_percent) {
            return Err(format!(
                "timeout_rerun.cpu_percent must be 1-100, got {}",
                self.cpu_percent
            ));
        }
        if self.wall_factor == 0 {
            return Err("timeout_rerun.wall_factor must be at least 1".into());
        }
        Ok(())
    }

    /// Whether `result`, run under `limits`, timed out on the wall clock with its CPU time under
    /// the threshold: the supervisor's wall deadline passed, and no CPU-limit signal ended it.
    pub fn is_false_timeout(&self, result: &ExecutionResult, limits: &Limits) -> bool {
        result.timed_out
            && result.signal != Some(libc::SIGXCPU)
            && result.wall_ms >= limits.wall_ms
            && u128::from(result.cpu_ms) * 100
                < u128::from(limits.cpu_ms) * u128::from(self.cpu_percent)
    }
}

/// One false timeout: the first attempt, and the re-run's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TimeoutRerun {
    /// Which run: `program` (the plain run), `component N case K`, `component N test K`,
    /// `component N tests` (a unit-test harness), `component N` (appended tests).
    pub run: String,
    pub cpu_limit_ms: u64,
    pub wall_limit_ms: u64,
    pub first_wall_ms: u64,
    pub first_cpu_ms: u64,
    /// `None`: re-runs are off (or the run calls host tools), the timeout stands.
    pub rerun: Option<RerunOutcome>,
}

/// How a re-run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RerunOutcome {
    pub timed_out: bool,
    pub wall_ms: u64,
    pub cpu_ms: u64,
    pub wall_limit_ms: u64,
    /// The re-run timed out again with its CPU under the threshold (load, or a program that
    /// sleeps): the timeout counts, but the verdict is not cached.
    pub false_timeout: bool,
}

impl TimeoutRerun {
    /// Whether the timeout that counts is still a false one (no re-run, or a re-run that timed
    /// out again under the CPU threshold).
    pub fn unproven(&self) -> bool {
        self.rerun.as_ref().is_none_or(|r| r.false_timeout)
    }
}

/// At most one re-run per core at once, in the whole process (every scorer shares the cores).
static QUIET_LANE: LazyLock<Semaphore> =
    LazyLock::new(|| Semaphore::new(std::thread::available_parallelism().map_or(1, |n| n.get())));

/// Runs `req` on `sandbox`; a false timeout is re-run once under `policy` (see the module doc).
/// `label` names the run in the record. `policy = None`: a run whose ending no verdict reads (an
/// ungraded step's observation), run once and never recorded. `Err` only for machinery failures,
/// of either attempt.
pub async fn run(
    sandbox: &Sandbox,
    req: ExecRequest,
    policy: Option<RerunPolicy>,
    label: impl FnOnce() -> String,
) -> Result<(ExecutionResult, Option<TimeoutRerun>), SandboxError> {
    let Some(policy) = policy else {
        return Ok((sandbox.run(req).await?, None));
    };
    let limits = req.limits.unwrap_or(*sandbox.limits());
    let retry = (policy.enabled && req.tools.is_none()).then(|| req.clone());
    let first = sandbox.run(req).await?;
    if !policy.is_false_timeout(&first, &limits) {
        return Ok((first, None));
    }
    let mut record = TimeoutRerun {
        run: label(),
        cpu_limit_ms: limits.cpu_ms,
        wall_limit_ms: limits.wall_ms,
        first_wall_ms: first.wall_ms,
        first_cpu_ms: first.cpu_ms,
        rerun: None,
    };
    let Some(mut req) = retry else {
        return Ok((first, Some(record)));
    };
    let again = Limits {
        wall_ms: limits
            .wall_ms
            .saturating_mul(u64::from(policy.wall_factor.max(1))),
        ..limits
    };
    req.limits = Some(again);
    let second = {
        // The semaphore is never closed, so acquiring only fails if it were: run without a slot.
        let _slot = QUIET_LANE.acquire().await.ok();
        sandbox.run(req).await?
    };
    tracing::debug!(
        run = %record.run,
        first_wall_ms = first.wall_ms,
        first_cpu_ms = first.cpu_ms,
        rerun_timed_out = second.timed_out,
        "re-ran a false timeout"
    );
    record.rerun = Some(RerunOutcome {
        timed_out: second.timed_out,
        wall_ms: second.wall_ms,
        cpu_ms: second.cpu_ms,
        wall_limit_ms: again.wall_ms,
        false_timeout: policy.is_false_timeout(&second, &again),
    });
    Ok((second, Some(record)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(timed_out: bool, signal: Option<i32>, wall_ms: u64, cpu_ms: u64) -> ExecutionResult {
        ExecutionResult {
            timed_out,
            signal,
            wall_ms,
            cpu_ms,
            ..ExecutionResult::default()
        }
    }

    #[test]
    fn only_wall_clock_timeouts_under_the_cpu_threshold_are_false() {
        let p = RerunPolicy::default();
        let l = Limits {
            cpu_ms: 1_000,
            wall_ms: 3_000,
            ..Limits::default()
        };
        let kill = Some(libc::SIGKILL);
        // Killed at the wall deadline having had half its CPU: the machine was busy.
        assert!(p.is_false_timeout(&ended(true, kill, 3_004, 500), &l));
        // A sleeper: no CPU at all, still a wall-clock timeout (re-run, and it fails again).
        assert!(p.is_false_timeout(&ended(true, kill, 3_001, 3), &l));
        // A busy loop: SIGXCPU, or killed with its CPU at the limit (rusage lags the kernel's clock).
        assert!(!p.is_false_timeout(&ended(true, Some(libc::SIGXCPU), 1_100, 1_000), &l));
        assert!(!p.is_false_timeout(&ended(true, kill, 3_002, 950), &l));
        // Killed by `RLIMIT_CPU`'s hard limit before the wall deadline.
        assert!(!p.is_false_timeout(&ended(true, kill, 2_100, 880), &l));
        // Not a timeout at all.
        assert!(!p.is_false_timeout(&ended(false, None, 3_500, 10), &l));
        let strict = RerunPolicy {
            cpu_percent: 40,
            ..p
        };
        assert!(!strict.is_false_timeout(&ended(true, kill, 3_004, 500), &l));
    }

    #[test]
    fn policy_validation_and_unknown_fields() {
        assert!(RerunPolicy::default().validate().is_ok());
        for bad in [
            RerunPolicy {
                cpu_percent: 0,
                ..RerunPolicy::default()
            },
            RerunPolicy {
                cpu_percent: 101,
                ..RerunPolicy::default()
            },
            RerunPolicy {
                wall_factor: 0,
                ..RerunPolicy::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        let p: RerunPolicy = serde_json::from_str(r#"{"enabled": false}"#).unwrap();
        assert_eq!((p.enabled, p.cpu_percent, p.wall_factor), (false, 90, 2));
        assert!(serde_json::from_str::<RerunPolicy>(r#"{"cpu": 5}"#).is_err());
    }
}
