//! `codegym-bench tools` (issue 12): the latency a host tool call adds, measured inside the
//! sandbox with `time.perf_counter` around each call, through the whole path: the program's runner,
//! its private socket, the coding env, the server's `Session` stream over loopback TCP, and a tonic
//! client that answers at once (its own function time is ~0). Rows: a local Python function (the
//! floor of the loop itself), the sandbox's tool channel with an in-process handler (no gRPC), and
//! the full gRPC path, in script and session mode.

use std::sync::Arc;

use codegym_sandbox::{
    Backend, ExecRequest, HostToolCall, Sandbox, SandboxConfig, ToolHandler, ToolHost, ToolLimits,
};
use env_core::{ReturnValue, Value};
use proto::convert::{value_from_proto, value_to_proto};
use proto::v1::{self, session_request::Kind as Req, session_response::Kind as Resp};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// A program timing `calls` calls of `f` (after 20 warm-up calls); returns sorted microseconds.
fn program(f: &str, calls: u32) -> String {
    format!(
        "import time\ndef local(i):\n    return i\nfor i in range(20):\n    {f}(i)\nts = []\n\
         for i in range({calls}):\n    t = time.perf_counter()\n    {f}(i)\n    ts.append((time.perf_counter() - t) * 1e6)\n\
         sorted(ts)"
    )
}

fn percentiles(v: &serde_json::Value) -> anyhow::Result<(f64, f64)> {
    let xs: Vec<f64> = v
        .as_array()
        .ok_or_else(|| anyhow::anyhow!("no timings: {v}"))?
        .iter()
        .filter_map(|x| x.as_f64())
        .collect();
    anyhow::ensure!(!xs.is_empty(), "no timings");
    let at = |q: f64| xs[((xs.len() as f64 - 1.0) * q).round() as usize];
    Ok((at(0.5), at(0.99)))
}

fn timings(obs: &env_core::ExecutionResult) -> anyhow::Result<(f64, f64)> {
    match &obs.return_value {
        Some(ReturnValue::Json { value }) => percentiles(value),
        other => anyhow::bail!("no return value ({other:?}): {}", obs.stderr),
    }
}

/// The Markdown table.
pub async fn run(calls: u32, backend: Backend) -> anyhow::Result<String> {
    let mut table = String::from("| path | p50 (us) | p99 (us) |\n|---|---:|---:|\n");
    // The sandbox alone, with an in-process handler.
    let sandbox = tokio::task::spawn_blocking(move || {
        Sandbox::new(SandboxConfig {
            backend,
            ..SandboxConfig::default()
        })
    })
    .await??;
    let handler: ToolHandler =
        Arc::new(|call: HostToolCall| Box::pin(async move { Ok(json!(call.args)) }));
    for (name, f) in [
        ("local Python function (floor)", "local"),
        ("sandbox tool channel, in-process handler", "echo"),
    ] {
        let mut req = ExecRequest::new(program(f, calls));
        req.tools = Some(ToolHost {
            names: vec!["echo".into()],
            handler: handler.clone(),
            limits: ToolLimits {
                max_calls: calls + 64,
                ..ToolLimits::default()
            },
        });
        let obs = sandbox.run(req).await?;
        let (p50, p99) = timings(&obs)?;
        table.push_str(&format!(
            "| {name} ({}) | {p50:.0} | {p99:.0} |\n",
            sandbox.backend()
        ));
    }
    // The whole path, through an in-process server over loopback TCP.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let registry = codegym::registry(Default::default())?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(codegym::server::serve(
        Arc::new(registry),
        Default::default(),
        listener,
        async {
            let _ = stopped.await;
        },
    ));
    for mode in ["script", "session"] {
        let (p50, p99) = over_grpc(addr, mode, calls).await?;
        table.push_str(&format!(
            "| gRPC `Session` stream, client answers at once ({mode} mode) | {p50:.0} | {p99:.0} |\n"
        ));
    }
    let _ = stop.send(());
    let _ = server.await;
    Ok(table)
}

async fn over_grpc(
    addr: std::net::SocketAddr,
    mode: &str,
    calls: u32,
) -> anyhow::Result<(f64, f64)> {
    let mut client =
        v1::env_service_client::EnvServiceClient::connect(format!("http://{addr}")).await?;
    let (tx, rx) = mpsc::channel(64);
    let mut responses = client.session(ReceiverStream::new(rx)).await?.into_inner();
    let kwargs = json!({
        "mode": mode, "grade": false, "tools": [{"name": "echo"}],
    });
    let requests = [
        Req::Make(v1::MakeRequest {
            env_id: "codegym/Code-v0".into(),
            kwargs_json: kwargs.to_string(),
        }),
        Req::Reset(v1::ResetRequest {
            session_id: String::new(),
            seed: None,
            options_json: json!({"task_id": "hello-world"}).to_string(),
        }),
        Req::Step(v1::StepRequest {
            session_id: String::new(),
            action: Some(value_to_proto(&Value::Text(program(
                "echo",
                calls.min(200),
            )))),
        }),
    ];
    for (i, kind) in requests.into_iter().enumerate() {
        tx.send(v1::SessionRequest {
            request_id: i as u64,
            kind: Some(kind),
        })
        .await?;
    }
    loop {
        let r = responses
            .message()
            .await?
            .ok_or_else(|| anyhow::anyhow!("stream ended"))?;
        match r.kind {
            Some(Resp::ToolCall(call)) => {
                let result = v1::ToolResult {
                    call_id: call.call_id,
                    result_json: call.args_json,
                    error: None,
                };
                tx.send(v1::SessionRequest {
                    request_id: 0,
                    kind: Some(Req::ToolResult(result)),
                })
                .await?;
            }
            Some(Resp::Step(step)) => {
                let obs = step
                    .observation
                    .ok_or_else(|| anyhow::anyhow!("no observation"))?;
                let Value::Execution(e) = value_from_proto(obs)? else {
                    anyhow::bail!("not an execution")
                };
                return timings(&e);
            }
            Some(Resp::Error(e)) => anyhow::bail!("error: {}", e.message),
            _ => {}
        }
    }
}
