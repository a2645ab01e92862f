//! The one error table: every failure of every front door, and what each protocol answers for it.
//!
//! Every handler, gRPC or HTTP, fails with a [`ServerError`]; env-core's [`EnvError`] and the
//! protocol's [`ConvertError`] convert into it. [`TABLE`] gives each kind of failure ([`ErrorKind`])
//! its gRPC code, its HTTP status (the same on every HTTP facade), whether retrying may succeed, and
//! the OpenEnv WebSocket error code; the renderers below ([`Status`], `proto::v1::Error`, the
//! FastAPI `{"detail": ...}` response, the OpenEnv error frame, SandboxFusion's `SandboxError`)
//! read only the table. Statuses are built nowhere else: clippy's `disallowed-methods` refuses
//! `tonic::Status` constructors outside this module.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use env_core::EnvError;
use proto::convert::ConvertError;
use serde_json::{Map, Value as Json, json};
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
    #[error("this client already holds {0} sessions (http.max_sessions_per_client)")]
    ClientCapReached(usize),
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
    #[error(
        "host tools (the `tools` kwarg) are served only over the Session stream (EnvService/Session), which forwards their calls to the client; unary Make cannot"
    )]
    ToolsNeedStream,
    /// A bug of the server's own (not of the request, not of the machinery behind an env).
    #[error("internal error: {0}")]
    Internal(String),
    /// An HTTP request body that is not JSON or does not fit the endpoint's model; the value is
    /// FastAPI's `detail` (a list of pydantic errors, or a sentence).
    #[error("invalid request body: {0}")]
    InvalidBody(Json),
    /// An HTTP request body that could not be read (not the size cap).
    #[error("cannot read the request body: {0}")]
    BadBody(String),
    #[error("the request body is larger than the server's limit: {0}")]
    BodyTooLarge(String),
    #[error("Not authenticated")]
    Unauthenticated,
    #[error("Not Found")]
    NoRoute,
    /// SandboxFusion's wording: a dataset name is an "eval class" there.
    #[error("no eval class found for dataset {0}")]
    UnknownDataset(String),
    #[error("no prompt with id {id} in dataset {dataset}")]
    UnknownPrompt { dataset: String, id: String },
}

/// Declares [`ErrorKind`] and its list [`ErrorKind::ALL`] from one list of names.
macro_rules! kinds {
    ($($kind:ident),* $(,)?) => {
        /// Every kind of failure: each [`ServerError`] variant, env-core's errors one by one.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ErrorKind {
            $($kind),*
        }

        impl ErrorKind {
            /// Every kind, in declaration order (the table's order).
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$kind),*];
        }
    };
}

kinds!(
    MalformedId,
    NameNotFound,
    VersionNotFound,
    UnregisteredEnv,
    AlreadyRegistered,
    ResetNeeded,
    EpisodeEnded,
    InvalidAction,
    InvalidKwargs,
    InvalidOptions,
    ClosedEnvironment,
    Unsupported,
    FailedPrecondition,
    ResourceExhausted,
    Infrastructure,
    Panicked,
    Convert,
    SessionNotFound,
    TooManySessions,
    ClientCapReached,
    NoSession,
    SessionExists,
    EmptyRequest,
    TooLarge,
    BadPageToken,
    DeadlineExceeded,
    EnvPanicked,
    ShuttingDown,
    ToolsNeedStream,
    Internal,
    InvalidBody,
    BadBody,
    BodyTooLarge,
    Unauthenticated,
    NoRoute,
    UnknownDataset,
    UnknownPrompt,
);

/// One row of the table.
#[derive(Debug)]
pub struct Row {
    pub kind: ErrorKind,
    pub grpc: Code,
    /// The HTTP status on every facade (OpenEnv, SandboxFusion's judge and dataset endpoints).
    pub http: u16,
    /// Whether the same request may succeed later (after a backoff, or on another replica).
    pub retry: bool,
    /// The OpenEnv WebSocket error code when the failure answers a message of an open session.
    pub ws: &'static str,
    /// The OpenEnv WebSocket error code when the failure refuses a new session (admission).
    pub ws_refused: &'static str,
}

const VALIDATION: &str = "VALIDATION_ERROR";
const EXECUTION: &str = "EXECUTION_ERROR";
const SESSION: &str = "SESSION_ERROR";
const CAPACITY: &str = "CAPACITY_REACHED";
const FACTORY: &str = "FACTORY_ERROR";

const fn row(kind: ErrorKind, grpc: Code, http: u16, ws: &'static str) -> Row {
    let retry = matches!(
        grpc,
        Code::Unavailable | Code::ResourceExhausted | Code::DeadlineExceeded
    );
    // A refused session is "come back later" when the server is full or draining, else the
    // factory (make) failed.
    let ws_refused = match kind {
        ErrorKind::TooManySessions | ErrorKind::ClientCapReached | ErrorKind::ShuttingDown => {
            CAPACITY
        }
        _ => FACTORY,
    };
    Row {
        kind,
        grpc,
        http,
        retry,
        ws,
        ws_refused,
    }
}

