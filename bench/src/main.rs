//! `codegym-bench`: the benchmark drivers whose numbers go into `BENCHMARKS.md`, in a binary of their
//! own so that the production library and the `codegym` binary carry none of them. Each driver returns
//! a Markdown table; [`cli`] maps subcommands onto them.
//!
//! Benchmarks, not tests, own every speed claim: tests never assert wall-clock times.

mod cli;
mod evalplus;
mod exec;
mod false_timeouts;
mod grpc;
mod grpc_coding;
mod grpo;
mod http;
mod lang;
mod latency;
mod pool;
mod repo_copies;
mod repo_copies_table;
mod rollout;
mod rollout_harness;
mod tools;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    init_tracing();
    // The descriptor table is grown first, while this is the only thread (`codegym::fds` says why:
    // the rollout benchmark's first round stalled on RCU grace periods without it).
    let runtime = match codegym::fds::start_runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::run(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Log lines on stderr (stdout carries the tables and the fake model's `listening on` line); the
/// level comes from RUST_LOG (default `info`).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

// The allocator of the `codegym` binary (its `main.rs` says why), so that the numbers measure the
// engine as it ships.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
