//! The trajectory record: one JSON line per finished episode in a rollout dataset (written by the
//! `rollout` crate, read through [`crate::read`] by resume, export, report and `codegym run`).
//!
//! These types are a file format read by other tools (the trainer bridge exports training data from
//! them), so field names are stable: a change that renames or retypes a field bumps
//! [`SCHEMA_VERSION`]. Optional fields are omitted from the JSON when absent, and readers must accept
//! their absence. Every change is listed in the crate's `CHANGELOG.md` (module `version`). Nothing here
//! ever holds a secret: API keys are not part of any record.
//!
//! The record itself and its small parts are here; messages (`chat`), turns and env steps
//! (`turn`), failures (`error`), verdict provenance and rescoring (`provenance`), cross-checks of
//! rewarded programs (`cross_check`), AutoCoder stages (`stage`) and token data (`tokens`) have private
//! modules of their own, their types re-exported here.

use serde::{Deserialize, Serialize};

pub use env_core::{ExecutionResult, ReturnValue};

/// Name written in [`EngineInfo::name`].
pub const ENGINE_NAME: &str = "codegym-rollout";

/// One episode: the conversation, what each model call and env step did, and the outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrajectoryRecord {
    /// Layout version of this record ([`SCHEMA_VERSION`] when written by this crate).
    pub schema_version: u32,
    /// Id of the rollout run (kept across `--resume` of the same dataset).
    pub run_id: String,
    /// Stable id of the episode within the run: `"{task_id}#{sample_index}"` (see [`EpisodeKey`]).
    /// A re-run of an errored episode writes a new record with the same id; the newest one wins.
    pub episode_id: String,
    /// Task the episode was about (the env's `reset` option `task_id`).
    pub task_id: String,
    /// Group of samples of the same task in this run (`"{run_id}/{task_id}"`); advantages are
    /// computed within a group.
    pub group_id: String,
    /// Index of this sample within its group, `0..samples`.
    pub sample_index: u32,
    /// Per-episode seed, derived from (run seed, task id, sample index) by a stable hash; passed to
    /// `reset` and (folded to 31 bits) to the model as its sampling seed.
    pub seed: u64,
    /// Environment id, including its version (`codegym/Python-v0`).
    pub env_id: String,
    /// Kwargs the environment was made with (no secrets: env kwargs never carry any).
    #[serde(default)]
    pub env_kwargs: serde_json::Map<String, serde_json::Value>,
    /// How the model acted: fenced code blocks or function calling.
    pub mode: EpisodeMode,
    /// Which model was asked for and which one answered.
    pub model: ModelInfo,
    /// Sampling parameters as configured (the per-request seed is in each [`ModelCall`]).
    pub sampling: SamplingParams,
    /// The full conversation in OpenAI chat format, system prompt first, including tool calls and
    /// tool results. Feedback messages are exactly what the model was shown.
    pub messages: Vec<ChatMessage>,
    /// One entry per model call, in order.
    pub turns: Vec<TurnRecord>,
    /// Sum of the rewards of every env step (Gymnasium's undiscounted return).
    pub total_reward: f64,
    /// Reward of the last env step, 0 when no step ran.
    pub final_reward: f64,
    /// Whether the environment reported the task solved.
    pub solved: bool,
    /// Why the episode ended.
    pub stop_reason: StopReason,
    /// The error that ended the episode, when `stop_reason` is `error`, `timeout`,
    /// `context_length` or `cancelled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorRecord>,
    /// Token usage summed over the model calls that reported it.
    pub usage: Usage,
    /// Where the time went.
    pub timings: Timings,
    /// What wrote the record.
    pub engine: EngineInfo,
    /// AutoCoder mode (schema 2): the final solution, the model's own tests and their pass rate,
    /// a signal recorded beside the reward and never part of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autocoder: Option<AutoCoderSummary>,
    // --- Scale-out (issue 16): where the episode ran and what it survived.
    /// The env server (`host:port`) of the attempt recorded here, when the env was remote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_server: Option<String>,
    /// Earlier attempts of this episode, lost with their env server and restarted from the first
    /// turn with the same seed; the record's messages and turns are the last attempt's only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restarts: Vec<RestartRecord>,
    /// Schema 3: an episode of a repository env (`codegym/Repo-v0`) that submitted: its diff and
    /// the hidden tests' verdict (the submit step's `info["patch"]` and `info["verdict"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<RepoOutcome>,
    /// Written by `codegym rescore`: the record's outcome fields as the rollout recorded them
    /// (its `final_reward`, `total_reward` and `solved` are then the rescored ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rescore: Option<RecordRescore>,
}

