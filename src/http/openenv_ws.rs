//! OpenEnv's WebSocket session protocol at `/openenv/{namespace}/{name}/ws`, the one every current
//! OpenEnv client (`GenericEnvClient`, TRL's integration, verifiers' taskset) speaks.
//!
//! One socket is one session is one env (`Registry::make_async`, called only through `AsyncEnv`).
//! The session is admitted like every other (`server::admission`) and holds its slots for the
//! socket's lifetime, so the caps (`max_sessions`, per client) bound every protocol; a refused
//! socket is accepted, answered with one `CAPACITY_REACHED` (full or draining) or `FACTORY_ERROR`
//! error frame and closed, as OpenEnv's server does. Error codes come from the server's error
//! table (`server::status`). Requests are JSON text frames `{"type": "reset"|"step"|"state"|"close", "data": ...}`, answered one by one with
//! `observation`, `state` or `error` frames (`INVALID_JSON`, `UNKNOWN_TYPE`, `VALIDATION_ERROR` and
//! `EXECUTION_ERROR` keep the session; `CAPACITY_REACHED`, `FACTORY_ERROR` and `SESSION_ERROR` end
//! it). Pings are answered by the WebSocket layer, during a step too (the socket is read while the
//! env works); the session ends with the socket, at a `close` message, or when the server shuts
//! down. The env's future is polled by this socket's own task: a client that vanishes mid-step
//! ends the step with it.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{ConnectInfo, Path, State};
use axum::response::{IntoResponse, Response};
use env_core::{AsyncEnv, EnvError};
use serde_json::{Map, Value as Json, json};

use super::openenv::Adapter;
use super::state::HttpState;
use crate::server::admission::admit;
use crate::server::status::{ServerError, ws_protocol_frame};

/// `GET /ws`: upgrades, then runs the session.
pub(crate) async fn upgrade(
    State(state): State<Arc<HttpState>>,
    Path((ns, name)): Path<(String, String)>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    ws: WebSocketUpgrade,
) -> Response {
    let adapter = match Adapter::lookup(&state, &ns, &name) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    ws.on_upgrade(move |socket| session(state, adapter, peer.ip(), socket))
        .into_response()
}

async fn send(socket: &mut WebSocket, frame: &Json) -> bool {
    socket
        .send(Message::Text(frame.to_string().into()))
        .await
        .is_ok()
}

/// Ends the session: one last error frame, then a close.
async fn refuse(mut socket: WebSocket, frame: Json) {
    send(&mut socket, &frame).await;
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code: close_code::POLICY,
            reason: "session refused".into(),
        })))
        .await;
}

async fn session(state: Arc<HttpState>, adapter: Adapter, peer: IpAddr, socket: WebSocket) {
    let sessions = &state.server.sessions;
    let admitted = admit(&state.server, Some(peer), &adapter.spec.id, &adapter.kwargs).await;
    let (mut env, _slot) = match admitted {
        Ok(a) => (a.env, a.slot),
        Err(e) => {
            // What the refusal frame carries beside its code, as OpenEnv's server sends it.
            let mut extra = Map::new();
            match &e {
                ServerError::ClientCapReached(max) => {
                    extra.insert("max_sessions_per_client".into(), json!(max));
                }
                ServerError::TooManySessions(_) | ServerError::ShuttingDown => {
                    extra.insert("active_sessions".into(), json!(sessions.open()));
                    extra.insert("max_sessions".into(), json!(sessions.limit()));
                }
                _ => {
                    extra.insert("factory_name".into(), json!(adapter.spec.id));
                }
            }
            return refuse(socket, e.ws_frame(true, extra)).await;
        }
    };
    tracing::debug!(env_id = %adapter.spec.id, "OpenEnv WebSocket session opened");
    let mut episode = Episode::default();
    let shutdown = state.server.shutdown.clone();
    let mut socket = socket;
    // Frames that arrived while a step ran, answered in order afterwards.
    let mut inbox: VecDeque<Message> = VecDeque::new();
    loop {
        let message = match inbox.pop_front() {
            Some(m) => Some(Ok(m)),
            None => tokio::select! {
                m = socket.recv() => m,
                _ = shutdown.cancelled() => {
                    refuse(socket, ServerError::ShuttingDown.ws_frame(false, Map::new())).await;
                    break;
                }
            },
        };
        let text = match message {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Binary(_))) => {
                let frame = ws_protocol_frame("INVALID_JSON", "frames must be JSON text");
                if !send(&mut socket, &frame).await {
                    break;
                }
                continue;
            }
            // Pings are answered by the WebSocket layer itself.
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
        };
        // The socket is read while the env works: that is what answers the client's keep-alive
        // pings during a long step (OpenEnv's client gives up after 20 s without a pong), and what
        // notices a client that left (its step is then dropped, killing its program).
        let handling = handle(&adapter, &mut env, &mut episode, text.as_str());
        tokio::pin!(handling);
        let mut gone = false;
        let reply = loop {
            tokio::select! {
                reply = &mut handling => break reply,
                m = socket.recv(), if !gone => match m {
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Ok(m @ (Message::Text(_) | Message::Binary(_)))) => inbox.push_back(m),
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => gone = true,
                },
            }
            if gone {
                break Reply::Close;
            }
        };
        if gone {
            break;
        }
        let reply = match reply {
            Reply::Frame(frame) => frame,
            Reply::Close => {
                let _ = socket.send(Message::Close(None)).await;
                break;
            }
            Reply::End(frame) => {
                refuse(socket, frame).await;
                break;
            }
        };
        if !send(&mut socket, &reply).await {
            break;
        }
    }
    if let Err(e) = env.close().await {
        tracing::debug!(error = %e, "closing a WebSocket session's env failed");
    }
    tracing::debug!(env_id = %adapter.spec.id, "OpenEnv WebSocket session closed");
}

