//! `codegym-bench http`: SandboxFusion's `POST /run_code` against gRPC `Evaluate`, in the same run
//! and on the same in-process server (one sandbox behind both listeners). Each client keeps one
//! request in flight and each request runs one program (`Evaluate` with one item per call), so the
//! difference between the rows is what HTTP/1.1 + JSON costs against HTTP/2 + protobuf.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::latency::Latency;

/// The program `grpc_coding`'s `Evaluate` client sends too (its `hello-world` task's solution).
const CODE: &str = crate::grpc_coding::CODE;

/// The table: one row per protocol and client count.
pub async fn run(clients: &[usize], duration: Duration) -> anyhow::Result<String> {
    let (registry, sandbox) = tokio::task::spawn_blocking(|| {
        codegym::registry_and_sandbox(crate::exec::unshared_config())
    })
    .await??;
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let (grpc_addr, http_addr) = (grpc.local_addr()?, http.local_addr()?);
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(codegym::listeners::serve_with_http(
        Arc::new(registry),
        Default::default(),
        grpc,
        Some(codegym::http::HttpListener {
            listener: http,
            sandbox,
            options: Default::default(),
        }),
        stop.clone().cancelled_owned(),
    ));
    let mut table = String::from(
        "| call | clients | executions/s | p50 (ms) | p99 (ms) |\n|---|---:|---:|---:|---:|\n",
    );
    for &n in clients {
        let mut samples = run_code_load(http_addr, n, duration).await?;
        let rate = samples.len() as f64 / duration.as_secs_f64();
        let lat = Latency::from_micros(&mut samples);
        table.push_str(&format!(
            "| HTTP `POST /run_code` (`print`) | {n} | {rate:.0} | {:.1} | {:.1} |\n",
            lat.p50_us / 1e3,
            lat.p99_us / 1e3
        ));
        let mut samples = crate::latency::closed_loop(grpc_addr, n, duration, |_, c, s, e| {
            crate::grpc_coding::evaluate_client(c, 1, s, e)
        })
        .await?;
        let rate = samples.len() as f64 / duration.as_secs_f64();
        let lat = Latency::from_micros(&mut samples);
        table.push_str(&format!(
            "| gRPC `Evaluate` (1 item/call, `print`) | {n} | {rate:.0} | {:.1} | {:.1} |\n",
            lat.p50_us / 1e3,
            lat.p99_us / 1e3
        ));
    }
    stop.cancel();
    server.await??;
    Ok(table)
}

/// `clients` closed-loop HTTP clients (a connection each, kept alive); latency samples in us of
/// the requests started inside the measured window (after a tenth of `duration` of warm-up).
async fn run_code_load(
    addr: SocketAddr,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Vec<f64>> {
    let start = Instant::now() + duration / 10;
    let end = start + duration;
    let url = format!("http://{addr}/run_code");
    let body = serde_json::json!({
        "code": CODE, "language": "python", "run_timeout": 10, "compile_timeout": 10,
        "stdin": null, "memory_limit_MB": 1024, "files": {}, "fetch_files": [],
    });
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()?;
        let (url, body) = (url.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            while Instant::now() < end {
                let t0 = Instant::now();
                let r: serde_json::Value = client
                    .post(&url)
                    .json(&body)
                    .send()
                    .await?
                    .error_for_status()?
                    .json()
                    .await?;
                anyhow::ensure!(r["status"] == "Success", "run_code failed: {r}");
                if t0 >= start {
                    samples.push(t0.elapsed().as_secs_f64() * 1e6);
                }
            }
            anyhow::Ok(samples)
        }));
    }
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await??);
    }
    Ok(samples)
}
