//! What the rollout engine reports to the `metrics` facade: episodes, model calls (latency, retries
//! by error class, tokens), env calls and cross-checks of rewarded programs. A no-op unless the process installed a recorder (`codegym
//! rollout --metrics-addr` does). Trace spans (`episode`, `model_call`, `env_call`) are `tracing`
//! spans on the same call sites; the binary exports them over OTLP when configured.

use std::time::Duration;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};

use trajectory::record::{CrossCheckOutcome, ModelCall, TrajectoryRecord};

/// Episodes finished, by `stop_reason` and `solved` (`true`/`false`).
pub const EPISODES: &str = "codegym_rollout_episodes_total";
/// Episodes playing now.
pub const EPISODES_IN_FLIGHT: &str = "codegym_rollout_episodes_in_flight";
/// Episode wall-clock seconds.
pub const EPISODE_SECONDS: &str = "codegym_rollout_episode_seconds";
/// Model calls finished, by `outcome`: `ok` or the error kind that ended the call.
pub const MODEL_CALLS: &str = "codegym_rollout_model_calls_total";
/// Model call seconds, retries and backoff included.
pub const MODEL_CALL_SECONDS: &str = "codegym_rollout_model_call_seconds";
/// Failed model-call attempts that were retried, by error `kind` (`rate_limited`, `server_error`...).
pub const MODEL_RETRIES: &str = "codegym_rollout_model_retries_total";
/// Tokens the endpoints reported, by `type`: `prompt` or `completion`.
pub const TOKENS: &str = "codegym_rollout_tokens_total";
/// Env calls finished, by `op` (`make`, `reset`, `step`, `close`) and `outcome` (`ok`, `error`).
pub const ENV_CALLS: &str = "codegym_rollout_env_calls_total";
/// Env call seconds, by `op`.
pub const ENV_CALL_SECONDS: &str = "codegym_rollout_env_call_seconds";
/// Sessions the env pool placed on another server, by `reason` (`busy`: RESOURCE_EXHAUSTED,
/// `unavailable`: UNAVAILABLE or unreachable).
pub const ENV_SERVER_RETRIES: &str = "codegym_rollout_env_server_retries_total";
/// Episodes played again from their first turn after losing their env server.
pub const EPISODE_RESTARTS: &str = "codegym_rollout_episode_restarts_total";
/// Cross-checks of rewarded programs against the task's reference, by `outcome` (`agree`,
/// `disagree`, `unavailable`, `error`). Named for the reward it audits, not the engine: a
/// rescoring counts the same thing.
pub const CROSS_CHECKS: &str = "codegym_reward_cross_checks_total";

/// Registers the help texts.
pub fn describe() {
    describe_counter!(EPISODES, "Episodes finished, by stop reason and solved");
    describe_gauge!(EPISODES_IN_FLIGHT, "Episodes playing now");
    describe_histogram!(
        EPISODE_SECONDS,
        metrics::Unit::Seconds,
        "Episode wall-clock time"
    );
    describe_counter!(MODEL_CALLS, "Model calls finished, by outcome");
    describe_histogram!(
        MODEL_CALL_SECONDS,
        metrics::Unit::Seconds,
        "Model call latency, retries and backoff included"
    );
    describe_counter!(MODEL_RETRIES, "Retried model-call attempts, by error kind");
    describe_counter!(TOKENS, "Tokens reported by the endpoints, by type");
    describe_counter!(ENV_CALLS, "Env calls finished, by operation and outcome");
    describe_histogram!(
        ENV_CALL_SECONDS,
        metrics::Unit::Seconds,
        "Env call latency, by operation"
    );
    describe_counter!(
        ENV_SERVER_RETRIES,
        "Sessions placed on another env server, by reason"
    );
    describe_counter!(
        EPISODE_RESTARTS,
        "Episodes restarted after losing their env server"
    );
    describe_counter!(
        CROSS_CHECKS,
        "Rewarded programs compared with the task's reference, by outcome"
    );
}

/// Holds the in-flight gauge up while an episode plays (also when its future is dropped).
pub(crate) struct Playing(());

impl Playing {
    pub(crate) fn start() -> Playing {
        gauge!(EPISODES_IN_FLIGHT).increment(1.0);
        Playing(())
    }
}

impl Drop for Playing {
    fn drop(&mut self) {
        gauge!(EPISODES_IN_FLIGHT).decrement(1.0);
    }
}

/// One finished episode.
pub(crate) fn episode(record: &TrajectoryRecord) {
    let solved = if record.solved { "true" } else { "false" };
    counter!(EPISODES, "stop_reason" => record.stop_reason.as_str(), "solved" => solved)
        .increment(1);
    histogram!(EPISODE_SECONDS).record(record.timings.wall_ms as f64 / 1000.0);
}

/// One finished model call, with its retries and tokens.
pub(crate) fn model_call(call: &ModelCall) {
    let outcome = call.error.as_ref().map_or("ok", |e| e.kind.as_str());
    counter!(MODEL_CALLS, "outcome" => outcome).increment(1);
    histogram!(MODEL_CALL_SECONDS).record(call.latency_ms as f64 / 1000.0);
    for retry in &call.retries {
        counter!(MODEL_RETRIES, "kind" => retry.kind.as_str()).increment(1);
    }
    if let Some(usage) = &call.usage {
        counter!(TOKENS, "type" => "prompt").increment(usage.prompt_tokens);
        counter!(TOKENS, "type" => "completion").increment(usage.completion_tokens);
    }
}

/// One finished env call.
pub(crate) fn env_call(op: &'static str, ok: bool, elapsed: Duration) {
    let outcome = if ok { "ok" } else { "error" };
    counter!(ENV_CALLS, "op" => op, "outcome" => outcome).increment(1);
    histogram!(ENV_CALL_SECONDS, "op" => op).record(elapsed.as_secs_f64());
}

/// The env pool tried another server for a new session.
pub(crate) fn env_server_retry(reason: &'static str) {
    counter!(ENV_SERVER_RETRIES, "reason" => reason).increment(1);
}

/// An episode restarts on another env server.
pub(crate) fn episode_restart() {
    counter!(EPISODE_RESTARTS).increment(1);
}

/// One cross-check written on its step.
pub(crate) fn cross_check(outcome: CrossCheckOutcome) {
    counter!(CROSS_CHECKS, "outcome" => outcome.as_str()).increment(1);
}
