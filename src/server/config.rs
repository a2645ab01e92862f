//! The `server` section of the `serve` config: session caps, timeouts, message limits, the drain.

use std::time::Duration;

use serde::Deserialize;

/// Server limits. Every field has a default; unknown fields are rejected.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Sessions open at once (unary and stream); more get RESOURCE_EXHAUSTED.
    pub max_sessions: usize,
    /// A unary session untouched for this many milliseconds is closed: its client has vanished.
    pub idle_timeout_ms: u64,
    /// Largest accepted request message, in bytes.
    pub max_request_bytes: usize,
    /// Largest `Evaluate` batch.
    pub max_evaluate_items: usize,
    /// After a shutdown signal, how many milliseconds in-flight work may take before the server stops
    /// anyway.
    pub shutdown_grace_ms: u64,
    /// After a shutdown signal, how many milliseconds the server keeps working before it starts to
    /// stop: health answers NOT_SERVING and new sessions are refused (UNAVAILABLE) at once, while
    /// open sessions go on. Lets load balancers and client pools (which poll `grpc.health.v1`)
    /// move new work elsewhere and lets running episodes finish. 0: stop at once.
    pub drain_ms: u64,
}

impl ServerConfig {
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms)
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }

    pub fn drain(&self) -> Duration {
        Duration::from_millis(self.drain_ms)
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_sessions: 10_000,
            idle_timeout_ms: 600_000,
            max_request_bytes: 16 << 20,
            max_evaluate_items: 10_000,
            shutdown_grace_ms: 30_000,
            drain_ms: 0,
        }
    }
}
