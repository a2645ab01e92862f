//! `codegym-bench grpc`: CartPole step round trips over gRPC, unary and stream, at several client
//! counts. Each client owns one session and one connection and keeps exactly one request in flight, so
//! latency is a true round trip and throughput is what closed-loop clients achieve.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use env_core::Value;
use proto::convert::value_to_proto;
use proto::v1::{self, env_service_client::EnvServiceClient, session_request::Kind as Req};
use tokio::sync::mpsc;
use tonic::transport::Channel;

use crate::latency::Latency;

/// What to measure.
#[derive(Debug, Clone)]
pub struct GrpcBenchArgs {
    /// Concurrent clients per row.
    pub clients: Vec<usize>,
    /// Measured time per row (after a warm-up of a tenth of it).
    pub duration: Duration,
    /// An external server to measure; `None` starts one in this process.
    pub addr: Option<SocketAddr>,
    /// Which environment to drive.
    pub env: BenchEnv,
    /// Items per `Evaluate` call (coding env only).
    pub batch: usize,
}

/// The environment under load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchEnv {
    /// `classic/CartPole-v1`: measures the server and the transport alone.
    Cartpole,
    /// `codegym/Code-v0`: sandboxed executions through the server.
    Python,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Unary,
    Stream,
}

/// Runs every (mode, clients) row and returns the Markdown table.
pub async fn run(args: GrpcBenchArgs) -> anyhow::Result<String> {
    let (addr, _server) = match args.addr {
        Some(a) => (a, None),
        None => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            let registry = codegym::registry(crate::exec::unshared_config())?;
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let handle = tokio::spawn(codegym::server::serve(
                Arc::new(registry),
                Default::default(),
                listener,
                async {
                    let _ = rx.await;
                },
            ));
            (addr, Some((tx, handle)))
        }
    };
    if args.env == BenchEnv::Python {
        return crate::grpc_coding::run(addr, &args.clients, args.duration, args.batch).await;
    }
    let mut table = String::from(
        "| transport | clients | steps/s | p50 (us) | p99 (us) |\n|---|---:|---:|---:|---:|\n",
    );
    for mode in [Mode::Unary, Mode::Stream] {
        for &clients in &args.clients {
            let (rate, lat) = measure(addr, mode, clients, args.duration).await?;
            let name = if mode == Mode::Unary {
                "unary `Step`"
            } else {
                "`Session` stream"
            };
            table.push_str(&format!(
                "| {name} | {clients} | {rate:.0} | {:.0} | {:.0} |\n",
                lat.p50_us, lat.p99_us
            ));
            tracing::info!(
                ?mode,
                clients,
                steps_per_s = rate as u64,
                p50_us = lat.p50_us,
                p99_us = lat.p99_us,
                "row done"
            );
        }
    }
    Ok(table)
}

async fn measure(
    addr: SocketAddr,
    mode: Mode,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<(f64, Latency)> {
    let mut samples =
        crate::latency::closed_loop(addr, clients, duration, |i, c, start, end| async move {
            match mode {
                Mode::Unary => unary_client(c, i as u64, start, end).await,
                Mode::Stream => stream_client(c, i as u64, start, end).await,
            }
        })
        .await?;
    let rate = samples.len() as f64 / duration.as_secs_f64();
    Ok((rate, Latency::from_micros(&mut samples)))
}

fn action(i: u64) -> Option<v1::Value> {
    Some(value_to_proto(&Value::Discrete((i % 2) as i64)))
}

async fn unary_client(
    mut c: EnvServiceClient<Channel>,
    seed: u64,
    start: Instant,
    end: Instant,
) -> anyhow::Result<Vec<f64>> {
    let make = v1::MakeRequest {
        env_id: "classic/CartPole-v1".into(),
        kwargs_json: String::new(),
    };
    let id = c.make(make).await?.into_inner().session_id;
    let reset = |seed| v1::ResetRequest {
        session_id: id.clone(),
        seed: Some(seed),
        options_json: String::new(),
    };
    c.reset(reset(seed)).await?;
    let mut samples = Vec::new();
    let mut n = 0u64;
    loop {
        let t0 = Instant::now();
        if t0 >= end {
            break;
        }
        let step = c
            .step(v1::StepRequest {
                session_id: id.clone(),
                action: action(n),
            })
            .await?
            .into_inner();
        if t0 >= start {
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        n += 1;
        if step.terminated || step.truncated {
            c.reset(reset(seed + n)).await?;
        }
    }
    c.close(v1::CloseRequest { session_id: id }).await?;
    Ok(samples)
}

async fn stream_client(
    mut c: EnvServiceClient<Channel>,
    seed: u64,
    start: Instant,
    end: Instant,
) -> anyhow::Result<Vec<f64>> {
    let (tx, rx) = mpsc::channel(1);
    let mut responses = c
        .session(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    let mut call = async |kind: Req| -> anyhow::Result<v1::SessionResponse> {
        tx.send(v1::SessionRequest {
            request_id: 0,
            kind: Some(kind),
        })
        .await?;
        responses
            .message()
            .await?
            .ok_or_else(|| anyhow::anyhow!("stream ended"))
    };
    let make = v1::MakeRequest {
        env_id: "classic/CartPole-v1".into(),
        kwargs_json: String::new(),
    };
    call(Req::Make(make)).await?;
    let reset = |seed| {
        Req::Reset(v1::ResetRequest {
            session_id: String::new(),
            seed: Some(seed),
            options_json: String::new(),
        })
    };
    call(reset(seed)).await?;
    let mut samples = Vec::new();
    let mut n = 0u64;
    loop {
        let t0 = Instant::now();
        if t0 >= end {
            break;
        }
        let r = call(Req::Step(v1::StepRequest {
            session_id: String::new(),
            action: action(n),
        }))
        .await?;
        if t0 >= start {
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        n += 1;
        match r.kind {
            Some(v1::session_response::Kind::Step(s)) if s.terminated || s.truncated => {
                call(reset(seed + n)).await?;
            }
            Some(v1::session_response::Kind::Step(_)) => {}
            other => anyhow::bail!("unexpected response: {other:?}"),
        }
    }
    Ok(samples)
}