/// An attempt of an episode abandoned because its env server was lost (died, broke the
/// connection, stopped answering, or could no longer run the session).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestartRecord {
    /// The server the lost attempt ran on (`host:port`).
    pub env_server: String,
    /// What was seen of the loss.
    pub reason: String,
    /// Model calls the lost attempt had made.
    pub turns: u32,
    /// Tokens the lost attempt spent (not counted in the record's `usage`).
    #[serde(default)]
    pub usage: Usage,
    /// Milliseconds from the episode's start to the loss.
    pub after_ms: u64,
}

impl TrajectoryRecord {
    /// The key under which resume and export deduplicate records.
    pub fn key(&self) -> EpisodeKey {
        EpisodeKey {
            task_id: self.task_id.clone(),
            sample_index: self.sample_index,
        }
    }

    /// Whether `--resume` must run this episode again (it did not finish on its own terms).
    pub fn needs_rerun(&self) -> bool {
        self.stop_reason.is_infra_failure()
    }

    /// The last program the episode ran (what `codegym run --solution` runs again), if any: the
    /// code of its last env step that executed code.
    pub fn last_program(&self) -> Option<&str> {
        self.turns
            .iter()
            .flat_map(|t| &t.env_steps)
            .filter_map(|s| s.action.code())
            .next_back()
    }
}

/// What a repository episode submitted and what its hidden tests found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepoOutcome {
    /// The episode's diff against the task's base commit (absent when it could not be read; the
    /// verdict says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// The verdict as the env reported it (`resolved`, `reward`, `applied`, `reason`,
    /// `fail_to_pass` and `pass_to_pass` as `{test: status}`, `wall_ms`, `dropped`).
    pub verdict: serde_json::Value,
    /// The engine submitted for the model: the episode ended without its `submit` (turns used
    /// up, an answer without a call, its context full) and its diff was scored all the same.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auto_submitted: bool,
}

/// Identity of an episode within a run: one task, one sample index.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EpisodeKey {
    pub task_id: String,
    pub sample_index: u32,
}

impl EpisodeKey {
    /// The record's `episode_id` for this key.
    pub fn episode_id(&self) -> String {
        format!("{}#{}", self.task_id, self.sample_index)
    }
}

/// How the model interacts with the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeMode {
    /// The model answers in prose; the first fenced python block of each answer is executed.
    #[default]
    CodeBlock,
    /// OpenAI function calling with the `run_python` (issue 14: `run_code` in an episode in
    /// another language; and in session mode `write_file`, `read_file`) tools, or a repository
    /// env's tools (schema 3).
    Tools,
    /// Issue 12: the model's code runs in session mode with the task's context injected as the
    /// variable `context`; it may call `llm_query`/`llm_query_batched` (answered by the policy's
    /// own endpoint) and ends the episode by calling `FINAL(answer)`, which the task's reward scores.
    ProgramOfThought,
    /// Structured plan, solution, model-written tests and a diagnose-and-fix loop (schema 2).
    Autocoder,
}

