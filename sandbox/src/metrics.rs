//! What the sandbox reports to the `metrics` facade: executions by outcome, run latency, the queue
//! in front of the concurrency bound, runs in flight and fork-server restarts. A no-op unless the
//! process installed a recorder (`codegym serve --metrics-addr` does).

use std::time::{Duration, Instant};

use env_core::ExecutionResult;
use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};

/// Runs finished (a program in any language, one that did not compile, a workspace's command;
/// not session-mode cells), by `outcome`: `success`, `exit_nonzero`, `signal`, `timeout`,
/// `memory_exceeded`, or `error` (the machinery failed; no program outcome).
pub const EXECUTIONS: &str = "codegym_sandbox_executions_total";
/// Seconds from a run's admission (after the queue) to its result.
pub const RUN_SECONDS: &str = "codegym_sandbox_run_seconds";
/// Runs waiting for a slot under the sandbox's concurrency bound.
pub const QUEUE_DEPTH: &str = "codegym_sandbox_queue_depth";
/// Runs holding a slot now.
pub const IN_FLIGHT: &str = "codegym_sandbox_runs_in_flight";
/// Fork servers replaced because the previous one had died (warm backend).
pub const FORK_SERVER_RESTARTS: &str = "codegym_sandbox_fork_server_restarts_total";

/// Each isolation layer of the sandbox, by `layer`: 1 active, 0 missing.
pub const ISOLATION_LAYER: &str = "codegym_sandbox_isolation_layer";
/// The sandbox's isolation level: 0 none, 1 basic, 2 strict.
pub const ISOLATION_LEVEL: &str = "codegym_sandbox_isolation_level";

/// Registers the help texts.
pub fn describe() {
    describe_counter!(EXECUTIONS, "Sandbox script runs finished, by outcome");
    describe_histogram!(
        RUN_SECONDS,
        metrics::Unit::Seconds,
        "Sandbox run latency, from admission to result"
    );
    describe_gauge!(QUEUE_DEPTH, "Sandbox runs waiting for a concurrency slot");
    describe_gauge!(IN_FLIGHT, "Sandbox runs holding a concurrency slot");
    describe_counter!(
        FORK_SERVER_RESTARTS,
        "Fork servers restarted after the previous one died"
    );
    describe_gauge!(
        ISOLATION_LAYER,
        "Sandbox isolation layers, by layer: 1 active, 0 missing"
    );
    describe_gauge!(
        ISOLATION_LEVEL,
        "Sandbox isolation level: 0 none, 1 basic, 2 strict"
    );
}

/// Publishes the sandbox's isolation (call once the process's recorder is installed).
pub fn isolation(report: &crate::IsolationReport) {
    for layer in &report.layers {
        gauge!(ISOLATION_LAYER, "layer" => layer.name).set(if layer.active { 1.0 } else { 0.0 });
    }
    gauge!(ISOLATION_LEVEL).set(report.level as u8 as f64);
}

/// Holds a gauge up by one for its lifetime, so a dropped future (a client deadline) cannot leave
/// the gauge counting a run that is gone.
pub(super) struct Level(&'static str);

impl Level {
    pub(super) fn enter(name: &'static str) -> Level {
        gauge!(name).increment(1.0);
        Level(name)
    }
}

impl Drop for Level {
    fn drop(&mut self) {
        gauge!(self.0).decrement(1.0);
    }
}

/// A run's slot under the sandbox's concurrency bound: every run (a script, a compile, a compiled
/// program, a repository command) is admitted here, so the queue and in-flight gauges count them
/// all. Dropping it frees the slot.
pub(super) struct Admitted<'a> {
    _permit: tokio::sync::SemaphorePermit<'a>,
    _in_flight: Level,
    at: Instant,
}

/// Waits for a slot of `permits` (counted in the queue gauge meanwhile).
pub(super) async fn admit(
    permits: &tokio::sync::Semaphore,
) -> Result<Admitted<'_>, crate::SandboxError> {
    let queued = Level::enter(QUEUE_DEPTH);
    let permit = permits
        .acquire()
        .await
        .map_err(|_| crate::SandboxError::Closed)?;
    drop(queued);
    Ok(Admitted {
        _permit: permit,
        _in_flight: Level::enter(IN_FLIGHT),
        at: Instant::now(),
    })
}

impl Admitted<'_> {
    /// Records the admitted run's outcome and its latency since admission.
    pub(super) fn finished(&self, result: Result<&ExecutionResult, ()>) {
        finished(result, self.at.elapsed());
    }
}

/// One finished run: its outcome, and its latency when it produced a result.
pub(super) fn finished(result: Result<&ExecutionResult, ()>, elapsed: Duration) {
    let outcome = match result {
        Err(()) => "error",
        Ok(r) if r.timed_out => "timeout",
        Ok(r) if r.memory_exceeded => "memory_exceeded",
        Ok(r) if r.success() => "success",
        Ok(r) if r.signal.is_some() => "signal",
        Ok(_) => "exit_nonzero",
    };
    counter!(EXECUTIONS, "outcome" => outcome).increment(1);
    histogram!(RUN_SECONDS).record(elapsed.as_secs_f64());
}

/// The fork server was replaced.
pub(super) fn fork_server_restarted() {
    counter!(FORK_SERVER_RESTARTS).increment(1);
}
