//! `codegym-bench pool`: rollout throughput against 1, 2, 3... local `codegym serve` processes
//! through the remote backend's pool (health checks, least-loaded placement, one `Session` stream
//! per episode, tasks inline), with the fake model and the real coding env running every program
//! in its sandbox.
//!
//! Every server is a separate `codegym serve` process (the `codegym` binary beside this one, or
//! `--codegym-bin`), so each has its own sandbox and fork server, as on separate machines. On one
//! machine they share its cores: the numbers show the pool's overhead and how evenly it spreads
//! episodes, not the scaling that more machines would give.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rollout::config::{ProgressMode, RolloutConfig};
use tokio_util::sync::CancellationToken;

use crate::rollout_harness::{
    FAKE_WORKERS, FakeServer, FakeServerPlace, cpu_secs, spawn_listening,
};

/// Parameters of the benchmark.
#[derive(Debug, Clone)]
pub struct PoolBenchArgs {
    pub servers: Vec<usize>,
    /// Samples per bundled example task (episodes = tasks x samples).
    pub samples: u32,
    pub turns: u32,
    pub latency: Duration,
    pub concurrency: usize,
    pub codegym_bin: Option<PathBuf>,
    /// A `codegym serve --config` file for every server.
    pub server_config: Option<PathBuf>,
}

/// A `codegym serve` process, killed on drop.
struct Server {
    child: tokio::process::Child,
    url: String,
}

async fn start_server(bin: &PathBuf, config: Option<&PathBuf>) -> anyhow::Result<Server> {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.args(["serve", "--addr", "127.0.0.1:0"]);
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    cmd.env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null());
    // The env servers under measurement, as separate processes like separate machines.
    let (child, addr) = spawn_listening(cmd, "codegym serve").await?;
    Ok(Server {
        url: format!("http://{addr}"),
        child,
    })
}

/// The `codegym` binary under measurement: `given`, else the one beside this benchmark's.
pub(crate) fn codegym_bin(given: Option<&PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(b) = given {
        return Ok(b.clone());
    }
    let exe = std::env::current_exe()?;
    let beside = exe.with_file_name("codegym");
    anyhow::ensure!(
        beside.exists(),
        "no codegym binary beside {} (build it: cargo build --release -p codegym), or pass --codegym-bin",
        exe.display()
    );
    Ok(beside)
}

/// One row: `n` servers.
async fn measure(args: &PoolBenchArgs, bin: &PathBuf, n: usize) -> anyhow::Result<String> {
    let mut servers = Vec::new();
    for _ in 0..n {
        servers.push(start_server(bin, args.server_config.as_ref()).await?);
    }
    let model = FakeServer::start(FakeServerPlace::Process, args.latency, FAKE_WORKERS).await?;
    let tasks = env_coding::tasks::TaskSet::builtin_examples();
    let dir = std::env::temp_dir().join(format!("codegym-bench-pool-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir)?;
    let mut config = RolloutConfig {
        tasks: tasks.ids().map(String::from).collect(),
        samples: args.samples,
        concurrency: args.concurrency,
        env_servers: servers.iter().map(|s| s.url.clone()).collect(),
        ..RolloutConfig::default()
    };
    config.model.model = "bench/model".into();
    config.model.base_urls = vec![model.base_url()];
    config.model.api_key_env = Some(Vec::new());
    config.episode.max_turns = args.turns;
    config.output.out = dir.join("pool.jsonl");
    config.output.progress = ProgressMode::Off;
    let inline = tasks.iter().map(|t| (t.id.clone(), t.to_json())).collect();
    let backend =
        rollout::backend::RemoteBackend::connect(&config.env_servers, config.env_pool.clone())
            .await?
            .with_inline_tasks(inline);

    let pids: Vec<String> = servers
        .iter()
        .filter_map(|s| s.child.id().map(|p| p.to_string()))
        .collect();
    let server_cpu = || pids.iter().filter_map(|p| cpu_secs(p)).sum::<f64>();
    let (cpu0, engine0) = (server_cpu(), cpu_secs("self").unwrap_or(0.0));
    let start = Instant::now();
    let summary = rollout::run(
        config,
        rollout::EnvBackend::Remote(backend),
        CancellationToken::new(),
    )
    .await;
    let secs = start.elapsed().as_secs_f64();
    let (cpu, engine) = (
        server_cpu() - cpu0,
        cpu_secs("self").unwrap_or(0.0) - engine0,
    );
    let records = rollout::dataset::read_latest(&dir.join("pool.jsonl"));
    let _ = std::fs::remove_dir_all(&dir);
    let summary = summary?;
    let records = records?;
    anyhow::ensure!(
        summary.errors_by_kind.is_empty(),
        "errors: {:?}",
        summary.errors_by_kind
    );
    let steps: usize = records.iter().map(|r| r.turns.len()).sum();
    let mut per_server: BTreeMap<String, usize> = BTreeMap::new();
    for r in &records {
        *per_server
            .entry(r.env_server.clone().unwrap_or_default())
            .or_default() += 1;
    }
    let spread: Vec<String> = per_server.values().map(usize::to_string).collect();
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
    Ok(format!(
        "| {n} | {} | {} | {:.2} | {:.1} | {:.1} | {} | {:.2} s ({:.0}% of {cores} cores) | {:.2} s |\n",
        records.len(),
        steps,
        secs,
        records.len() as f64 / secs,
        steps as f64 / secs,
        spread.join(" / "),
        cpu,
        cpu / (secs * cores) * 100.0,
        engine,
    ))
}

/// Every server count in turn; returns a Markdown table.
pub async fn run(args: PoolBenchArgs) -> anyhow::Result<String> {
    anyhow::ensure!(
        !args.servers.is_empty() && args.servers.iter().all(|&n| n > 0),
        "server counts must be positive"
    );
    let bin = codegym_bin(args.codegym_bin.as_ref())?;
    let mut t = format!(
        "{} samples of each bundled task, up to {} turns, fake model latency {} ms, concurrency {}\n\n",
        args.samples,
        args.turns,
        args.latency.as_millis(),
        args.concurrency
    );
    t.push_str("| servers | episodes | steps | wall s | episodes/s | steps/s | episodes per server | server processes' own CPU | engine CPU |\n");
    t.push_str("|---:|---:|---:|---:|---:|---:|---|---:|---:|\n");
    for &n in &args.servers {
        t.push_str(&measure(&args, &bin, n).await?);
    }
    Ok(t)
}
