//! The tracing subscriber: log lines on stderr (level from `RUST_LOG`), and, when an OTLP endpoint
//! is configured, the rollout engine's spans (`episode` > `model_call`, `env_call`) exported as
//! OpenTelemetry traces over OTLP/gRPC by `tracing-opentelemetry` and `opentelemetry-otlp`.
//!
//! The exporter's channel is built on the runtime (tonic needs one) and its batches go out from the
//! SDK's own thread; [`Telemetry::shutdown`] flushes the last batch before the runtime stops.

use anyhow::Context;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt};

use super::LogFormat;

/// The OpenTelemetry pipeline, while it runs.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Exports the spans still buffered and stops the exporter. Blocks: call off the runtime.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("warning: exporting the last traces failed: {e}");
        }
    }
}

/// Installs the global subscriber. With `otlp` (an endpoint such as `http://127.0.0.1:4317`) it
/// must run inside the tokio runtime.
pub fn init(format: LogFormat, otlp: Option<&str>) -> anyhow::Result<Option<Telemetry>> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Each layer has its own filter, so `RUST_LOG=warn` quiets the log without dropping spans. The
    // rollout's spans are at debug level: the log (info by default) does not carry them, and the
    // trace gets the engine's debug events (retries, failed calls) as span events.
    let log = fmt::layer().with_writer(std::io::stderr);
    let log = match format {
        LogFormat::Text => log.with_filter(filter).boxed(),
        LogFormat::Json => log.json().with_filter(filter).boxed(),
    };
    let Some(endpoint) = otlp else {
        tracing_subscriber::registry().with(log).init();
        return Ok(None);
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .with_context(|| format!("cannot set up the OTLP exporter for {endpoint}"))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("codegym")
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("codegym"))
        .with_filter(Targets::new().with_target("rollout", tracing::Level::DEBUG));
    tracing_subscriber::registry().with(log).with(spans).init();
    Ok(Some(Telemetry { provider }))
}
