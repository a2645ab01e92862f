//! One episode's session on one server: a `Session` stream (codegym.v1), opened with `make` and
//! kept for the episode's whole life, because the episode's state lives on that server.
//!
//! Every call has a deadline. Requests carry ids and the server answers in order; [`recv`] is the
//! one place that reads the server's messages. When the stream breaks, ends, or a call passes its
//! deadline, or the server answers UNAVAILABLE, the session is *lost*: the error says so,
//! [`PooledSession::lost`] tells the episode (which restarts on another server), and later calls
//! fail at once.
//!
//! [`recv`]: PooledSession::recv

use std::net::SocketAddr;
use std::time::Duration;

use env_core::{EnvError, Info, Kwargs, Options, Step, Value};
use proto::convert;
use proto::v1::env_service_client::EnvServiceClient;
use proto::v1::{self, session_request::Kind as Req, session_response::Kind as Resp};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use super::placement::Lease;
use super::retry::{OpenFailure, status_error};

/// A call that did not get its answer.
enum CallError {
    /// The server answered with an error (its status table's code).
    Answer(tonic::Status),
    /// No answer: the stream broke or ended, or the deadline passed.
    Lost(String),
}

/// A session pinned to one server.
pub struct PooledSession {
    lease: Lease,
    tx: mpsc::Sender<v1::SessionRequest>,
    inbound: Streaming<v1::SessionResponse>,
    next_id: u64,
    deadline: Duration,
    lost: Option<String>,
}

impl std::fmt::Debug for PooledSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PooledSession({})", self.server())
    }
}

impl PooledSession {
    /// Opens the stream on the leased server and makes the env there.
    pub(crate) async fn open(
        lease: Lease,
        env_id: &str,
        kwargs: &Kwargs,
        deadline: Duration,
    ) -> Result<PooledSession, OpenFailure> {
        let mut client = EnvServiceClient::new(lease.server().channel.clone());
        // One request is in flight at a time; a little room lets `close` follow without waiting.
        let (tx, rx) = mpsc::channel(4);
        let inbound =
            match tokio::time::timeout(deadline, client.session(ReceiverStream::new(rx))).await {
                Ok(Ok(response)) => response.into_inner(),
                Ok(Err(status)) => return Err(OpenFailure::from_status(&status)),
                Err(_) => {
                    return Err(OpenFailure::Unavailable(format!(
                        "no answer to opening a session within {deadline:?}"
                    )));
                }
            };
        let mut session = PooledSession {
            lease,
            tx,
            inbound,
            next_id: 0,
            deadline,
            lost: None,
        };
        let make = Req::Make(v1::MakeRequest {
            env_id: env_id.to_string(),
            kwargs_json: convert::json_text(kwargs),
        });
        match session.call(make).await {
            Ok(Resp::Make(_)) => Ok(session),
            Ok(other) => Err(OpenFailure::Unavailable(format!(
                "the server answered make with {other:?}"
            ))),
            Err(CallError::Answer(status)) => Err(OpenFailure::from_answer(&status)),
            Err(CallError::Lost(why)) => Err(OpenFailure::Unavailable(why)),
        }
    }

    /// The server this session lives on.
    pub fn server(&self) -> SocketAddr {
        self.lease.server().addr
    }

    /// Why the session was lost with its server, if it was.
    pub fn lost(&self) -> Option<&str> {
        self.lost.as_deref()
    }

    pub async fn reset(
        &mut self,
        seed: Option<u64>,
        options: &Options,
    ) -> Result<(Value, Info), EnvError> {
        let request = Req::Reset(v1::ResetRequest {
            session_id: String::new(),
            seed,
            options_json: convert::json_text(options),
        });
        match self.call_env(request).await? {
            Resp::Reset(r) => convert::reset_from_proto(r)
                .map_err(|e| EnvError::Infrastructure(format!("bad reset response: {e}"))),
            other => Err(self.unexpected("reset", &other)),
        }
    }

