//! What the fake server answers: rules matched against the request, faults injected by request index
//! or by rate, latency, and whether to return logprobs and token ids.

use serde::{Deserialize, Serialize};

/// The fake server's behaviour.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FakeScript {
    /// Time from a request's arrival to its answer (faults included), in milliseconds.
    pub latency_ms: u64,
    /// Checked in order; the first matching rule answers.
    pub rules: Vec<Rule>,
    /// The answer when no rule matches.
    pub default_reply: Reply,
    /// Faults, checked before rules; the first that fires answers.
    pub faults: Vec<FaultRule>,
    /// Seed of the generator behind rate-based faults.
    pub fault_seed: u64,
    /// The `model` field of responses; `None` echoes the requested model.
    pub served_model: Option<String>,
    /// Return `logprobs.content` when the request asks for `logprobs`.
    pub support_logprobs: bool,
    /// Return `prompt_token_ids` and `token_ids` when the request has `return_token_ids: true`.
    pub support_token_ids: bool,
    /// Keep every request body (for assertions on seeds, tools, sampling params).
    pub record_requests: bool,
    /// Answer requests carrying `response_format` with a 400, as endpoints without structured
    /// outputs do (AutoCoder's fenced-JSON fallback).
    pub reject_response_format: bool,
}

/// A condition on the request and the answer to give.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Some user message contains this text (the task prompt, say).
    #[serde(default)]
    pub prompt_contains: Option<String>,
    /// The request's turn: the number of assistant messages already in it.
    #[serde(default)]
    pub turn: Option<usize>,
    pub reply: Reply,
}

impl Rule {
    /// Whether the rule applies to a request with these user texts at this turn.
    pub fn matches(&self, user_texts: &[&str], turn: usize) -> bool {
        self.turn.is_none_or(|t| t == turn)
            && self
                .prompt_contains
                .as_deref()
                .is_none_or(|p| user_texts.iter().any(|u| u.contains(p)))
    }
}

/// An answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// Assistant text (`finish_reason: stop`).
    Text(String),
    /// A python program wrapped in a fenced block with a sentence around it.
    Code(String),
    /// One tool call (`finish_reason: tool_calls`); `arguments` is sent JSON-encoded.
    ToolCall {
        name: String,
        arguments: serde_json::Value,
    },
    /// Tool calls in one message (`finish_reason: tool_calls`), each `(name, arguments)` with its
    /// arguments text sent as it is: not JSON-encoded, so it may be what no JSON parser reads (a
    /// model's malformed call).
    RawToolCalls(Vec<(String, String)>),
    /// A JSON answer, as a model following the request's format gives it: the bare JSON text when
    /// the request carries `response_format`, else a fenced ```json block with a sentence around it.
    Json(serde_json::Value),
}

impl Default for Reply {
    fn default() -> Self {
        Reply::Text("I cannot solve this.".to_string())
    }
}

impl Reply {
    /// The python program answered in a fenced block.
    pub fn code(program: &str) -> Reply {
        Reply::Code(program.to_string())
    }

    /// A `run_python` tool call.
    pub fn run_python(program: &str) -> Reply {
        Reply::ToolCall {
            name: "run_python".to_string(),
            arguments: serde_json::json!({ "code": program }),
        }
    }
}

/// A fault and when it fires.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRule {
    pub fault: Fault,
    /// 0-based global request indices at which it fires.
    #[serde(default)]
    pub at_requests: Vec<u64>,
    /// Probability of firing on any request.
    #[serde(default)]
    pub rate: f64,
}

impl FaultRule {
    /// Fires at exactly these request indices.
    pub fn at(fault: Fault, indices: impl IntoIterator<Item = u64>) -> Self {
        FaultRule {
            fault,
            at_requests: indices.into_iter().collect(),
            rate: 0.0,
        }
    }

    /// Fires with probability `rate` on every request.
    pub fn with_rate(fault: Fault, rate: f64) -> Self {
        FaultRule {
            fault,
            at_requests: Vec::new(),
            rate,
        }
    }
}

/// A misbehaviour of the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// 429 with optional `retry-after` (seconds) and `retry-after-ms` headers.
    RateLimited {
        retry_after_secs: Option<u64>,
        retry_after_ms: Option<u64>,
    },
    /// 429 for an exhausted quota (not retryable).
    QuotaExceeded,
    /// This status with an error body (500, 503, 408, ...).
    Status(u16),
    /// 400 "maximum context length" error.
    ContextLength,
    /// 401.
    Unauthorized,
    /// Never answers (the client's timeout must fire).
    Hang,
    /// 200 with a body that is not JSON.
    Malformed,
    /// 200 with `choices: []`.
    EmptyChoices,
    /// 500 with `x-should-retry: false`.
    NoRetryHeader,
}
