//! The HTTP listener of `codegym serve --http ADDR`: facades that let existing clients use codegym
//! unchanged, on the same engine as the gRPC service.
//!
//! - [`sandbox_fusion`]: SandboxFusion's judge API (`POST /run_code`, `GET /v1/ping`), the API verl's
//!   code rewards and the `sandbox-fusion` PyPI client call. Programs run in the coding envs' own
//!   sandbox (`Sandbox::run`), so limits and isolation are the server's.
//! - [`openenv`] and [`openenv_ws`]: OpenEnv's environment API for every registered env, mounted at
//!   `/openenv/{namespace}/{name}` (`GET /health`, `/metadata`, `/schema`, stateless `POST /reset` and
//!   `/step`, and the WebSocket session protocol at `/ws`). Envs come from `Registry::make_async` and
//!   are called only through `AsyncEnv`; a WebSocket session holds a slot of the gRPC server's
//!   session table, so one cap (`max_sessions`) covers both protocols.
//! - [`datasets`]: SandboxFusion's dataset endpoints (`GET /list_datasets`, `POST /get_prompts`,
//!   `/get_prompt_by_id`, `/submit`) over task files named in the config (`http.datasets`,
//!   `--http-dataset NAME=PATH`); submissions are scored by the coding env's batch evaluator.
//!
//! What this module adds on top of the handlers: the request body cap (`max_request_bytes`, as on
//! gRPC), optional bearer-token auth, and the drain on shutdown (the gRPC server's token).

mod dataset_files;
pub mod datasets;
mod openenv;
mod openenv_ws;
mod sandbox_fusion;
mod state;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use codegym_sandbox::Sandbox;
use env_core::Kwargs;
use serde::Deserialize;
use tokio::net::TcpListener;

use crate::server::status::ServerError;
use state::HttpState;

/// The `http` section of the `serve` config file. Every field is optional; unknown fields are
/// rejected.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Address of the HTTP listener (port 0 picks one); `None`: no HTTP listener (the default).
    pub addr: Option<SocketAddr>,
    /// Name of an environment variable holding a bearer token: when set, every HTTP request must
    /// carry `Authorization: Bearer <token>`. The token itself never sits in the config file.
    pub auth_token_env: Option<String>,
    /// `make` kwargs of envs served over OpenEnv, by env id (e.g. `{"codegym/Python-v0": {"mode":
    /// "session"}}`): OpenEnv's clients send none, so the server decides, as OpenEnv's own servers
    /// do per deployment. Envs not listed get their defaults.
    pub openenv_kwargs: BTreeMap<String, Kwargs>,
    /// The most sessions one client (peer IP) may hold at once, counted over every door (gRPC
    /// unary and stream, OpenEnv HTTP and WebSocket); `None` (the default): only the server's
    /// `max_sessions`, shared by all.
    pub max_sessions_per_client: Option<usize>,
    /// SandboxFusion dataset name -> task file (native, HumanEval or MBPP) served by the dataset
    /// endpoints; loaded once at start-up.
    pub datasets: BTreeMap<String, PathBuf>,
}

/// A bound HTTP listener with what its handlers need beyond the gRPC server's state.
pub struct HttpListener {
    pub listener: TcpListener,
    /// The coding envs' sandbox (`codegym::registry_and_sandbox`): `/run_code` runs there.
    pub sandbox: Arc<Sandbox>,
    pub options: HttpOptions,
}

/// The listener's settings, resolved from [`HttpConfig`] and the command line; all optional.
#[derive(Debug, Default)]
pub struct HttpOptions {
    /// `Some`: requests must carry this bearer token.
    pub auth_token: Option<String>,
    /// [`HttpConfig::openenv_kwargs`].
    pub openenv_kwargs: BTreeMap<String, Kwargs>,
    /// [`HttpConfig::max_sessions_per_client`].
    pub max_sessions_per_client: Option<usize>,
    /// The task sets behind the dataset endpoints (empty: `/list_datasets` answers `[]`).
    pub datasets: dataset_files::Datasets,
}