    pub async fn step(&mut self, action: Value) -> Result<Step<Value>, EnvError> {
        let request = Req::Step(v1::StepRequest {
            session_id: String::new(),
            action: Some(convert::value_to_proto(&action)),
        });
        match self.call_env(request).await? {
            Resp::Step(r) => convert::step_from_proto(r)
                .map_err(|e| EnvError::Infrastructure(format!("bad step response: {e}"))),
            other => Err(self.unexpected("step", &other)),
        }
    }

    /// Closes the server's session and ends the stream (ending the stream alone would close it
    /// too; the explicit close confirms it).
    pub async fn close(mut self) -> Result<(), EnvError> {
        if self.lost.is_some() {
            return Ok(());
        }
        let request = Req::Close(v1::CloseRequest {
            session_id: String::new(),
        });
        match self.call_env(request).await? {
            Resp::Close(_) => Ok(()),
            other => Err(self.unexpected("close", &other)),
        }
    }

    /// A call whose failure is an [`EnvError`]; a lost server or an UNAVAILABLE answer (the
    /// server cannot run the session any more) marks the session lost.
    async fn call_env(&mut self, request: Req) -> Result<Resp, EnvError> {
        if let Some(why) = &self.lost {
            return Err(self.lost_error(why));
        }
        match self.call(request).await {
            Ok(resp) => Ok(resp),
            Err(CallError::Answer(status)) if status.code() == tonic::Code::Unavailable => {
                let why = format!("the server answered UNAVAILABLE: {}", status.message());
                Err(self.lose(why))
            }
            Err(CallError::Answer(status)) => Err(status_error(&status)),
            Err(CallError::Lost(why)) => Err(self.lose(why)),
        }
    }

    fn lose(&mut self, why: String) -> EnvError {
        tracing::warn!(server = %self.server(), reason = %why, "env session lost");
        let err = self.lost_error(&why);
        self.lost = Some(why);
        err
    }

    fn lost_error(&self, why: &str) -> EnvError {
        EnvError::Infrastructure(format!("env server {} lost: {why}", self.server()))
    }

    fn unexpected(&mut self, call: &str, got: &Resp) -> EnvError {
        // A server that answers out of turn cannot be trusted with the rest of the episode.
        self.lose(format!("the server answered {call} with {got:?}"))
    }

    /// Sends one request and waits for its answer, within the deadline.
    async fn call(&mut self, kind: Req) -> Result<Resp, CallError> {
        let request_id = self.next_id;
        self.next_id += 1;
        let request = v1::SessionRequest {
            request_id,
            kind: Some(kind),
        };
        let deadline = self.deadline;
        let exchange = async {
            self.tx
                .send(request)
                .await
                .map_err(|_| CallError::Lost("the stream to the server is closed".into()))?;
            self.recv(request_id).await
        };
        match tokio::time::timeout(deadline, exchange).await {
            Ok(result) => result,
            Err(_) => Err(CallError::Lost(format!("no answer within {deadline:?}"))),
        }
    }

    /// The one place that reads the server's messages: the answer to `request_id`.
    async fn recv(&mut self, request_id: u64) -> Result<Resp, CallError> {
        loop {
            let message = match self.inbound.message().await {
                Ok(Some(m)) => m,
                Ok(None) => return Err(CallError::Lost("the server ended the stream".into())),
                Err(status) => {
                    return Err(CallError::Lost(format!(
                        "the stream broke ({:?}: {})",
                        status.code(),
                        status.message()
                    )));
                }
            };
            if message.request_id != request_id {
                // Answers come in order; an older one belongs to a call abandoned at its deadline
                // (which lost the session), so this cannot happen on a live session.
                tracing::debug!(
                    got = message.request_id,
                    want = request_id,
                    "skipping a stale answer"
                );
                continue;
            }
            return match message.kind {
                Some(Resp::Error(e)) => Err(CallError::Answer(answered_status(e))),
                Some(kind) => Ok(kind),
                None => Err(CallError::Lost("an answer without a kind".into())),
            };
        }
    }
}

/// The status the server answered on the stream, rebuilt as it was sent (code and message): the
/// server's error table chose it, so this is no status of the client's own making.
#[allow(clippy::disallowed_methods)]
fn answered_status(e: v1::Error) -> tonic::Status {
    tonic::Status::new(tonic::Code::from(e.code), e.message)
}
