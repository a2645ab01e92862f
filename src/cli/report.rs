//! `codegym report`: a rollout dataset as one self-contained HTML page (`trainer_bridge::report`),
//! and on stdout the line or two a terminal needs (episodes; cross-checks by outcome and the
//! tasks whose rewarded programs disagreed with the reference).

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Rollout dataset (JSONL of trajectory records, as written by `codegym rollout`).
    #[arg(value_name = "RUN.jsonl")]
    input: PathBuf,
    /// The HTML file to write (atomically).
    #[arg(short, long, value_name = "FILE", default_value = "report.html")]
    out: PathBuf,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Reading and rendering a large dataset takes a while: off the runtime.
    let out = args.out.clone();
    let aggregate = tokio::task::spawn_blocking(move || {
        trainer_bridge::report::write_report(&args.input, &args.out)
    })
    .await??;
    println!(
        "report: {} ({} episodes)",
        out.display(),
        aggregate.episodes
    );
    if !aggregate.cross_checks.is_empty() {
        println!("cross-checks: {}", aggregate.cross_checks);
    }
    if !aggregate.disagreeing_tasks.is_empty() {
        println!(
            "disagreeing with the reference: {}",
            aggregate.disagreeing_tasks.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
