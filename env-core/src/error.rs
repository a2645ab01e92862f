//! Gymnasium's error vocabulary as one `thiserror` enum.
//!
//! Every crate above env-core reports environment failures through [`EnvError`]; the server maps each
//! variant to exactly one gRPC status code (see the root crate's `server::status`).

/// Why an environment call failed. A failing *program* inside a coding env is an outcome, not an error:
/// these are failures of the call itself.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EnvError {
    /// The id is not of the form `[ns/]Name[-vN]`.
    #[error("malformed environment id {0:?}: expected `ns/Name-vN`")]
    MalformedId(String),
    /// No environment with this namespace and name (Gymnasium's `NameNotFound`).
    #[error("no environment named {name:?}{}", suggestion_suffix(.suggestion))]
    NameNotFound {
        name: String,
        suggestion: Option<String>,
    },
    /// The name exists but not at this version (Gymnasium's `VersionNotFound`).
    #[error("environment {name:?} has no version v{version}; registered versions: {available:?}")]
    VersionNotFound {
        name: String,
        version: u32,
        available: Vec<u32>,
    },
    /// Gymnasium's `UnregisteredEnv`: a fully qualified id that is not registered.
    #[error("environment {0:?} is not registered")]
    UnregisteredEnv(String),
    /// An id registered twice.
    #[error("environment {0:?} is already registered")]
    AlreadyRegistered(String),
    /// `step` before the first `reset` (Gymnasium's `ResetNeeded`).
    #[error("cannot call step() before reset()")]
    ResetNeeded,
    /// `step` after the episode terminated or was truncated, without a `reset` in between.
    #[error("the episode has ended (terminated or truncated): call reset() before step()")]
    EpisodeEnded,
    /// The action is not an element of the action space, or cannot be decoded.
    #[error("invalid action: {0}")]
    InvalidAction(String),
    /// Bad `make` kwargs.
    #[error("invalid kwargs: {0}")]
    InvalidKwargs(String),
    /// Bad `reset` options.
    #[error("invalid options: {0}")]
    InvalidOptions(String),
    /// Any call after `close` (Gymnasium's `ClosedEnvironmentError`).
    #[error("the environment is closed")]
    ClosedEnvironment,
    /// The environment does not implement this operation (for example batch `Evaluate`).
    #[error("not supported: {0}")]
    Unsupported(String),
    /// The request is valid but this deployment cannot serve it as it stands: a language whose
    /// toolchain is not installed here (issue 14), a task's package that policy refuses or that
    /// cannot be installed (issue 13), named in the message. Not retryable as is.
    #[error("failed precondition: {0}")]
    FailedPrecondition(String),
    /// A resource limit of the host was reached (for example the sandbox's concurrency cap).
    #[error("resource exhausted: {0}")]
    ResourceExhausted(String),
    /// A failure of the machinery behind the env (a sandbox that could not be set up, an IO error).
    /// Retrying may succeed; this is never a reward of zero.
    #[error("environment infrastructure failure: {0}")]
    Infrastructure(String),
    /// The environment's code panicked during this call. The env is lost (its state is unknown):
    /// later calls fail with [`EnvError::ClosedEnvironment`]. A bug, never a reward.
    #[error("the environment panicked: {0}")]
    Panicked(String),
}

fn suggestion_suffix(s: &Option<String>) -> String {
    s.as_ref()
        .map(|s| format!("; did you mean {s:?}?"))
        .unwrap_or_default()
}

/// Shorthand for results of environment calls.
pub type Result<T, E = EnvError> = std::result::Result<T, E>;
