//! OpenTelemetry traces of `codegym rollout --otlp-endpoint`: the real binary exports over OTLP/gRPC
//! to a receiver in this test built from the collector's own protobuf service
//! (`opentelemetry-proto`'s `TraceService`), which keeps every span it is sent. A span per episode,
//! child spans per model and env call, in the episode's trace.
//! The test spawns the `codegym` binary itself (through `support/codegym_bin.rs`), hence the
//! local `disallowed_methods` allowance.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;
#[path = "support/rollout_util.rs"]
mod rollout_util;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use codegym_bin::{BIN, command, finish, spawn};
use fake_llm::FakeLlm;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use rollout_util::{rollout_args, script, task_ids};

/// An OTLP trace receiver that keeps what it is sent.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
    services: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        for rs in request.into_inner().resource_spans {
            if let Some(resource) = &rs.resource {
                for kv in &resource.attributes {
                    if kv.key == "service.name" {
                        self.services.lock().unwrap().push(text(kv.value.as_ref()));
                    }
                }
            }
            for ss in rs.scope_spans {
                self.spans.lock().unwrap().extend(ss.spans);
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

fn text(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        other => format!("{other:?}"),
    }
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| text(kv.value.as_ref()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_exports_a_span_per_episode_with_model_and_env_call_children() {
    let receiver = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let otlp = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let collector = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(receiver.clone()))
            .serve_with_incoming(incoming),
    );

    let llm = FakeLlm::start(script(0)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("traced.jsonl");
    let tasks = task_ids(2);
    let mut args = rollout_args(&llm.base_url(), &tasks, 2, &out);
    args.extend(["--otlp-endpoint".to_string(), format!("http://{otlp}")]);
    #[allow(clippy::disallowed_methods)] // the test runs the binary under test
    let child = command(BIN, &args)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .spawn()
        .expect("spawn codegym");
    let (code, _, stderr) = finish(child).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !stderr.contains("exporting the last traces failed"),
        "{stderr}"
    );

    // The exporter flushed before the process exited: everything is here.
    let spans = receiver.spans.lock().unwrap().clone();
    collector.abort();
    assert!(
        receiver
            .services
            .lock()
            .unwrap()
            .iter()
            .all(|s| s == "codegym")
    );
    let by_name = |name: &str| spans.iter().filter(|s| s.name == name).collect::<Vec<_>>();
    let episodes = by_name("episode");
    assert_eq!(episodes.len(), 4, "2 tasks x 2 samples");
    let mut keys: Vec<(String, String)> = episodes
        .iter()
        .map(|s| {
            (
                attr(s, "task_id").unwrap(),
                attr(s, "sample_index").unwrap(),
            )
        })
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 4, "one span per episode: {keys:?}");
    for e in &episodes {
        assert!(e.parent_span_id.is_empty(), "an episode is a trace's root");
        assert!(attr(e, "stop_reason").is_some(), "{e:?}");
    }
    // Every model and env call is a child of exactly one episode, in that episode's trace.
    let roots: HashMap<&[u8], &Span> = episodes
        .iter()
        .map(|s| (s.span_id.as_slice(), *s))
        .collect();
    for name in ["model_call", "env_call"] {
        let calls = by_name(name);
        assert!(calls.len() >= episodes.len(), "{name}: {}", calls.len());
        for c in calls {
            let parent = roots
                .get(c.parent_span_id.as_slice())
                .unwrap_or_else(|| panic!("{name} span without an episode parent: {c:?}"));
            assert_eq!(parent.trace_id, c.trace_id);
            assert!(c.start_time_unix_nano >= parent.start_time_unix_nano);
            assert!(c.end_time_unix_nano <= parent.end_time_unix_nano);
        }
    }
    let ops: Vec<String> = by_name("env_call")
        .iter()
        .filter_map(|s| attr(s, "op"))
        .collect();
    for op in ["make", "reset", "step", "close"] {
        assert!(ops.iter().any(|o| o == op), "no env_call op={op}: {ops:?}");
    }
    assert!(
        by_name("model_call")
            .iter()
            .all(|s| attr(s, "outcome").as_deref() == Some("ok"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_or_unreachable_collector_never_costs_the_rollout() {
    let llm = FakeLlm::start(script(0)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rollout = |endpoint: &str, out: &str| {
        let mut args = rollout_args(&llm.base_url(), &task_ids(1), 1, &dir.path().join(out));
        args.extend(["--otlp-endpoint".to_string(), endpoint.to_string()]);
        finish(spawn(&args))
    };
    // Not a URL: refused at start, before any episode, with the reason.
    let (code, _, stderr) = rollout("not a url", "bad.jsonl").await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains("cannot set up the OTLP exporter for not a url"),
        "{stderr}"
    );
    assert!(!dir.path().join("bad.jsonl").exists());
    // Nobody listening: the episodes are played and written all the same.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let (code, _, stderr) = rollout(&format!("http://{addr}"), "unreachable.jsonl").await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        rollout_util::records(&dir.path().join("unreachable.jsonl")).len(),
        1
    );
}
