//! The one place where errors become gRPC statuses.
//!
//! Every handler returns [`ServerError`]; env-core's [`EnvError`] and the protocol's [`ConvertError`]
//! convert into it, and [`ServerError::code`] is the single table from failure to status code.

use env_core::EnvError;
use proto::convert::ConvertError;
use tonic::{Code, Status};

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error("malformed request: {0}")]
    Convert(#[from] ConvertError),
    #[error("unknown or closed session {0:?}")]
    SessionNotFound(String),
    #[error("session limit reached ({0} sessions open); close sessions or raise --max-sessions")]
    TooManySessions(usize),
    #[error("this stream has no session yet: send `make` first")]
    NoSession,
    #[error("this stream already has a session; one stream serves one session")]
    SessionExists,
    #[error("request has no operation (the `kind` oneof is unset)")]
    EmptyRequest,
    #[error("{what} has {got} items; the limit is {limit}")]
    TooLarge {
        what: &'static str,
        got: usize,
        limit: usize,
    },
    #[error("invalid page_token {0:?}: pass the next_page_token of the previous page")]
    BadPageToken(String),
    #[error("deadline exceeded after {0:?}")]
    DeadlineExceeded(std::time::Duration),
    #[error("the environment panicked while handling the request; the session was closed")]
    EnvPanicked,
    #[error("the server is shutting down")]
    ShuttingDown,
    /// Issue 12.
    #[error(
        "host tools (the `tools` kwarg) are served only over the Session stream (EnvService/Session), which forwards their calls to the client; unary Make cannot"
    )]
    ToolsNeedStream,
}

impl ServerError {
    /// The status code for this failure: the protocol's error contract.
    pub fn code(&self) -> Code {
        match self {
            ServerError::Env(e) => env_code(e),
            ServerError::Convert(_)
            | ServerError::EmptyRequest
            | ServerError::TooLarge { .. }
            | ServerError::BadPageToken(_) => Code::InvalidArgument,
            ServerError::SessionNotFound(_) => Code::NotFound,
            ServerError::TooManySessions(_) => Code::ResourceExhausted,
            ServerError::NoSession | ServerError::SessionExists | ServerError::ToolsNeedStream => {
                Code::FailedPrecondition
            }
            ServerError::DeadlineExceeded(_) => Code::DeadlineExceeded,
            ServerError::EnvPanicked => Code::Internal,
            ServerError::ShuttingDown => Code::Unavailable,
        }
    }
}

fn env_code(e: &EnvError) -> Code {
    match e {
        EnvError::MalformedId(_)
        | EnvError::InvalidAction(_)
        | EnvError::InvalidKwargs(_)
        | EnvError::InvalidOptions(_) => Code::InvalidArgument,
        EnvError::NameNotFound { .. }
        | EnvError::VersionNotFound { .. }
        | EnvError::UnregisteredEnv(_) => Code::NotFound,
        EnvError::AlreadyRegistered(_) => Code::AlreadyExists,
        EnvError::ResetNeeded
        | EnvError::EpisodeEnded
        | EnvError::ClosedEnvironment
        | EnvError::FailedPrecondition(_) => Code::FailedPrecondition,
        EnvError::Unsupported(_) => Code::Unimplemented,
        EnvError::ResourceExhausted(_) => Code::ResourceExhausted,
        // Retryable by definition: the sandbox or another resource behind the env failed.
        EnvError::Infrastructure(_) => Code::Unavailable,
        // A bug in the env, not in the request: not retryable as is.
        EnvError::Panicked(_) => Code::Internal,
    }
}

// Both conversions are where a failure leaves the server (a unary status, an error on a stream),
// so errors are counted here, once each.
impl From<ServerError> for Status {
    fn from(e: ServerError) -> Status {
        crate::metrics::grpc_error(e.code());
        Status::new(e.code(), e.to_string())
    }
}

impl From<&ServerError> for proto::v1::Error {
    fn from(e: &ServerError) -> Self {
        crate::metrics::grpc_error(e.code());
        proto::v1::Error {
            code: e.code() as i32,
            message: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_contract_code_is_reachable() {
        let cases = [
            (
                ServerError::from(EnvError::UnregisteredEnv("x/Y-v0".into())),
                Code::NotFound,
            ),
            (ServerError::SessionNotFound("s".into()), Code::NotFound),
            (EnvError::ResetNeeded.into(), Code::FailedPrecondition),
            (EnvError::EpisodeEnded.into(), Code::FailedPrecondition),
            (
                EnvError::FailedPrecondition("cannot install x".into()).into(),
                Code::FailedPrecondition,
            ),
            (
                EnvError::InvalidAction("a".into()).into(),
                Code::InvalidArgument,
            ),
            (
                ConvertError::Missing("action").into(),
                Code::InvalidArgument,
            ),
            (ServerError::TooManySessions(1), Code::ResourceExhausted),
            (
                ServerError::DeadlineExceeded(std::time::Duration::ZERO),
                Code::DeadlineExceeded,
            ),
            (
                EnvError::Unsupported("evaluate".into()).into(),
                Code::Unimplemented,
            ),
        ];
        for (err, code) in cases {
            assert_eq!(err.code(), code, "{err}");
            assert_eq!(Status::from(err).code(), code);
        }
    }
}