/// Why the HTTP listener stopped.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("HTTP listener: {0}")]
    Io(#[from] std::io::Error),
    #[error("http.openenv_kwargs: {0}")]
    OpenEnvKwargs(#[from] env_core::EnvError),
}

/// Serves the facades until the server's shutdown token is cancelled, then lets in-flight requests
/// finish (WebSocket sessions end on the same token).
pub(crate) async fn serve(
    server: Arc<crate::server::state::State>,
    http: HttpListener,
) -> Result<(), HttpError> {
    let addr = http.listener.local_addr()?;
    let shutdown = server.shutdown.clone();
    // Keys resolve like `make` ids (`codegym/Python` is the latest version); an unknown one is a
    // start-up error, not a silently ignored setting.
    let mut openenv_kwargs = BTreeMap::new();
    let options = http.options;
    for (id, kwargs) in options.openenv_kwargs {
        let id = server.registry.spec(&id)?.id.clone();
        openenv_kwargs.insert(id, kwargs);
    }
    let state = Arc::new(HttpState {
        server,
        sandbox: http.sandbox,
        datasets: options.datasets,
        auth_token: options.auth_token,
        openenv_kwargs,
    });
    tracing::info!(%addr, auth = state.auth_token.is_some(), "serving the HTTP facades (SandboxFusion, OpenEnv)");
    // The peer's address is what a per-client session cap counts by.
    let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(http.listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    Ok(())
}

/// Every route of the HTTP listener.
pub(crate) fn router(state: Arc<HttpState>) -> Router {
    let max_body = state.server.config.max_request_bytes;
    Router::new()
        .route("/run_code", post(sandbox_fusion::run_code))
        .route("/v1/ping", get(sandbox_fusion::ping))
        .route("/v1/sandbox", get(sandbox_fusion::sandbox_info))
        .route("/list_datasets", get(datasets::list_datasets))
        .route("/get_prompts", post(datasets::get_prompts))
        .route("/get_prompt_by_id", post(datasets::get_prompt_by_id))
        .route("/submit", post(datasets::submit))
        .route("/openenv/{ns}/{name}/health", get(openenv::health))
        .route("/openenv/{ns}/{name}/metadata", get(openenv::metadata))
        .route("/openenv/{ns}/{name}/schema", get(openenv::schema))
        .route("/openenv/{ns}/{name}/reset", post(openenv::reset))
        .route("/openenv/{ns}/{name}/step", post(openenv::step))
        .route("/openenv/{ns}/{name}/ws", any(openenv_ws::upgrade))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(state)
}

async fn not_found() -> Response {
    ServerError::NoRoute.into_response()
}

/// Bearer-token check, when a token is configured. Compared in constant time over the token's
/// length so that timing does not reveal a prefix.
async fn auth(State(state): State<Arc<HttpState>>, request: Request, next: Next) -> Response {
    let Some(expected) = &state.auth_token else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let same = given.len() == expected.len()
        && given
            .bytes()
            .zip(expected.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if same {
        return next.run(request).await;
    }
    ServerError::Unauthenticated.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_section_rejects_unknown_fields() {
        let config: HttpConfig =
            serde_json::from_str(r#"{"addr": "127.0.0.1:0", "auth_token_env": "TOKEN"}"#).unwrap();
        assert_eq!(config.addr, Some("127.0.0.1:0".parse().unwrap()));
        assert!(serde_json::from_str::<HttpConfig>(r#"{"adr": "127.0.0.1:0"}"#).is_err());
        let with_data: HttpConfig =
            serde_json::from_str(r#"{"datasets": {"mbpp": "/data/mbpp.jsonl"}}"#).unwrap();
        assert_eq!(
            with_data.datasets["mbpp"],
            PathBuf::from("/data/mbpp.jsonl")
        );
        assert!(
            serde_json::from_str::<HttpConfig>("{}")
                .unwrap()
                .addr
                .is_none()
        );
    }
}
