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

pub(crate) mod admission;
mod clients;
mod config;
mod deadline;
mod evaluate;
mod requests;
mod service;
pub(crate) mod sessions;
pub(crate) mod state;
pub mod status;
mod stream;
mod tools;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use env_core::Registry;
use futures::future::BoxFuture;
use proto::v1::env_service_server::EnvServiceServer;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;

pub use config::ServerConfig;
pub use service::EnvServer;
use state::State;

/// Another listener sharing the server's state (the HTTP facades): started with the state, it
/// stops taking work when `State::shutdown` is cancelled, and the server waits for it to finish.
pub(crate) type Companion = Box<dyn FnOnce(Arc<State>) -> BoxFuture<'static, ()> + Send>;

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

/// Serves until `shutdown` resolves, then drains: in-flight requests finish, streams end, every
/// session is closed. Returns once all of that is done or `shutdown_grace` has passed.
pub async fn serve(
    registry: Arc<Registry>,
    config: ServerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    serve_with(State::new(registry, config, None), listener, None, shutdown).await
}

/// [`serve`] over a given state, plus a `companion` listener on the same state: one session table
/// (one cap), one registry, one shutdown covering both listeners.
pub(crate) async fn serve_with(
    state: Arc<State>,
    listener: TcpListener,
    companion: Option<Companion>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let addr: SocketAddr = listener.local_addr().map_err(ServeError::Listener)?;
    let token = state.shutdown.clone();
    let draining = state.draining.clone();
    let reaper = tokio::spawn(state.clone().reap_idle());
    let companion = companion.map(|start| tokio::spawn(start(state.clone())));

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
    // Both listeners stop taking work on the same token; the companion drains its own connections.
    let server = async move {
        let grpc = server.await.map_err(ServeError::from);
        if let Some(companion) = companion
            && let Err(e) = companion.await
        {
            tracing::error!(error = %e, "the companion listener's task failed");
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
