//! The trajectory record: one JSON line per finished episode in a rollout dataset (written by the
//! `rollout` crate, read by `trainer-bridge`).
//!
//! These types are a file format read by other tools (the trainer bridge exports training data from
//! them), so field names are stable: a change that renames or retypes a field bumps
//! [`SCHEMA_VERSION`]. Optional fields are omitted from the JSON when absent, and readers must accept
//! their absence. Nothing here ever holds a secret: API keys are not part of any record.

use serde::{Deserialize, Serialize};

pub use env_core::{ExecutionResult, ReturnValue};

/// Version of the record layout written in every record's `schema_version`.
///
/// - 1: the first layout.
/// - 2: the optional `env_server` and `restarts` (issue 16: scale-out), and AutoCoder mode's
///   `mode: "autocoder"`, `turns[].stage`, the `model_tests` action and the record's `autocoder`
///   summary (issue 13), and execution results' `return_value`, `variables` and `error` (issue
///   12). Every addition is optional, so a version-1 record is a valid version-2
///   record without them: readers accept every version from [`OLDEST_READABLE_VERSION`] up to this.
/// - 2, also (issue 12, program-of-thought mode): a turn's optional `sub_calls`
///   ([`SubCallRecord`]) and `mode: "program_of_thought"`.
/// - 2, also (issue 24, token ids from every server family): [`TokenData`]'s optional
///   `completion_token_bytes`, and the `token_ids_source` values `llamacpp_tokens` and
///   `llamacpp_logprobs` (ids read from llama.cpp's `__verbose.tokens` or
///   `logprobs.content[].id`). Files written before stay readable.
pub const SCHEMA_VERSION: u32 = 2;

/// The oldest `schema_version` this build still reads.
pub const OLDEST_READABLE_VERSION: u32 = 1;

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
        matches!(self.stop_reason, StopReason::Error | StopReason::Cancelled)
    }
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
    /// another language; and in session mode `write_file`, `read_file`) tools.
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

/// A chat message in OpenAI's format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    /// Text content; `None` for assistant messages that only call tools.
    #[serde(default)]
    pub content: Option<String>,
    /// Tool calls of an assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ChatToolCall>>,
    /// For `role: tool`: the id of the call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Reasoning text some providers return beside the content (`reasoning_content`); kept for
    /// the record, never sent back to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

impl ChatMessage {
    /// A message with text content only.
    pub fn text(role: Role, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: Some(content.into()),
            tool_calls: None,
            tool_call_id: None,
            reasoning_content: None,
        }
    }

    /// A `role: tool` message answering the call `id`.
    pub fn tool_result(id: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            tool_call_id: Some(id.into()),
            ..ChatMessage::text(Role::Tool, content)
        }
    }
}

/// Author of a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// A function call requested by the model in a chat message (OpenAI's `tool_calls[]` entry).
/// Distinct from the env action it becomes (`env_coding::tools::ToolAction`) and from a program's
/// call of a host tool (`host_tool_calls::HostToolCall`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatToolCall {
    pub id: String,
    /// Always `"function"`.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".to_string()
}

/// The function name and its JSON-encoded arguments, as the model wrote them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// JSON text; may be malformed (the model wrote it).
    pub arguments: String,
}

/// One model call and the env steps that followed from its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// 0-based turn number.
    pub index: u32,
    /// The request and its outcome.
    pub model_call: ModelCall,
    /// Index into `messages` of the assistant message this turn produced (absent when the call
    /// failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_index: Option<usize>,
    /// Env steps caused by this answer: at most one in code-block mode, one per tool call in tools
    /// mode.
    #[serde(default)]
    pub env_steps: Vec<EnvStepRecord>,
    /// Issue 12 (program-of-thought mode): the policy calls (`llm_query`, `llm_query_batched`)
    /// the program of this turn made from inside the sandbox, in the order they finished.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sub_calls: Vec<SubCallRecord>,
    /// AutoCoder mode (schema 2): which stage of the loop this call was and what it produced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<StageRecord>,
}

/// One policy call made by a program through the `llm_query` host tools (issue 12).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubCallRecord {
    /// The tool the program called (`llm_query` or `llm_query_batched`).
    pub tool: String,
    /// The prompt, sent as the only user message.
    pub prompt: String,
    /// The answer's text (absent when the call failed: see `call.error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Latency, attempts, tokens (`usage`) and the error of the call.
    pub call: ModelCall,
}

/// One `/v1/chat/completions` call, including its retries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCall {
    /// Wall-clock time of the whole call, retries and backoff included.
    pub latency_ms: u64,
    /// HTTP attempts made (1 when the first one succeeded).
    pub attempts: u32,
    /// The seed sent with the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_seed: Option<u64>,
    /// `choices[0].finish_reason` (`stop`, `length`, `tool_calls`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// `usage` as the server reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The response's `model` field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_model: Option<String>,
    /// Every failed attempt that was retried, in order.
    #[serde(default)]
    pub retries: Vec<AttemptError>,
    /// The failure that ended the call, if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorRecord>,
    /// Token ids and logprobs, only when the server returned them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<TokenData>,
}

