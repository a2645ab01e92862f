//! `codegym bench ...`: the benchmarks whose numbers are recorded in `BENCHMARKS.md`.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use codegym::bench;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// CartPole step round trips over gRPC (unary and stream) at several client counts.
    Grpc {
        /// Comma-separated concurrent client counts.
        #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
        clients: Vec<usize>,
        /// Seconds measured per row.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Measure an already running server instead of an in-process one.
        #[arg(long)]
        addr: Option<SocketAddr>,
    },
}

pub async fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    let table = match cmd {
        Command::Grpc {
            clients,
            seconds,
            addr,
        } => {
            let duration = Duration::try_from_secs_f64(seconds)
                .map_err(|e| anyhow::anyhow!("--seconds {seconds}: {e}"))?;
            bench::grpc::run(bench::grpc::GrpcBenchArgs {
                clients,
                duration,
                addr,
            })
            .await?
        }
    };
    println!("{table}");
    Ok(ExitCode::SUCCESS)
}
