//! The `Session` RPC: one session over one bidirectional stream.
//!
//! Requests are handled strictly in order, one response each, so clients may pipeline freely. The
//! stream's task owns the env (no lock) and awaits its calls itself. When the client's side ends,
//! errors, or the client vanishes, or the server shuts down, the session is closed; a request already
//! being handled finishes first. An env that panics is dropped: the stream goes on without a session.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Arc;

use env_core::{AsyncEnv, EnvError, EnvFuture};
use proto::convert;
use proto::v1::{self, session_request::Kind as Req, session_response::Kind as Resp};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};
use tracing::Instrument;

use super::admission::admit;
use super::requests::{make_response, parse_action, parse_make, parse_reset, reset_response};
use super::sessions::Slot;
use super::state::State;
use super::status::ServerError;
use super::tools::{self, Bridge};

/// Responses buffered ahead of a slow reader; beyond this the stream applies backpressure.
const BUFFER: usize = 64;

struct Owned {
    env: Box<dyn AsyncEnv>,
    _slot: Slot,
}

/// Starts the stream's task and returns the response stream.
pub fn spawn(
    state: Arc<State>,
    mut inbound: Streaming<v1::SessionRequest>,
    client: Option<IpAddr>,
    span: tracing::Span,
) -> ReceiverStream<Result<v1::SessionResponse, Status>> {
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(
        async move {
            let mut session: Option<Owned> = None;
            // Issue 12: host tools. The env's calls arrive on the bridge while a request is being
            // handled; requests the client pipelined meanwhile wait in `queued`.
            let (handler, mut bridge) = tools::bridge();
            let mut queued: VecDeque<v1::SessionRequest> = VecDeque::new();
            let mut inbound_done = false;
            loop {
                let request = match queued.pop_front() {
                    Some(r) => r,
                    None if inbound_done => break,
                    None => {
                        let next = tokio::select! {
                            biased;
                            _ = state.shutdown.cancelled() => break,
                            _ = tx.closed() => break,
                            next = inbound.message() => next,
                        };
                        match next {
                            Ok(Some(r)) => r,
                            Ok(None) => break,
                            Err(status) => {
                                tracing::debug!(%status, "session stream ended by the client");
                                break;
                            }
                        }
                    }
                };
                let request_id = request.request_id;
                let kind = match request.kind {
                    // A late answer (its call timed out): nothing waits for it, and it gets no
                    // response of its own.
                    Some(Req::ToolResult(result)) => {
                        bridge.resolve(result);
                        continue;
                    }
                    kind => kind,
                };
                let handled = handle(&state, client, &mut session, kind, &handler);
                let outcome = serve_tools(
                    handled,
                    &mut bridge,
                    &mut inbound,
                    &mut queued,
                    &mut inbound_done,
                    &tx,
                    request_id,
                )
                .await;
                bridge.step_ended();
                let kind = match outcome {
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

/// Awaits a request's handling while forwarding the env's tool calls to the client and reading
/// its answers (issue 12); other requests read meanwhile are queued, in order.
async fn serve_tools<F: std::future::Future<Output = Result<Resp, ServerError>>>(
    handled: F,
    bridge: &mut Bridge,
    inbound: &mut Streaming<v1::SessionRequest>,
    queued: &mut VecDeque<v1::SessionRequest>,
    inbound_done: &mut bool,
    tx: &mpsc::Sender<Result<v1::SessionResponse, Status>>,
    request_id: u64,
) -> Result<Resp, ServerError> {
    tokio::pin!(handled);
    loop {
        tokio::select! {
            out = &mut handled => return out,
            Some(call) = bridge.next_call() => {
                let response = v1::SessionResponse {
                    request_id,
                    kind: Some(Resp::ToolCall(call)),
                };
                // A gone client just never answers: the call times out in the sandbox.
                let _ = tx.send(Ok(response)).await;
            }
            next = inbound.message(), if !*inbound_done => match next {
                Ok(Some(v1::SessionRequest { kind: Some(Req::ToolResult(result)), .. })) => {
                    bridge.resolve(result);
                }
                Ok(Some(request)) => queued.push_back(request),
                Ok(None) | Err(_) => *inbound_done = true,
            },
        }
    }
}

async fn handle(
    state: &Arc<State>,
    client: Option<IpAddr>,
    session: &mut Option<Owned>,
    kind: Option<Req>,
    tool_handler: &host_tool_calls::ToolHandler,
) -> Result<Resp, ServerError> {
    match kind.ok_or(ServerError::EmptyRequest)? {
        // Never reached: the stream routes tool results before handling requests.
        Req::ToolResult(_) => Err(ServerError::EmptyRequest),
        Req::Make(req) => {
            if session.is_some() {
                return Err(ServerError::SessionExists);
            }
            // Issue 12: envs made here can call host tools, which this stream serves.
            let kwargs = parse_make(&req, true)?;
            let admitted = host_tool_calls::with_handler(
                tool_handler.clone(),
                admit(state, client, &req.env_id, &kwargs),
            )
            .await?;
            let id = uuid::Uuid::new_v4().to_string();
            tracing::Span::current().record("session_id", id.as_str());
            *session = Some(Owned {
                env: admitted.env,
                _slot: admitted.slot,
            });
            Ok(Resp::Make(make_response(state, id, &admitted.spec)))
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
