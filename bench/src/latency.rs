//! Latency samples shared by the drivers: closed-loop gRPC clients and their percentiles.

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use proto::v1::env_service_client::EnvServiceClient;
use tonic::transport::Channel;

/// Runs `clients` closed-loop gRPC clients against `addr`, each on its own connection and task, and
/// returns every latency sample (us) they took inside the measured window. The window opens after a
/// warm-up of a tenth of `duration` and lasts `duration`; `client(i, conn, start, end)` keeps one
/// request in flight and records only requests started inside `start..end`.
pub async fn closed_loop<F, Fut>(
    addr: SocketAddr,
    clients: usize,
    duration: Duration,
    client: F,
) -> anyhow::Result<Vec<f64>>
where
    F: Fn(usize, EnvServiceClient<Channel>, Instant, Instant) -> Fut,
    Fut: Future<Output = anyhow::Result<Vec<f64>>> + Send + 'static,
{
    let start = Instant::now() + duration / 10;
    let end = start + duration;
    let mut tasks = Vec::with_capacity(clients);
    for i in 0..clients {
        let channel = Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await?;
        tasks.push(tokio::spawn(client(
            i,
            EnvServiceClient::new(channel),
            start,
            end,
        )));
    }
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await??);
    }
    Ok(samples)
}

/// Latency summary of one run.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
}

impl Latency {
    /// Percentiles of samples in microseconds (sorted in place).
    pub fn from_micros(samples: &mut [f64]) -> Latency {
        samples.sort_by(f64::total_cmp);
        let pick = |q: f64| {
            if samples.is_empty() {
                return f64::NAN;
            }
            let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
            samples[i]
        };
        Latency {
            p50_us: pick(0.50),
            p99_us: pick(0.99),
        }
    }
}
