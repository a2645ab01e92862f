//! The one admission of a new session, for every front door: unary `Make`, the `Session` stream,
//! OpenEnv's stateless HTTP `reset`/`step` (a session for the length of one request) and OpenEnv's
//! WebSocket. In this order: refuse while draining, resolve the env id, take the client's slot
//! (its own cap first, so a client at its cap takes nothing from the others), take a slot of the
//! server-wide cap, make the env. A refusal frees whatever was taken.

use std::net::IpAddr;

use env_core::{AsyncEnv, EnvSpec, Kwargs};

use super::sessions::Slot;
use super::state::State;
use super::status::ServerError;

/// An admitted session: its env, the env's spec, and its slot.
pub(crate) struct Admitted {
    pub env: Box<dyn AsyncEnv>,
    pub spec: EnvSpec,
    pub slot: Slot,
}

/// Admits a session of `env_id` made with `kwargs` for the client at `client` (`None`: a client
/// whose address is unknown, counted by the server-wide cap only).
pub(crate) async fn admit(
    state: &State,
    client: Option<IpAddr>,
    env_id: &str,
    kwargs: &Kwargs,
) -> Result<Admitted, ServerError> {
    if state.draining.is_cancelled() {
        return Err(ServerError::ShuttingDown);
    }
    let spec = state.registry.spec(env_id)?.clone();
    let client = match client {
        Some(ip) => Some(
            state
                .clients
                .acquire(ip)
                .ok_or_else(|| ServerError::ClientCapReached(state.clients.max().unwrap_or(0)))?,
        ),
        None => None,
    };
    let server = state.sessions.reserve()?;
    // Synchronous constructors that may block run through the registry's offload.
    let env = state.registry.make_async(env_id, kwargs).await?;
    Ok(Admitted {
        env,
        spec,
        slot: Slot::new(server, client),
    })
}
