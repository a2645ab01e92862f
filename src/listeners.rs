//! Both listeners of `codegym serve` wired to one state: the gRPC server (`crate::server`) and,
//! when asked for, the HTTP facades (`crate::http`) as its companion. The server knows nothing of
//! HTTP and the facades only use the server's state, so the two depend one way, through here.

use std::future::Future;
use std::sync::Arc;

use env_core::Registry;
use tokio::net::TcpListener;

use crate::http::HttpListener;
use crate::server::state::State;
use crate::server::{self, Companion, ServeError, ServerConfig};

/// [`server::serve`], plus the HTTP facades on a second listener when `http` is given: one session
/// table (one cap, one per-client cap), one registry and sandbox, one shutdown covering both.
pub async fn serve_with_http(
    registry: Arc<Registry>,
    config: ServerConfig,
    listener: TcpListener,
    http: Option<HttpListener>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let per_client = http
        .as_ref()
        .and_then(|h| h.options.max_sessions_per_client);
    let state = State::new(registry, config, per_client);
    let companion = http.map(|http| -> Companion {
        Box::new(move |state| {
            Box::pin(async move {
                if let Err(e) = crate::http::serve(state, http).await {
                    tracing::error!(error = %e, "the HTTP listener failed");
                }
            })
        })
    });
    server::serve_with(state, listener, companion, shutdown).await
}
