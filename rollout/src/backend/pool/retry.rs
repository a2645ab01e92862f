//! What a failed env call means for the pool: retry the session elsewhere, or give up.
//!
//! The server's codes come from its one error table (`src/server/status.rs`), and
//! [`status_error`] is the one way back from a code to an [`EnvError`]. Only two codes say "this
//! server cannot take the session now, another may": UNAVAILABLE (shutting down, sandbox not set
//! up) and RESOURCE_EXHAUSTED (its session cap). A broken connection or stream, or a call past its
//! deadline, says the same of the server as a whole. Every other answer is about the request and
//! would be the same anywhere: it is returned, not retried. A program that fails is neither: it is
//! a step's outcome and never reaches this module.

use std::time::Duration;

use env_core::EnvError;
use tonic::Code;

/// Why a session could not be opened on one server.
#[derive(Debug)]
pub(crate) enum OpenFailure {
    /// The server is full: cool it down and try another.
    Busy(String),
    /// The server is unreachable, broken or refusing work: mark it down and try another.
    Unavailable(String),
    /// The request itself was refused (unknown env, bad kwargs): the same on every server.
    Fatal(EnvError),
}

impl OpenFailure {
    /// Classifies the server's own answer on the stream: its error table's code.
    pub fn from_answer(status: &tonic::Status) -> OpenFailure {
        match status.code() {
            Code::ResourceExhausted => OpenFailure::Busy(status.message().to_string()),
            Code::Unavailable => OpenFailure::Unavailable(status.message().to_string()),
            _ => OpenFailure::Fatal(status_error(status)),
        }
    }

    /// Classifies a status of the call itself (the transport's, or a server that ended the call).
    pub fn from_status(status: &tonic::Status) -> OpenFailure {
        match status.code() {
            Code::ResourceExhausted => OpenFailure::Busy(status.message().to_string()),
            code if is_transport(code) => {
                OpenFailure::Unavailable(format!("{code:?}: {}", status.message()))
            }
            _ => OpenFailure::Fatal(status_error(status)),
        }
    }
}

/// Codes that mean the server (or the connection to it) failed, not the request: UNAVAILABLE is
/// what tonic reports for refused and broken connections and what the server answers while
/// shutting down; a reset HTTP/2 stream arrives as CANCELLED, INTERNAL or UNKNOWN.
pub(crate) fn is_transport(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable
            | Code::Cancelled
            | Code::Unknown
            | Code::Internal
            | Code::DeadlineExceeded
    )
}

/// Maps a gRPC status back onto an env error: a rejected action stays the model's fault (the episode
/// shows it to the model); everything else is a failure of the machinery, re-run on `--resume`.
pub(crate) fn status_error(s: &tonic::Status) -> EnvError {
    let m = s.message().to_string();
    match s.code() {
        Code::InvalidArgument => EnvError::InvalidAction(m),
        Code::ResourceExhausted => EnvError::ResourceExhausted(m),
        code => EnvError::Infrastructure(format!("env server answered {code:?}: {m}")),
    }
}

/// The pause before attempt `attempt` (1-based) of placing a session: full-jitter exponential
/// backoff, as for model calls.
pub(crate) fn backoff(attempt: u32, initial: Duration, cap: Duration) -> Duration {
    crate::client::retry::backoff(attempt, initial, cap)
}

#[cfg(test)]
// The tests stand in for the server's answers, so they build statuses themselves.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn only_capacity_and_transport_failures_move_a_session() {
        let c = |code| OpenFailure::from_status(&tonic::Status::new(code, "m"));
        assert!(matches!(c(Code::ResourceExhausted), OpenFailure::Busy(_)));
        for code in [
            Code::Unavailable,
            Code::Cancelled,
            Code::Unknown,
            Code::DeadlineExceeded,
        ] {
            assert!(matches!(c(code), OpenFailure::Unavailable(_)), "{code:?}");
        }
        for code in [
            Code::NotFound,
            Code::InvalidArgument,
            Code::FailedPrecondition,
        ] {
            assert!(matches!(c(code), OpenFailure::Fatal(_)), "{code:?}");
        }
        let answer = |code| OpenFailure::from_answer(&tonic::Status::new(code, "m"));
        // The server's own INTERNAL (an env that panicked) is about the env, not the server.
        assert!(matches!(answer(Code::Internal), OpenFailure::Fatal(_)));
        assert!(matches!(
            answer(Code::Unavailable),
            OpenFailure::Unavailable(_)
        ));
        assert!(matches!(
            status_error(&tonic::Status::invalid_argument("no")),
            EnvError::InvalidAction(_)
        ));
    }
}
