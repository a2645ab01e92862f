//! Argument parsing and dispatch. Each subcommand has its own module with a clap `Args` struct and a
//! `run` function; they translate flags into the library crates' config structs and nothing more.

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

mod doctor;
mod envs;
mod evaluate;
mod export;
mod rollout;
mod run;
mod serve;
mod signal;
mod tasks;

#[derive(Debug, Parser)]
#[command(
    name = "codegym",
    version,
    about = "Gymnasium-style RL environments for code-writing LLMs"
)]
struct Cli {
    /// Log format on stderr; the level comes from RUST_LOG (default `info`).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve environments over gRPC (codegym.v1.EnvService).
    Serve(serve::Args),
    /// List the registered environments.
    Envs(envs::Args),
    /// Report which sandbox isolation layers this machine supports.
    Doctor(doctor::Args),
    /// Task dataset tools.
    #[command(subcommand)]
    Tasks(tasks::Command),
    /// Score a JSONL of completions against a task set (HumanEval convention), with pass@k.
    Evaluate(evaluate::Args),
    /// Run multi-turn episodes against an OpenAI-compatible LLM endpoint and write trajectories.
    Rollout(rollout::Args),
    /// Turn a rollout dataset into training data (RL / SFT / DPO; JSONL or Parquet).
    Export(export::Args),
    /// Run a solution (a file or a rollout episode) on a data task's files and new inputs; print
    /// its typed outputs.
    Run(run::Args),
}

/// Parses arguments, installs the tracing subscriber, runs the command on a tokio runtime.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    // The descriptor table is grown first, while this is the only thread (`codegym::fds` says why:
    // the rollout benchmark's first round stalled on RCU grace periods without it).
    let runtime = match codegym::fds::start_runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Envs(args) => envs::run(args).await,
            Command::Doctor(args) => doctor::run(args).await,
            Command::Tasks(cmd) => tasks::run(cmd).await,
            Command::Evaluate(args) => evaluate::run(args).await,
            Command::Rollout(args) => rollout::run(args).await,
            Command::Export(args) => export::run(args).await,
            Command::Run(args) => run::run(args).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
