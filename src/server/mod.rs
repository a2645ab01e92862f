//! The gRPC environment server behind `codegym serve`: `codegym.v1.EnvService`, plus the standard
//! `grpc.health.v1` and reflection services so stock tools (grpcurl, grpc_cli, health probes) work.
//!
//! Concurrency model: each RPC is a tokio task, and envs are called only through
//! [`env_core::AsyncEnv`] (`Registry::make_async`): the coding env awaits its sandbox without holding
//! a thread, cheap synchronous envs run in place, other synchronous envs on the blocking pool, so one
//! slow step never stalls other sessions or the runtime. A unary session lives in the
//! [`sessions::SessionTable`] (each call a task of its own, so a call whose client gave up still
//! finishes); a `Session` stream owns its environment outright and closes it when the stream ends,
//! however it ends.

mod deadline;
mod evaluate;
mod service;
pub(crate) mod sessions;
pub mod status;
mod stream;
mod tools;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use env_core::Registry;
use proto::v1::env_service_server::EnvServiceServer;
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;

pub use service::EnvServer;

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

/// Failures that stop the server itself (not a request).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot read the listener's address: {0}")]
    Listener(#[source] std::io::Error),
    #[error("cannot build the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("transport error: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Shared state of all handlers.
pub(crate) struct State {
    pub registry: Arc<Registry>,
    pub config: ServerConfig,
    pub sessions: sessions::SessionTable,
    /// Cancelled when a shutdown signal arrives: new sessions are refused (open ones go on).
    pub draining: CancellationToken,
    /// Cancelled when shutdown starts (`drain_ms` after the signal): streams stop taking requests.
    pub shutdown: CancellationToken,
}

/// Serves until `shutdown` resolves, then drains: in-flight requests finish, streams end, every
/// session is closed. Returns once all of that is done or `shutdown_grace` has passed.
pub async fn serve(
    registry: Arc<Registry>,
    config: ServerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    serve_with_http(registry, config, listener, None, shutdown).await
}

/// [`serve`], plus the HTTP facades on a second listener when `http` is given: one session table
/// (one cap), one registry and sandbox, one shutdown covering both listeners.
pub async fn serve_with_http(
    registry: Arc<Registry>,
    config: ServerConfig,
    listener: TcpListener,
    http: Option<crate::http::HttpListener>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let addr: SocketAddr = listener.local_addr().map_err(ServeError::Listener)?;
    let token = CancellationToken::new();
    let draining = CancellationToken::new();
    let state = Arc::new(State {
        registry,
        sessions: sessions::SessionTable::new(config.max_sessions),
        config,
        draining: draining.clone(),
        shutdown: token.clone(),
    });
    let reaper = tokio::spawn(sessions::reap_idle(state.clone()));
    let http = http.map(|http| tokio::spawn(crate::http::serve(state.clone(), http)));

    // The environments and the sandbox passed their start-up self-test before the server was
    // built (`registry_and_sandbox`), so the server is SERVING from its first connection.
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<EnvServiceServer<EnvServer>>().await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(proto::v1::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    // grpcurl and older clients (grpcio-reflection, grpc_cli) still speak v1alpha: serve both.
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(proto::v1::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let env_service = EnvServiceServer::new(EnvServer::new(state.clone()))
        .max_decoding_message_size(state.config.max_request_bytes)
        .max_encoding_message_size(usize::MAX);

    // Small request/response pairs are the whole workload: Nagle's algorithm would add tens of ms.
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    tracing::info!(%addr, "serving codegym.v1.EnvService");
    let signal = {
        let token = token.clone();
        let drain = state.config.drain();
        async move {
            shutdown.await;
            // Both the service and the server as a whole ("") stop serving: probes of either see it.
            health
                .set_not_serving::<EnvServiceServer<EnvServer>>()
                .await;
            health
                .set_service_status("", tonic_health::ServingStatus::NotServing)
                .await;
            draining.cancel();
            if !drain.is_zero() {
                tracing::info!(
                    ?drain,
                    "shutdown requested: NOT_SERVING, refusing new sessions while open ones go on"
                );
                tokio::time::sleep(drain).await;
            }
            tracing::info!("shutting down: draining in-flight requests and streams");
            token.cancel();
        }
    };
    let server = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .layer(tonic::service::InterceptorLayer::new(
            deadline::stamp_arrival,
        ))
        .add_service(health_service)
        .add_service(reflection)
        .add_service(reflection_v1alpha)
        .add_service(env_service)
        .serve_with_incoming_shutdown(incoming, signal);
    // Both listeners stop taking work on the same token; the HTTP one drains its own connections.
    let server = async move {
        let grpc = server.await.map_err(ServeError::from);
        if let Some(http) = http {
            match http.await {
                Ok(Err(e)) => tracing::error!(error = %e, "the HTTP listener failed"),
                Err(e) => tracing::error!(error = %e, "the HTTP listener task failed"),
                Ok(Ok(())) => {}
            }
        }
        grpc
    };
    tokio::pin!(server);
    let result = tokio::select! {
        r = &mut server => r,
        _ = async { token.cancelled().await; tokio::time::sleep(state.config.shutdown_grace()).await } => {
            tracing::warn!(grace = ?state.config.shutdown_grace(), "shutdown grace period over; stopping with requests still in flight");
            Ok(())
        }
    };
    reaper.abort();
    let closed = state.sessions.close_all().await;
    tracing::info!(closed, "server stopped");
    result
}
