//! The `Session` RPC: one session over one bidirectional stream.
//!
//! Requests are handled strictly in order, one response each, so clients may pipeline freely. The
//! stream's task owns the env (no lock) and awaits its calls itself. When the client's side ends,
//! errors, or the client vanishes, or the server shuts down, the session is closed; a request already
//! being handled finishes first. An env that panics is dropped: the stream goes on without a session.

use std::sync::Arc;

use env_core::{AsyncEnv, EnvError, EnvFuture};
use proto::convert;
use proto::v1::{self, session_request::Kind as Req, session_response::Kind as Resp};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};
use tracing::Instrument;

use super::State;
use super::service::{make_env, make_response, parse_action, parse_reset, reset_response};
use super::sessions::Permit;
use super::status::ServerError;

/// Responses buffered ahead of a slow reader; beyond this the stream applies backpressure.
const BUFFER: usize = 64;

struct Owned {
    env: Box<dyn AsyncEnv>,
    _permit: Permit,
}

/// Starts the stream's task and returns the response stream.
pub fn spawn(
    state: Arc<State>,
    mut inbound: Streaming<v1::SessionRequest>,
    span: tracing::Span,
) -> ReceiverStream<Result<v1::SessionResponse, Status>> {
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(
        async move {
            let mut session: Option<Owned> = None;
            loop {
                let next = tokio::select! {
                    biased;
                    _ = state.shutdown.cancelled() => break,
                    _ = tx.closed() => break,
                    next = inbound.message() => next,
                };
                let request = match next {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    Err(status) => {
                        tracing::debug!(%status, "session stream ended by the client");
                        break;
                    }
                };
                let request_id = request.request_id;
                let kind = match handle(&state, &mut session, request.kind).await {
                    Ok(kind) => kind,
                    Err(e) => Resp::Error((&e).into()),
                };
                let response = v1::SessionResponse {
                    request_id,
                    kind: Some(kind),
                };
                if tx.send(Ok(response)).await.is_err() {
                    break;
                }
            }
            if let Some(owned) = session.take() {
                close(owned).await;
            }
        }
        .instrument(span),
    );
    ReceiverStream::new(rx)
}

async fn handle(
    state: &Arc<State>,
    session: &mut Option<Owned>,
    kind: Option<Req>,
) -> Result<Resp, ServerError> {
    match kind.ok_or(ServerError::EmptyRequest)? {
        Req::Make(req) => {
            if session.is_some() {
                return Err(ServerError::SessionExists);
            }
            let (env, spec, permit) = make_env(state, req).await?;
            let id = uuid::Uuid::new_v4().to_string();
            tracing::Span::current().record("session_id", id.as_str());
            *session = Some(Owned {
                env,
                _permit: permit,
            });
            Ok(Resp::Make(make_response(state, id, &spec)))
        }
        Req::Reset(req) => {
            let (seed, options) = parse_reset(&req)?;
            let out = call(session, move |env| env.reset(seed, options)).await?;
            Ok(Resp::Reset(reset_response(out)))
        }
        Req::Step(req) => {
            let action = parse_action(req)?;
            let step = call(session, move |env| env.step(action)).await?;
            crate::metrics::step(&step);
            Ok(Resp::Step(convert::step_to_proto(&step)))
        }
        Req::Close(_) => {
            let closed = match session.take() {
                Some(owned) => close(owned).await,
                None => false,
            };
            Ok(Resp::Close(v1::CloseResponse { closed }))
        }
    }
}

/// One call on the stream's env. If the env panics it is lost and the stream continues without a
/// session.
async fn call<T, F>(session: &mut Option<Owned>, f: F) -> Result<T, ServerError>
where
    F: FnOnce(&mut Box<dyn AsyncEnv>) -> EnvFuture<'_, T>,
{
    let owned = session.as_mut().ok_or(ServerError::NoSession)?;
    let out = f(&mut owned.env).await;
    if let Err(EnvError::Panicked(_)) = &out {
        *session = None;
    }
    Ok(out?)
}

async fn close(mut owned: Owned) -> bool {
    if let Err(e) = owned.env.close().await {
        tracing::warn!(error = %e, "env close failed");
    }
    true
}
