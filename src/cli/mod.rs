//! Argument parsing and dispatch. Each subcommand has its own module with a clap `Args` struct and a
//! `run` function; they translate flags into the library crates' config structs and nothing more.

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

mod audit;
mod cross_check;
mod doctor;
mod envs;
mod evaluate;
mod export;
mod isolation;
mod local_model;
mod metrics;
mod report;
mod rescore;
mod rollout;
mod rollout_tasks;
mod run;
mod scoring;
mod serve;
mod signal;
mod tasks;
mod telemetry;

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
    /// Write a rollout dataset's report: one self-contained HTML page (pass rates, charts,
    /// trajectory browser).
    Report(report::Args),
    /// Score a rollout's programs again with the current tasks, reward specs and sandbox; write
    /// the dataset with the new rewards (the recorded ones kept) and explain every change.
    Rescore(rescore::Args),
    /// Run the reward-hacking corpus against a task set: every exploit that earns a reward on a
    /// task is reported; exits non-zero if a task not marked known-weak can be hacked.
    Audit(audit::Args),
}

/// Parses arguments, installs the tracing subscriber, runs the command on a tokio runtime.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let otlp = match &cli.command {
        Command::Rollout(args) => args.otlp_endpoint().map(str::to_owned),
        _ => None,
    };
    // Without trace export the log is set up at once, so that the runtime's start-up is logged;
    // the OTLP exporter needs the runtime, so it is set up on it.
    if otlp.is_none()
        && let Err(e) = telemetry::init(cli.log_format, None)
    {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
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
        let telemetry = match &otlp {
            Some(endpoint) => telemetry::init(cli.log_format, Some(endpoint))?,
            None => None,
        };
        let result = match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Envs(args) => envs::run(args).await,
            Command::Doctor(args) => doctor::run(args).await,
            Command::Tasks(cmd) => tasks::run(cmd).await,
            Command::Evaluate(args) => evaluate::run(args).await,
            Command::Rollout(args) => rollout::run(args).await,
            Command::Export(args) => export::run(args).await,
            Command::Run(args) => run::run(args).await,
            Command::Report(args) => report::run(args).await,
            Command::Rescore(args) => rescore::run(args).await,
            Command::Audit(args) => audit::run(args).await,
        };
        if let Some(telemetry) = telemetry {
            // The last batch goes out on the SDK's thread through a channel on this runtime.
            tokio::task::spawn_blocking(move || telemetry.shutdown()).await?;
        }
        result
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