/// A failed attempt that was retried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptError {
    /// 1-based attempt number.
    pub attempt: u32,
    pub kind: ErrorKind,
    /// HTTP status, when there was a response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    pub message: String,
    /// How long the client waited before the next attempt.
    pub backoff_ms: u64,
    /// Whether the wait came from the server (`retry-after`, `retry-after-ms`) rather than from
    /// exponential backoff.
    pub server_delay: bool,
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

/// One env `step` and what it returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvStepRecord {
    /// What was executed.
    pub action: ActionRecord,
    /// The tool call this step answers (tools mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The execution result, when the observation was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<ExecutionResult>,
    /// A text or JSON observation (e.g. `read_file`'s content), when it was not an execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<serde_json::Value>,
    pub reward: f64,
    /// The env's `info.reward_breakdown`, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward_breakdown: Option<serde_json::Value>,
    pub terminated: bool,
    pub truncated: bool,
    /// The full `info` dict of the step.
    #[serde(default)]
    pub info: serde_json::Map<String, serde_json::Value>,
    /// Wall-clock time of the `step` call.
    pub duration_ms: u64,
    /// Set when the step call itself failed (the fields above are then defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorRecord>,
}

/// What the model asked the environment to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ActionRecord {
    /// The first fenced block of the answer in the episode's language (code-block mode).
    CodeBlock {
        code: String,
        /// Issue 14: the language it was sent in (`run_code`); absent for Python (and in v1 files).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        language: Option<String>,
    },
    /// `run_python(code)`.
    RunPython { code: String },
    /// Issue 14: `run_code(code, language)` (tools mode in an episode whose language is not
    /// Python; `language` is the episode's when the call named none).
    RunCode { code: String, language: String },
    /// `write_file(path, content)`.
    WriteFile { path: String, content: String },
    /// `read_file(path)`.
    ReadFile { path: String },
    /// A tool call that could not be decoded (unknown tool or malformed arguments); not sent to the
    /// environment.
    Invalid { name: String, arguments: String },
    /// AutoCoder mode (schema 2): the model's own pytest suite run against its solution. The
    /// step's reward is not the env's (it would score the test runner): it is 0, and the outcome is
    /// in [`StageRecord::model_tests`].
    ModelTests {
        solution: String,
        tests: String,
        requirements: Vec<String>,
    },
}

/// A failure, classified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorRecord {
    pub kind: ErrorKind,
    /// HTTP status, when there was a response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Human-readable detail (never contains credentials).
    pub message: String,
}

/// Classes of failures, used for retries, stop reasons and the summary's error counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Could not connect or the connection broke.
    Connect,
    /// The request's own timeout elapsed.
    RequestTimeout,
    /// 429 (rate limited).
    RateLimited,
    /// 429 caused by quota or billing: retrying cannot help.
    QuotaExceeded,
    /// 5xx, 408 or 409.
    ServerError,
    /// 401 or 403.
    Auth,
    /// 404 (unknown model or route).
    NotFound,
    /// The prompt does not fit the model's context window.
    ContextLength,
    /// Another 4xx.
    BadRequest,
    /// A 2xx body that is not a chat completion.
    MalformedResponse,
    /// A completion without choices or without a message.
    EmptyChoice,
    /// The episode's retry budget was used up.
    RetryBudgetExhausted,
    /// An environment call failed.
    Env,
    /// The episode's wall-clock deadline passed.
    EpisodeTimeout,
    /// The run was interrupted.
    Cancelled,
}

impl ErrorKind {
    /// The snake_case name used in JSON and summaries.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::RequestTimeout => "request_timeout",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::QuotaExceeded => "quota_exceeded",
            ErrorKind::ServerError => "server_error",
            ErrorKind::Auth => "auth",
            ErrorKind::NotFound => "not_found",
            ErrorKind::ContextLength => "context_length",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::MalformedResponse => "malformed_response",
            ErrorKind::EmptyChoice => "empty_choice",
            ErrorKind::RetryBudgetExhausted => "retry_budget_exhausted",
            ErrorKind::Env => "env",
            ErrorKind::EpisodeTimeout => "episode_timeout",
            ErrorKind::Cancelled => "cancelled",
        }
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

mod stage;
mod tokens;
pub use stage::{AutoCoderSummary, Diagnosis, ModelTestRun, Stage, StageRecord};
pub use tokens::{TokenData, TokenSource};

#[cfg(test)]
mod tests;
