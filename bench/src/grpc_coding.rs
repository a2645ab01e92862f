//! `codegym-bench grpc --env python`: sandboxed executions through the server, via `Step` (one
//! session per client, one request in flight each), via the `Session` stream (reset and step
//! pipelined) and via batch `Evaluate`. The in-process numbers
//! and the naive baseline are in `crate::exec`; the difference is what gRPC and the server add.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context;
use env_core::Value;
use proto::convert::value_to_proto;
use proto::v1::{self, env_service_client::EnvServiceClient};
use tonic::transport::Channel;

use crate::latency::Latency;

const TASK: &str = r#"{"task_id": "hello-world"}"#;
pub(crate) const CODE: &str = "print(\"Hello, world!\")\n";

/// Rows for `Step` at each client count and for `Evaluate` batches of `batch` items.
pub async fn run(
    addr: SocketAddr,
    clients: &[usize],
    duration: Duration,
    batch: usize,
) -> anyhow::Result<String> {
    let mut table = String::from(
        "| call | clients | executions/s | p50 (ms) | p99 (ms) |\n|---|---:|---:|---:|---:|\n",
    );
    for &n in clients {
        let (rate, lat) = step_load(addr, n, duration).await?;
        table.push_str(&format!(
            "| `Step` (`print`) | {n} | {rate:.0} | {:.1} | {:.1} |\n",
            lat.p50_us / 1e3,
            lat.p99_us / 1e3
        ));
    }
    for &n in clients {
        let (rate, lat) = session_load(addr, n, duration).await?;
        table.push_str(&format!(
            "| `Session` stream (reset + step pipelined, `print`) | {n} | {rate:.0} | {:.1} | {:.1} |\n",
            lat.p50_us / 1e3,
            lat.p99_us / 1e3
        ));
    }
    for &n in clients.iter().filter(|&&n| n <= 8) {
        let (rate, lat) = evaluate_load(addr, n, duration, batch).await?;
        table.push_str(&format!(
            "| `Evaluate` ({batch} items/call, latency per call) | {n} | {rate:.0} | {:.1} | {:.1} |\n",
            lat.p50_us / 1e3,
            lat.p99_us / 1e3
        ));
    }
    Ok(table)
}

fn code() -> Option<v1::Value> {
    Some(value_to_proto(&Value::Text(CODE.into())))
}

async fn step_load(
    addr: SocketAddr,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<(f64, Latency)> {
    let mut samples = crate::latency::closed_loop(addr, clients, duration, |_, c, start, end| {
        step_client(c, start, end)
    })
    .await?;
    Ok((
        samples.len() as f64 / duration.as_secs_f64(),
        Latency::from_micros(&mut samples),
    ))
}

/// One session stepping the reference program; resets are not timed.
async fn step_client(
    mut c: EnvServiceClient<Channel>,
    start: Instant,
    end: Instant,
) -> anyhow::Result<Vec<f64>> {
    let make = v1::MakeRequest {
        env_id: "codegym/Code-v0".into(),
        kwargs_json: String::new(),
    };
    let id = c.make(make).await?.into_inner().session_id;
    let reset = || v1::ResetRequest {
        session_id: id.clone(),
        seed: None,
        options_json: TASK.into(),
    };
    let mut samples = Vec::new();
    while Instant::now() < end {
        c.reset(reset()).await?;
        let t0 = Instant::now();
        let step = c
            .step(v1::StepRequest {
                session_id: id.clone(),
                action: code(),
            })
            .await?
            .into_inner();
        anyhow::ensure!(
            step.terminated && step.reward > 0.99,
            "the reference program must solve the task: {step:?}"
        );
        if t0 >= start {
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    c.close(v1::CloseRequest { session_id: id }).await?;
    Ok(samples)
}

async fn session_load(
    addr: SocketAddr,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<(f64, Latency)> {
    let mut samples = crate::latency::closed_loop(addr, clients, duration, |_, c, start, end| {
        session_client(c, start, end)
    })
    .await?;
    Ok((
        samples.len() as f64 / duration.as_secs_f64(),
        Latency::from_micros(&mut samples),
    ))
}

/// One `Session` stream: make once, then each episode's reset and step sent back to back (the
/// pipelining the stream exists for); latency is from the reset's send to the step's answer.
async fn session_client(
    mut c: EnvServiceClient<Channel>,
    start: Instant,
    end: Instant,
) -> anyhow::Result<Vec<f64>> {
    use v1::session_request::Kind as Req;
    use v1::session_response::Kind as Resp;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut responses = c
        .session(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    let send = |kind| v1::SessionRequest {
        request_id: 0,
        kind: Some(kind),
    };
    tx.send(send(Req::Make(v1::MakeRequest {
        env_id: "codegym/Code-v0".into(),
        kwargs_json: String::new(),
    })))
    .await?;
    responses.message().await?.context("stream ended")?;
    let mut samples = Vec::new();
    while Instant::now() < end {
        let t0 = Instant::now();
        tx.send(send(Req::Reset(v1::ResetRequest {
            session_id: String::new(),
            seed: None,
            options_json: TASK.into(),
        })))
        .await?;
        tx.send(send(Req::Step(v1::StepRequest {
            session_id: String::new(),
            action: code(),
        })))
        .await?;
        responses.message().await?.context("stream ended")?;
        match responses.message().await?.context("stream ended")?.kind {
            Some(Resp::Step(s)) if s.terminated && s.reward > 0.99 => {}
            other => anyhow::bail!("the reference program must solve the task: {other:?}"),
        }
        if t0 >= start {
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    Ok(samples)
}

async fn evaluate_load(
    addr: SocketAddr,
    clients: usize,
    duration: Duration,
    batch: usize,
) -> anyhow::Result<(f64, Latency)> {
    let mut calls = crate::latency::closed_loop(addr, clients, duration, |_, c, start, end| {
        evaluate_client(c, batch, start, end)
    })
    .await?;
    let rate = (calls.len() * batch) as f64 / duration.as_secs_f64();
    Ok((rate, Latency::from_micros(&mut calls)))
}

/// One client sending `batch`-item `Evaluate` calls; latency is per call.
pub(crate) async fn evaluate_client(
    mut c: EnvServiceClient<Channel>,
    batch: usize,
    start: Instant,
    end: Instant,
) -> anyhow::Result<Vec<f64>> {
    let items: Vec<_> = (0..batch)
        .map(|_| v1::EvaluateItem {
            seed: None,
            options_json: TASK.into(),
            action: code(),
        })
        .collect();
    let mut calls = Vec::new();
    while Instant::now() < end {
        let t0 = Instant::now();
        evaluate_passing(&mut c, items.clone()).await?;
        if t0 >= start {
            calls.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    Ok(calls)
}

/// One `Evaluate` call of `items` on the coding env, every one of which must pass (a benchmark of
/// failing programs would measure the wrong thing).
pub(crate) async fn evaluate_passing(
    c: &mut EnvServiceClient<Channel>,
    items: Vec<v1::EvaluateItem>,
) -> anyhow::Result<()> {
    let req = v1::EvaluateRequest {
        env_id: "codegym/Code-v0".into(),
        kwargs_json: String::new(),
        items,
    };
    let results = c.evaluate(req).await?.into_inner().results;
    anyhow::ensure!(
        results
            .iter()
            .all(|r| r.step.as_ref().is_some_and(|s| s.reward > 0.99)),
        "every item must pass"
    );
    Ok(())
}