/// Why an episode ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The environment terminated the episode with the task solved.
    Solved,
    /// The model answered without code (code-block mode) or stopped calling tools (tools mode)
    /// before solving the task.
    NoCode,
    /// The turn limit was reached without solving.
    MaxTurns,
    /// The environment truncated the episode (its own time limit) or terminated it unsolved.
    EnvDone,
    /// AutoCoder mode (schema 2): the loop ended and the task's checks scored the final solution
    /// unsolved.
    Submitted,
    /// The prompt outgrew the model's context window (a 400 the server attributed to length).
    ContextLength,
    /// The episode's wall-clock deadline passed.
    Timeout,
    /// A model or environment failure ended the episode; `--resume` re-runs it.
    Error,
    /// The run was interrupted (Ctrl-C, SIGTERM) while the episode was in flight; `--resume`
    /// re-runs it.
    Cancelled,
}

impl StopReason {
    /// Whether the episode ended in an infrastructure failure rather than in an outcome of the
    /// model: it is no sample (see `aggregate`), and `--resume` runs it again.
    pub fn is_infra_failure(self) -> bool {
        matches!(self, StopReason::Error | StopReason::Cancelled)
    }

    /// The snake_case name used in JSON and summaries.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Solved => "solved",
            StopReason::NoCode => "no_code",
            StopReason::MaxTurns => "max_turns",
            StopReason::EnvDone => "env_done",
            StopReason::Submitted => "submitted",
            StopReason::ContextLength => "context_length",
            StopReason::Timeout => "timeout",
            StopReason::Error => "error",
            StopReason::Cancelled => "cancelled",
        }
    }
}

/// The model asked for and the model that answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// The model name sent in requests, untouched (`org/model:provider`, `org/model:fastest`).
    pub requested: String,
    /// The `model` field of the last successful response (the router reports the provider's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served: Option<String>,
    /// Base URL of the endpoint the episode was pinned to (never contains credentials).
    pub endpoint: String,
}

/// Sampling parameters of `/v1/chat/completions`. `None` fields are not sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    /// Ask for per-token logprobs (`logprobs: true`); providers that cannot are detected per turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    /// Alternatives per token (0-5 on the Hugging Face router, up to 20 on OpenAI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<u8>,
    /// Extra JSON fields merged into the request body as is (e.g. vLLM's `return_token_ids`).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra_body: serde_json::Map<String, serde_json::Value>,
}

/// Token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
}

impl Usage {
    /// Adds another count to this one.
    pub fn add(&mut self, other: &Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
    }
}

/// Where an episode's time went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timings {
    /// Start of the episode, milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    /// Episode wall-clock duration.
    pub wall_ms: u64,
    /// Time spent in model calls (retries and backoff included).
    pub model_ms: u64,
    /// Time spent in env calls (make, reset, step, close).
    pub env_ms: u64,
}

/// The software that wrote a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineInfo {
    /// [`ENGINE_NAME`].
    pub name: String,
    /// The version of the crates that wrote it (the workspace's version, which the rollout engine
    /// shares).
    pub version: String,
}

impl Default for EngineInfo {
    fn default() -> Self {
        EngineInfo {
            name: ENGINE_NAME.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

mod chat;
mod cross_check;
mod error;
mod provenance;
mod stage;
mod tokens;
mod turn;
mod version;
pub use chat::{ChatMessage, ChatToolCall, FunctionCall, Role};
pub use cross_check::{
    CrossCheckOutcome, CrossCheckRecord, DisagreementRecord, OnDisagreement, SHOWN_DISAGREEMENTS,
};
pub use error::{ErrorKind, ErrorRecord};
pub use provenance::{DriftReason, Provenance, ProvenanceLimits, RecordRescore, StepRescore};
pub use stage::{AutoCoderSummary, Diagnosis, ModelTestRun, Stage, StageRecord};
pub use tokens::{TokenData, TokenSource};
pub use turn::{ActionRecord, AttemptError, EnvStepRecord, ModelCall, SubCallRecord, TurnRecord};
pub use version::{OLDEST_READABLE_VERSION, SCHEMA_VERSION};

#[cfg(test)]
mod tests;
