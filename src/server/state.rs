//! What every front door shares: the registry, the limits, the session tables (global and per
//! client), the drain and shutdown tokens, and the idle reaper that keeps the unary table clean.
//! Both listeners (gRPC here, the HTTP facades in `crate::http`) hold one `Arc<State>`.

use std::sync::Arc;

use env_core::Registry;
use tokio_util::sync::CancellationToken;

use super::clients::ClientSessions;
use super::config::ServerConfig;
use super::sessions::SessionTable;

/// Shared state of all handlers, gRPC and HTTP.
pub(crate) struct State {
    pub registry: Arc<Registry>,
    pub config: ServerConfig,
    pub sessions: SessionTable,
    /// Open sessions by client (peer IP), capped by `max_sessions_per_client` on every door.
    pub clients: Arc<ClientSessions>,
    /// Cancelled when a shutdown signal arrives: new sessions are refused (open ones go on).
    pub draining: CancellationToken,
    /// Cancelled when shutdown starts (`drain_ms` after the signal): streams stop taking requests.
    pub shutdown: CancellationToken,
}

impl State {
    pub fn new(
        registry: Arc<Registry>,
        config: ServerConfig,
        max_sessions_per_client: Option<usize>,
    ) -> Arc<State> {
        Arc::new(State {
            registry,
            sessions: SessionTable::new(config.max_sessions),
            clients: ClientSessions::new(max_sessions_per_client),
            config,
            draining: CancellationToken::new(),
            shutdown: CancellationToken::new(),
        })
    }

    /// Closes unary sessions whose clients have vanished (no call for `idle_timeout`).
    pub async fn reap_idle(self: Arc<Self>) {
        let ttl = self.config.idle_timeout();
        let period = (ttl / 4).clamp(
            std::time::Duration::from_millis(50),
            std::time::Duration::from_secs(30),
        );
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            for id in self.sessions.idle(ttl) {
                if self.sessions.remove(&id).await {
                    tracing::info!(session_id = %id, idle = ?ttl, "reaped idle session");
                }
            }
        }
    }
}