/// The table, in [`ErrorKind`] order (a unit test checks the order and that it is total).
/// HTTP's 422 for invalid input is FastAPI's, which OpenEnv's and SandboxFusion's clients expect;
/// SandboxFusion answers an unknown dataset with 400.
pub static TABLE: [Row; 37] = {
    use ErrorKind as K;
    [
        row(K::MalformedId, Code::InvalidArgument, 422, VALIDATION),
        row(K::NameNotFound, Code::NotFound, 404, EXECUTION),
        row(K::VersionNotFound, Code::NotFound, 404, EXECUTION),
        row(K::UnregisteredEnv, Code::NotFound, 404, EXECUTION),
        row(K::AlreadyRegistered, Code::AlreadyExists, 409, EXECUTION),
        row(K::ResetNeeded, Code::FailedPrecondition, 409, EXECUTION),
        row(K::EpisodeEnded, Code::FailedPrecondition, 409, EXECUTION),
        row(K::InvalidAction, Code::InvalidArgument, 422, VALIDATION),
        row(K::InvalidKwargs, Code::InvalidArgument, 422, VALIDATION),
        row(K::InvalidOptions, Code::InvalidArgument, 422, VALIDATION),
        row(
            K::ClosedEnvironment,
            Code::FailedPrecondition,
            409,
            EXECUTION,
        ),
        row(K::Unsupported, Code::Unimplemented, 501, EXECUTION),
        row(
            K::FailedPrecondition,
            Code::FailedPrecondition,
            409,
            EXECUTION,
        ),
        row(
            K::ResourceExhausted,
            Code::ResourceExhausted,
            429,
            EXECUTION,
        ),
        // The sandbox or another resource behind the env failed: retryable by definition.
        row(K::Infrastructure, Code::Unavailable, 503, EXECUTION),
        // A bug in the env, not in the request: not retryable as is; the session is lost.
        row(K::Panicked, Code::Internal, 500, SESSION),
        row(K::Convert, Code::InvalidArgument, 422, VALIDATION),
        row(K::SessionNotFound, Code::NotFound, 404, EXECUTION),
        row(K::TooManySessions, Code::ResourceExhausted, 429, CAPACITY),
        row(K::ClientCapReached, Code::ResourceExhausted, 429, CAPACITY),
        row(K::NoSession, Code::FailedPrecondition, 409, EXECUTION),
        row(K::SessionExists, Code::FailedPrecondition, 409, EXECUTION),
        row(K::EmptyRequest, Code::InvalidArgument, 422, VALIDATION),
        row(K::TooLarge, Code::InvalidArgument, 422, VALIDATION),
        row(K::BadPageToken, Code::InvalidArgument, 422, VALIDATION),
        row(K::DeadlineExceeded, Code::DeadlineExceeded, 504, EXECUTION),
        row(K::EnvPanicked, Code::Internal, 500, SESSION),
        row(K::ShuttingDown, Code::Unavailable, 503, SESSION),
        row(K::ToolsNeedStream, Code::FailedPrecondition, 409, EXECUTION),
        row(K::Internal, Code::Internal, 500, EXECUTION),
        row(K::InvalidBody, Code::InvalidArgument, 422, VALIDATION),
        row(K::BadBody, Code::InvalidArgument, 400, VALIDATION),
        // gRPC answers an oversized message with OUT_OF_RANGE (tonic's decoder limit).
        row(K::BodyTooLarge, Code::OutOfRange, 413, VALIDATION),
        row(K::Unauthenticated, Code::Unauthenticated, 401, EXECUTION),
        // An unknown route is gRPC's unknown method.
        row(K::NoRoute, Code::Unimplemented, 404, EXECUTION),
        row(K::UnknownDataset, Code::NotFound, 400, EXECUTION),
        row(K::UnknownPrompt, Code::NotFound, 404, EXECUTION),
    ]
};

