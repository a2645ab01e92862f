//! One episode: open an env session on the task, then alternate model calls and env steps until
//! the task is solved, the model stops, the turn limit, an error, the deadline or cancellation.
//! Whatever happens, the result is a complete [`TrajectoryRecord`] with everything that happened up
//! to that point.
//!
//! Layers, bottom up: [`state`] (the context, plan, state and ending every mode shares) and
//! [`format`](mod@format) (text shown to the model); `primitives` (open the episode, call the
//! model, step the env, the actions that run a program); one module per episode mode on top of
//! them (`code_block`, `tools` with `repo_tools` for a repository env, `pot` for
//! program-of-thought, `autocoder`); this module, which
//! picks the mode once and owns the episode's lifetime (deadline, cancellation, restarts on another
//! env server, the record, which waits for the cross-checks its steps started).

mod autocoder;
mod code_block;
pub mod format;
mod pot;
mod primitives;
mod repo_tools;
pub mod state;
mod structured_tools;
mod tools;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;
use trajectory::record::{
    EngineInfo, EpisodeKey, EpisodeMode, ErrorKind, ModelInfo, RestartRecord, SCHEMA_VERSION,
    StopReason, Timings, TrajectoryRecord,
};

use crate::backend::EnvSession;
use crate::client::millis;
use crate::cross_check::EpisodeChecks;
use state::{Ending, EpisodeState};
pub use state::{EpisodeContext, EpisodePlan};

/// Plays one episode to its end and returns its record. Never fails: failures are recorded. One
/// `episode` span (parent of its `model_call` and `env_call` spans) and one count in the episode
/// metrics per episode.
#[tracing::instrument(
    name = "episode",
    level = "debug",
    skip_all,
    fields(task_id = %plan.task_id, sample_index = plan.sample_index, seed = plan.seed, stop_reason = tracing::field::Empty)
)]
pub async fn run_episode(
    ctx: &EpisodeContext,
    plan: EpisodePlan,
    cancel: &CancellationToken,
) -> TrajectoryRecord {
    let _playing = crate::metrics::Playing::start();
    let started = Instant::now();
    let started_at_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let deadline =
        tokio::time::Instant::now() + Duration::from_secs_f64(ctx.config.episode_timeout_secs);
    let checks = || EpisodeChecks::new(ctx.cross_checks.clone(), &plan.task_id, plan.seed);
    let mut st = EpisodeState {
        retry_budget: ctx.config.model.episode_retry_budget,
        checks: checks(),
        ..EpisodeState::default()
    };
    let mut restarts = Vec::new();
    let ending = loop {
        let ending = if cancel.is_cancelled() {
            Ending::error(
                StopReason::Cancelled,
                ErrorKind::Cancelled,
                "run interrupted before the episode started",
            )
        } else {
            tokio::select! {
                ending = play(ctx, &plan, &mut st) => ending,
                () = tokio::time::sleep_until(deadline) => Ending::error(
                    StopReason::Timeout,
                    ErrorKind::EpisodeTimeout,
                    format!("episode deadline of {} s passed", ctx.config.episode_timeout_secs),
                ),
                () = cancel.cancelled() => Ending::error(StopReason::Cancelled, ErrorKind::Cancelled, "run interrupted"),
            }
        };
        // The env's state went with its server: play the episode again from its first turn, with
        // the same seed, on another server. What the lost attempt did is kept as a restart.
        let lost = st.session.as_ref().and_then(EnvSession::lost);
        match lost {
            Some((server, reason))
                if ending.stop == StopReason::Error
                    && restarts.len() < ctx.backend.max_restarts() as usize =>
            {
                tracing::info!(task = %plan.task_id, sample = plan.sample_index, %server, %reason, "restarting the episode on another env server");
                crate::metrics::episode_restart();
                restarts.push(RestartRecord {
                    env_server: server.to_string(),
                    reason,
                    turns: u32::try_from(st.turns.len()).unwrap_or(u32::MAX),
                    usage: st.usage,
                    after_ms: millis(started.elapsed()),
                });
                // Time spent is real time of this episode; everything else starts over.
                st = EpisodeState {
                    retry_budget: st.retry_budget,
                    model_ms: st.model_ms,
                    env_ms: st.env_ms,
                    avoid_server: Some(server),
                    checks: checks(),
                    ..EpisodeState::default()
                };
            }
            _ => break ending,
        }
    };
    let env_server = st
        .session
        .as_ref()
        .and_then(EnvSession::server)
        .map(|s| s.to_string());
    if let Some(session) = st.session.take() {
        let t = Instant::now();
        // A server that does not answer a close must not hold the episode's record back for long.
        match tokio::time::timeout(Duration::from_secs(10), session.close()).await {
            Ok(Err(e)) => tracing::debug!(error = %e, "closing the env session failed"),
            Err(_) => tracing::debug!("closing the env session timed out"),
            Ok(Ok(())) => {}
        }
        st.env_ms += millis(t.elapsed());
    }
    let key = EpisodeKey {
        task_id: plan.task_id.clone(),
        sample_index: plan.sample_index,
    };
    let config = &ctx.config;
    let checks = std::mem::take(&mut st.checks);
    let mut record = TrajectoryRecord {
        schema_version: SCHEMA_VERSION,
        run_id: ctx.run_id.clone(),
        episode_id: key.episode_id(),
        group_id: format!("{}/{}", ctx.run_id, plan.task_id),
        task_id: plan.task_id,
        sample_index: plan.sample_index,
        seed: plan.seed,
        env_id: config.env_id.clone(),
        env_kwargs: config.env_kwargs.clone(),
        mode: config.episode.mode,
        model: ModelInfo {
            requested: config.model.model.clone(),
            served: st.served_model,
            endpoint: ctx.client.endpoint_url(plan.endpoint).to_string(),
        },
        sampling: config.model.sampling.clone(),
        messages: st.messages,
        turns: st.turns,
        total_reward: st.total_reward,
        final_reward: st.final_reward,
        solved: st.solved,
        stop_reason: ending.stop,
        error: ending.error,
        usage: st.usage,
        timings: Timings {
            started_at_ms,
            wall_ms: millis(started.elapsed()),
            model_ms: st.model_ms,
            env_ms: st.env_ms,
        },
        engine: EngineInfo::default(),
        env_server,
        restarts,
        rescore: None,
        autocoder: st.autocoder,
        repository: st.repository,
    };
    // The cross-checks ran beside the episode; the record carries them (and their penalties).
    checks.finish(&mut record, cancel).await;
    crate::metrics::episode(&record);
    tracing::Span::current().record("stop_reason", record.stop_reason.as_str());
    record
}

/// The one dispatch on the episode's mode: each mode is one module over the shared primitives.
async fn play(ctx: &EpisodeContext, plan: &EpisodePlan, st: &mut EpisodeState) -> Ending {
    let mode = ctx.config.episode.mode;
    // Program-of-thought mode opens its own env (session mode, with the engine's host tools).
    if mode != EpisodeMode::ProgramOfThought
        && let Err(ending) = primitives::open(ctx, plan, st).await
    {
        return ending;
    }
    match mode {
        EpisodeMode::CodeBlock => code_block::play(ctx, plan, st).await,
        EpisodeMode::Tools => tools::play(ctx, plan, st).await,
        EpisodeMode::ProgramOfThought => pot::play(ctx, plan, st).await,
        EpisodeMode::Autocoder => autocoder::play(ctx, plan, st).await,
    }
}
