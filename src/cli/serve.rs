//! `codegym serve`: the gRPC environment server, and with `--http` its HTTP facades
//! (SandboxFusion's `/run_code`, OpenEnv's API) on a second listener.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use codegym::server::ServerConfig;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on; port 0 picks a free port (the chosen address is printed on stdout).
    #[arg(long, default_value = "127.0.0.1:50051")]
    addr: SocketAddr,
    /// Maximum sessions open at once (unary and stream); more get RESOURCE_EXHAUSTED.
    #[arg(long)]
    max_sessions: Option<usize>,
    /// Close unary sessions idle this many seconds (their client vanished).
    #[arg(long)]
    idle_timeout_secs: Option<u64>,
    /// Largest request message in bytes.
    #[arg(long)]
    max_request_bytes: Option<usize>,
    /// On SIGTERM/SIGINT, answer health checks NOT_SERVING and refuse new sessions for this many
    /// seconds while open sessions go on, then stop (default 0: stop at once).
    #[arg(long)]
    drain_secs: Option<u64>,
    #[command(flatten)]
    coding: super::scoring::CodingFlags,
    /// The same as `--isolation strict` (the default): kept for existing deployments.
    #[arg(long, conflicts_with = "isolation")]
    require_isolation: bool,
    /// A directory whose task files clients may load with the `tasks` make kwarg (repeatable;
    /// by default only the built-in and the configured default task sets).
    #[arg(long = "tasks-dir", value_name = "DIR")]
    tasks_dirs: Vec<PathBuf>,
    /// Also serve the HTTP facades (SandboxFusion `/run_code`, OpenEnv `/openenv/NS/NAME/...`) on
    /// this address; port 0 picks a free port (printed as a second line, `http listening on ADDR`).
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// An environment variable holding a bearer token the HTTP listener then requires
    /// (`Authorization: Bearer TOKEN`); by default the HTTP listener has no auth.
    #[arg(long, value_name = "VAR")]
    http_auth_token_env: Option<String>,
    /// Serve the task file PATH (native, HumanEval or MBPP) as SandboxFusion dataset NAME on the HTTP
    /// listener (`/list_datasets`, `/get_prompts`, `/get_prompt_by_id`, `/submit`); repeatable, and
    /// added to (or replacing by name) the config's `http.datasets`.
    #[arg(long = "http-dataset", value_name = "NAME=PATH", value_parser = parse_dataset)]
    http_datasets: Vec<(String, PathBuf)>,
    /// JSON config file: `{"server": {...}, "coding": {...}}` (see docs/server.md); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Serve Prometheus metrics (sessions, steps, sandbox executions and latency, queue depth,
    /// fork-server restarts, errors by gRPC code) at `http://ADDR/metrics`; port 0 picks a free port
    /// (printed as `metrics listening on ADDR` after the other listeners' lines).
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<SocketAddr>,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut config = match &args.config {
        Some(path) => codegym::config::load(path)?,
        None => codegym::config::Config::default(),
    };
    apply_flags(&args, &mut config.server);
    // The config file's `coding` section (default isolation strict), unless a flag says; the
    // same flags and order as every command that scores (`scoring.rs`).
    args.coding.apply(&mut config.coding)?;
    if args.require_isolation {
        config.coding.sandbox.min_isolation = codegym_sandbox::IsolationLevel::Strict;
    }
    for dir in &args.tasks_dirs {
        anyhow::ensure!(
            dir.is_dir(),
            "--tasks-dir {}: not a directory",
            dir.display()
        );
        config.coding.task_dirs.push(dir.clone());
    }
    // Probing the sandbox blocks for tens of milliseconds: not on the runtime.
    let coding = config.coding;
    let (registry, sandbox) =
        tokio::task::spawn_blocking(move || codegym::registry_and_sandbox(coding))
            .await?
            .context("cannot set up the environments")?;
    let sandbox_report = sandbox.isolation().clone();
    let http_addr = args.http.or(config.http.addr);
    let auth_var = args
        .http_auth_token_env
        .clone()
        .or(config.http.auth_token_env.clone());
    let auth_token = match auth_var.filter(|_| http_addr.is_some()) {
        Some(var) => {
            let token = std::env::var(&var)
                .with_context(|| format!("the HTTP auth token variable {var} is not set"))?;
            anyhow::ensure!(
                !token.is_empty(),
                "the HTTP auth token variable {var} is empty"
            );
            Some(token)
        }
        None => None,
    };
    let mut dataset_files = std::mem::take(&mut config.http.datasets);
    dataset_files.extend(args.http_datasets.iter().cloned());
    if http_addr.is_none() && !dataset_files.is_empty() {
        tracing::warn!(
            "datasets are configured but there is no HTTP listener (--http): not served"
        );
    }
    let datasets = match http_addr {
        Some(_) => tokio::task::spawn_blocking(move || {
            codegym::http::datasets::Datasets::load(&dataset_files)
        })
        .await?
        .context("cannot load the HTTP datasets")?,
        None => Default::default(),
    };
    // Before the first line: from then on a SIGTERM must mean a graceful stop.
    let shutdown = super::signal::shutdown_signal();
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.addr))?;
    let local = listener.local_addr()?;
    // Scripts and tests read the chosen port from this first line.
    println!("listening on {local}");
    let http = match http_addr {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (HTTP)"))?;
            println!("http listening on {}", listener.local_addr()?);
            Some(codegym::http::HttpListener {
                listener,
                sandbox,
                options: codegym::http::HttpOptions {
                    auth_token,
                    openenv_kwargs: config.http.openenv_kwargs.clone(),
                    max_sessions_per_client: config.http.max_sessions_per_client,
                    datasets,
                },
            })
        }
        None => None,
    };
    if let Some(addr) = args.metrics_addr {
        let local = super::metrics::install(addr, codegym::metrics::describe).await?;
        codegym_sandbox::metrics::isolation(&sandbox_report);
        println!("metrics listening on {local}");
    }
    std::io::stdout().flush()?;
    codegym::listeners::serve_with_http(
        Arc::new(registry),
        config.server,
        listener,
        http,
        shutdown,
    )
    .await?;
    Ok(ExitCode::SUCCESS)
}

/// `NAME=PATH` of `--http-dataset`.
fn parse_dataset(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => {
            Ok((name.to_string(), PathBuf::from(path)))
        }
        _ => Err(format!("expected NAME=PATH, got {s:?}")),
    }
}

fn apply_flags(args: &Args, server: &mut ServerConfig) {
    if let Some(n) = args.max_sessions {
        server.max_sessions = n;
    }
    if let Some(s) = args.idle_timeout_secs {
        server.idle_timeout_ms = s.saturating_mul(1000);
    }
    if let Some(b) = args.max_request_bytes {
        server.max_request_bytes = b;
    }
    if let Some(s) = args.drain_secs {
        server.drain_ms = s.saturating_mul(1000);
    }
}
