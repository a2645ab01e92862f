//! `--metrics-addr`: installs the Prometheus recorder behind the `metrics` facade the libraries emit
//! through, and serves its text exposition at `GET /metrics` on a listener of its own.
//!
//! The listener is bound here (not by the exporter's built-in one) so that port 0 works and the chosen
//! address can be printed, as `serve` does for its other listeners.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Histogram buckets in seconds, shared by every latency metric: sandbox runs and env calls (ms to
/// seconds), model calls and episodes (seconds to minutes).
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// Installs the recorder, registers the help texts of `describe`, binds `addr` and serves
/// `/metrics` until the process exits. Returns the bound address.
pub async fn install(addr: SocketAddr, describe: fn()) -> anyhow::Result<SocketAddr> {
    let handle = PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .context("metrics histogram buckets")?
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    describe();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (metrics)"))?;
    let local = listener.local_addr()?;
    // The exporter keeps histogram samples until upkeep folds them into buckets.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    let app = axum::Router::new().route("/metrics", get(move || render(handle.clone())));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the metrics listener failed");
        }
    });
    tracing::info!(%local, "serving Prometheus metrics at /metrics");
    Ok(local)
}

async fn render(handle: PrometheusHandle) -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
}
