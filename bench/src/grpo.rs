//! `codegym-bench grpo`: `Evaluate` on GRPO-shaped batches, where each prompt's group of `group`
//! completions holds identical programs (the common case for easy prompts at low temperature), with
//! verdict sharing on and off. Two in-process servers, measured in alternating rounds so that a noisy
//! host hits both alike. Every call sends programs never seen before (a per-call tag), so the gain is
//! in-batch deduplication alone, not cache hits left over from earlier calls.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use env_core::Value;
use proto::convert::value_to_proto;
use proto::v1::{self, env_service_client::EnvServiceClient};
use tonic::transport::Channel;

/// What to measure.
#[derive(Debug, Clone)]
pub struct GrpoBenchArgs {
    pub batch: usize,
    pub group: usize,
    pub clients: usize,
    pub rounds: usize,
    pub duration: Duration,
}

/// Unique tags for programs across every call of the run.
static CALLS: AtomicU64 = AtomicU64::new(0);

pub async fn run(args: GrpoBenchArgs) -> anyhow::Result<String> {
    anyhow::ensure!(
        args.group > 0 && args.batch.is_multiple_of(args.group),
        "--batch must be a multiple of --group"
    );
    let shared = start(64).await?;
    let alone = start(0).await?;
    let mut table =
        String::from("| round | sharing on: items/s | sharing off: items/s |\n|---:|---:|---:|\n");
    for round in 1..=args.rounds {
        let on = measure(shared.0, &args).await?;
        let off = measure(alone.0, &args).await?;
        table.push_str(&format!("| {round} | {on:.0} | {off:.0} |\n"));
    }
    table.push_str(&format!(
        "\n{} items per call in groups of {} identical programs, {} clients, {:?} per cell.\n",
        args.batch, args.group, args.clients, args.duration
    ));
    Ok(table)
}

type Server = (SocketAddr, tokio::sync::oneshot::Sender<()>);

/// An in-process server whose coding env shares verdicts in `mib` MiB (0: off).
async fn start(mib: u64) -> anyhow::Result<Server> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let config = env_coding::CodingConfig {
        verdict_cache_mib: mib,
        ..Default::default()
    };
    let registry = tokio::task::spawn_blocking(move || codegym::registry(config)).await??;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(codegym::server::serve(
        Arc::new(registry),
        Default::default(),
        listener,
        async {
            let _ = rx.await;
        },
    ));
    Ok((addr, tx))
}

/// Items per second over `duration` with `clients` closed-loop callers.
async fn measure(addr: SocketAddr, args: &GrpoBenchArgs) -> anyhow::Result<f64> {
    let calls =
        crate::latency::closed_loop(addr, args.clients, args.duration, |_, c, start, end| {
            client(c, args.batch, args.group, start, end)
        })
        .await?;
    Ok((calls.len() * args.batch) as f64 / args.duration.as_secs_f64())
}

async fn client(
    mut c: EnvServiceClient<Channel>,
    batch: usize,
    group: usize,
    start: Instant,
    end: Instant,
) -> anyhow::Result<Vec<f64>> {
    let mut calls = Vec::new();
    while Instant::now() < end {
        let tag = CALLS.fetch_add(1, Ordering::Relaxed);
        let items = (0..batch)
            .map(|i| v1::EvaluateItem {
                seed: None,
                options_json: r#"{"task_id": "hello-world"}"#.into(),
                action: Some(value_to_proto(&Value::Text(format!(
                    "print('Hello, world!')  # call {tag}, prompt {}\n",
                    i / group
                )))),
            })
            .collect();
        let t0 = Instant::now();
        crate::grpc_coding::evaluate_passing(&mut c, items).await?;
        if t0 >= start {
            calls.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    Ok(calls)
}
