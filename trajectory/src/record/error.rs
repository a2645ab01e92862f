//! Failures, classified: what ended an episode, a model call or an env step, and what was retried.

use serde::{Deserialize, Serialize};

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
