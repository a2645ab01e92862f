//! `codegym doctor`: probes the sandbox once and prints which isolation layers this machine
//! provides (and why a layer is missing).

use std::path::PathBuf;
use std::process::ExitCode;

use env_coding::sandbox::{IsolationLevel, Sandbox, SandboxConfig};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Exit non-zero unless every layer needed for the `strict` level is available.
    #[arg(long)]
    require_isolation: bool,
    /// Python interpreter to check (default: the real binary behind `python3`).
    #[arg(long, env = "CODEGYM_PYTHON")]
    python: Option<PathBuf>,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = SandboxConfig {
        python: args.python,
        ..SandboxConfig::default()
    };
    // Probing spawns processes and blocks for tens of milliseconds.
    let sandbox = tokio::task::spawn_blocking(move || Sandbox::new(config)).await??;
    println!("python: {}", sandbox.python().display());
    print!("{}", sandbox.isolation());
    let level = sandbox.isolation().level;
    if args.require_isolation && level < IsolationLevel::Strict {
        eprintln!("error: isolation level {level} is below strict (--require-isolation)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
