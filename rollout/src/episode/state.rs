//! What an episode is played with and what it builds up: the run's shared [`EpisodeContext`], the
//! [`EpisodePlan`] of one episode, its `EpisodeState` (which survives the drop of the driving
//! future at a deadline or cancellation) and how it ended (`Ending`). The bottom of the episode
//! modules: every mode reads and writes these, and this module imports none of them.

use std::sync::Arc;

use env_core::EnvError;
use trajectory::record::{
    AutoCoderSummary, ChatMessage, ErrorKind, ErrorRecord, RepoOutcome, StopReason, TurnRecord,
    Usage,
};

use crate::backend::{EnvBackend, EnvSession};
use crate::client::ChatClient;
use crate::config::RolloutConfig;
use crate::cross_check::{CrossChecks, EpisodeChecks};

/// What every episode of a run shares.
#[derive(Debug, Clone)]
pub struct EpisodeContext {
    pub client: Arc<ChatClient>,
    pub backend: EnvBackend,
    pub config: Arc<RolloutConfig>,
    pub run_id: String,
    /// The run's cross-checks of rewarded programs, when asked for.
    pub cross_checks: Option<Arc<CrossChecks>>,
}

/// Which episode to play and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpisodePlan {
    pub task_id: String,
    pub sample_index: u32,
    pub seed: u64,
    /// Index of the LLM endpoint the episode is pinned to.
    pub endpoint: usize,
}

/// How an episode ended.
#[derive(Debug)]
pub(super) struct Ending {
    pub stop: StopReason,
    pub error: Option<ErrorRecord>,
}

impl Ending {
    pub fn new(stop: StopReason) -> Self {
        Ending { stop, error: None }
    }

    pub fn error(stop: StopReason, kind: ErrorKind, message: impl Into<String>) -> Self {
        Ending {
            stop,
            error: Some(ErrorRecord {
                kind,
                status: None,
                message: message.into(),
            }),
        }
    }

    /// An env call failed in a way that ends the episode.
    pub fn env(e: EnvError) -> Self {
        Ending::error(StopReason::Error, ErrorKind::Env, e.to_string())
    }
}

/// The episode's progress; survives the drop of the driving future at a deadline or cancellation.
#[derive(Debug, Default)]
pub(super) struct EpisodeState {
    pub session: Option<EnvSession>,
    pub messages: Vec<ChatMessage>,
    pub turns: Vec<TurnRecord>,
    pub total_reward: f64,
    pub final_reward: f64,
    pub solved: bool,
    pub usage: Usage,
    pub model_ms: u64,
    pub env_ms: u64,
    pub served_model: Option<String>,
    pub retry_budget: u32,
    /// The env server an earlier attempt of this episode lost: the next session goes elsewhere.
    pub avoid_server: Option<std::net::SocketAddr>,
    /// AutoCoder mode: the summary, kept current as the loop goes.
    pub autocoder: Option<AutoCoderSummary>,
    /// The episode's language from `reset`'s info (`None`: Python, or an env that does not say);
    /// code-block mode extracts and sends code in it.
    pub language: Option<String>,
    /// Cross-checks of this attempt's rewarded steps, started as they are recorded.
    pub checks: EpisodeChecks,
    /// A repository episode that submitted: its diff and verdict.
    pub repository: Option<RepoOutcome>,
}