impl ServerError {
    /// Which row of the table this failure is.
    pub fn kind(&self) -> ErrorKind {
        use ErrorKind as K;
        match self {
            ServerError::Env(e) => match e {
                EnvError::MalformedId(_) => K::MalformedId,
                EnvError::NameNotFound { .. } => K::NameNotFound,
                EnvError::VersionNotFound { .. } => K::VersionNotFound,
                EnvError::UnregisteredEnv(_) => K::UnregisteredEnv,
                EnvError::AlreadyRegistered(_) => K::AlreadyRegistered,
                EnvError::ResetNeeded => K::ResetNeeded,
                EnvError::EpisodeEnded => K::EpisodeEnded,
                EnvError::InvalidAction(_) => K::InvalidAction,
                EnvError::InvalidKwargs(_) => K::InvalidKwargs,
                EnvError::InvalidOptions(_) => K::InvalidOptions,
                EnvError::ClosedEnvironment => K::ClosedEnvironment,
                EnvError::Unsupported(_) => K::Unsupported,
                EnvError::FailedPrecondition(_) => K::FailedPrecondition,
                EnvError::ResourceExhausted(_) => K::ResourceExhausted,
                EnvError::Infrastructure(_) => K::Infrastructure,
                EnvError::Panicked(_) => K::Panicked,
            },
            ServerError::Convert(_) => K::Convert,
            ServerError::SessionNotFound(_) => K::SessionNotFound,
            ServerError::TooManySessions(_) => K::TooManySessions,
            ServerError::ClientCapReached(_) => K::ClientCapReached,
            ServerError::NoSession => K::NoSession,
            ServerError::SessionExists => K::SessionExists,
            ServerError::EmptyRequest => K::EmptyRequest,
            ServerError::TooLarge { .. } => K::TooLarge,
            ServerError::BadPageToken(_) => K::BadPageToken,
            ServerError::DeadlineExceeded(_) => K::DeadlineExceeded,
            ServerError::EnvPanicked => K::EnvPanicked,
            ServerError::ShuttingDown => K::ShuttingDown,
            ServerError::ToolsNeedStream => K::ToolsNeedStream,
            ServerError::Internal(_) => K::Internal,
            ServerError::InvalidBody(_) => K::InvalidBody,
            ServerError::BadBody(_) => K::BadBody,
            ServerError::BodyTooLarge(_) => K::BodyTooLarge,
            ServerError::Unauthenticated => K::Unauthenticated,
            ServerError::NoRoute => K::NoRoute,
            ServerError::UnknownDataset(_) => K::UnknownDataset,
            ServerError::UnknownPrompt { .. } => K::UnknownPrompt,
        }
    }

    /// This failure's row.
    pub fn row(&self) -> &'static Row {
        let kind = self.kind();
        // The table is in `ErrorKind` order (tested), so this finds the row at once.
        TABLE
            .get(kind as usize)
            .filter(|row| row.kind == kind)
            .or_else(|| TABLE.iter().find(|row| row.kind == kind))
            .unwrap_or(&TABLE[ErrorKind::Internal as usize])
    }

    /// The gRPC status code: the protocol's error contract.
    pub fn code(&self) -> Code {
        self.row().grpc
    }

    /// The HTTP status on every facade.
    pub fn http_status(&self) -> StatusCode {
        StatusCode::from_u16(self.row().http).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// FastAPI's `detail`: the pydantic errors of an invalid body, else the message.
    fn detail(&self) -> Json {
        match self {
            ServerError::InvalidBody(detail) => detail.clone(),
            other => json!(other.to_string()),
        }
    }

    /// An OpenEnv WebSocket error frame for this failure: `refused` when it refuses a new session
    /// (those frames end the socket), else when it answers a message of an open one. `extra`
    /// fields (e.g. the caps) go beside the code and message.
    pub fn ws_frame(&self, refused: bool, extra: Map<String, Json>) -> Json {
        let row = self.row();
        let code = if refused { row.ws_refused } else { row.ws };
        let message = match code {
            VALIDATION => format!("Invalid message: {self}"),
            _ => self.to_string(),
        };
        let mut data = extra;
        if code == VALIDATION {
            data.insert(
                "errors".into(),
                json!([{"msg": self.to_string(), "type": "value_error"}]),
            );
        }
        data.insert("message".into(), json!(message));
        data.insert("code".into(), json!(code));
        json!({"type": "error", "data": data})
    }

    /// Whether SandboxFusion's `/run_code` reports this failure in its body (HTTP 200, status
    /// `SandboxError`) rather than with the table's status: a failure of the run itself (the
    /// machinery, a language this server cannot run, a bad file), as SandboxFusion reports it.
    pub fn reported_in_judge_body(&self) -> bool {
        matches!(self, ServerError::Env(_))
    }

    /// Whether a WebSocket session can go on after this failure answered one of its messages.
    pub fn ws_keeps_session(&self) -> bool {
        self.row().ws != SESSION
    }
}

/// A WebSocket protocol error frame that is no failure of the table (a frame that is not JSON, a
/// message type OpenEnv does not have): the session goes on.
pub fn ws_protocol_frame(code: &'static str, message: impl std::fmt::Display) -> Json {
    json!({"type": "error", "data": {"code": code, "message": message.to_string()}})
}

/// Every HTTP facade's error shape: FastAPI's `{"detail": ...}` with the table's status.
impl IntoResponse for ServerError {
    fn into_response(self) -> Response {
        let mut response = (
            self.http_status(),
            axum::Json(json!({"detail": self.detail()})),
        )
            .into_response();
        if matches!(self, ServerError::Unauthenticated) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if matches!(self, ServerError::BodyTooLarge(_)) {
            // The rest of the body was never read, so the connection cannot carry another
            // request: say so, or a client that reuses it sees its next request broken off.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

// Both conversions are where a failure leaves the gRPC server (a unary status, an error on a
// stream), so errors are counted here, once each.
impl From<ServerError> for Status {
    #[allow(clippy::disallowed_methods)] // the one place statuses are built
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
mod tests;