/// What the state message reports.
#[derive(Default)]
struct Episode {
    id: Option<String>,
    steps: u64,
    last_exit_code: Option<Json>,
}

enum Reply {
    Frame(Json),
    /// `close`: end the session without a reply.
    Close,
    /// A failure that ends the session (the env panicked).
    End(Json),
}

async fn handle(
    adapter: &Adapter,
    env: &mut Box<dyn AsyncEnv>,
    episode: &mut Episode,
    text: &str,
) -> Reply {
    let message: Json = match serde_json::from_str(text) {
        Ok(m) => m,
        Err(e) => {
            return Reply::Frame(ws_protocol_frame(
                "INVALID_JSON",
                format!("Invalid JSON: {e}"),
            ));
        }
    };
    let kind = message.get("type").and_then(Json::as_str).unwrap_or("");
    let data = message.get("data").cloned().unwrap_or(Json::Null);
    let result = match kind {
        "reset" => {
            let data = match data {
                Json::Object(map) => map,
                Json::Null => Map::new(),
                _ => {
                    let e = EnvError::InvalidOptions("reset data must be an object".into());
                    return Reply::Frame(ServerError::from(e).ws_frame(false, Map::new()));
                }
            };
            reset(adapter, env, episode, data).await
        }
        "step" => step(adapter, env, episode, &data).await,
        "state" => {
            let mut state = json!({"episode_id": episode.id, "step_count": episode.steps});
            if let Some(code) = &episode.last_exit_code {
                state["last_exit_code"] = code.clone();
            }
            return Reply::Frame(json!({"type": "state", "data": state}));
        }
        "close" => return Reply::Close,
        other => {
            return Reply::Frame(ws_protocol_frame(
                "UNKNOWN_TYPE",
                format!("Unknown message type: {other:?}"),
            ));
        }
    };
    match result {
        Ok(payload) => Reply::Frame(json!({"type": "observation", "data": payload})),
        Err(e) => {
            let e = ServerError::from(e);
            let frame = e.ws_frame(false, Map::new());
            // The env panicked: its state is unknown, so the session ends.
            if e.ws_keeps_session() {
                Reply::Frame(frame)
            } else {
                Reply::End(frame)
            }
        }
    }
}

async fn reset(
    adapter: &Adapter,
    env: &mut Box<dyn AsyncEnv>,
    episode: &mut Episode,
    data: Map<String, Json>,
) -> Result<Json, EnvError> {
    let (seed, options) = adapter.reset_args(&data)?;
    let (obs, info) = env.reset(seed, options).await?;
    episode.id = Some(match data.get("episode_id").and_then(Json::as_str) {
        Some(id) => id.to_string(),
        None => uuid::Uuid::new_v4().to_string(),
    });
    episode.steps = 0;
    episode.last_exit_code = None;
    Ok(adapter.reset_payload(obs, info))
}

async fn step(
    adapter: &Adapter,
    env: &mut Box<dyn AsyncEnv>,
    episode: &mut Episode,
    data: &Json,
) -> Result<Json, EnvError> {
    let action = adapter.action(data)?;
    let payload = adapter.step_payload(env.step(action).await?);
    episode.steps += 1;
    episode.last_exit_code = payload["observation"].get("exit_code").cloned();
    Ok(payload)
}
