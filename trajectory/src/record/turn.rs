//! One model call and what followed from it: the request's outcome and retries, the env steps
//! its answer caused and the policy sub-calls its program made.

use serde::{Deserialize, Serialize};

use super::{
    CrossCheckRecord, ErrorKind, ErrorRecord, ExecutionResult, Provenance, StageRecord,
    StepRescore, TokenData, Usage,
};

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
    /// What produced the step's reward (the env's `info["provenance"]`), when it was scored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// Written by `codegym rescore`: the recorded reward and provenance, and why they changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rescore: Option<StepRescore>,
    /// The program that earned the step's reward compared with the task's reference on inputs
    /// derived from the task's tests (`--cross-check`), and what was done about a disagreement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_check: Option<CrossCheckRecord>,
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
    /// Schema 3: a repository env's tool call (`bash`, `view`, `create`, `str_replace`, `submit`),
    /// its arguments as the model gave them, decoded from their JSON text (the env's action is
    /// these fields with the tool's name).
    RepoTool {
        tool: String,
        arguments: serde_json::Map<String, serde_json::Value>,
    },
}

impl ActionRecord {
    /// The program this action executes, for the actions that execute one (a code block,
    /// `run_python`, `run_code`); the model's own tests run against a solution are not one.
    pub fn code(&self) -> Option<&str> {
        match self {
            ActionRecord::CodeBlock { code, .. }
            | ActionRecord::RunPython { code }
            | ActionRecord::RunCode { code, .. } => Some(code),
            _ => None,
        }
    }
}
