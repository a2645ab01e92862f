//! `codegym evaluate`: scores a JSONL of completions against a task set (HumanEval convention) and
//! reports pass@k. Scoring is the env's own engine (`env_coding::Scorer`), configured by the
//! `codegym serve` config file (`--config`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use env_coding::completions::{
    default_results_path, evaluate_samples, pass_at_ks, read_samples, write_results,
};
use env_coding::tasks::TaskSet;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Task file (native JSONL, HumanEval .jsonl/.jsonl.gz, MBPP) or `builtin:examples`.
    #[arg(long)]
    tasks: PathBuf,
    /// JSONL of `{"task_id": ..., "completion": ...}`; a completion continues the task's prompt.
    #[arg(long)]
    samples: PathBuf,
    /// Per-sample results (default `<samples>_results.jsonl`), written atomically.
    #[arg(long)]
    out: Option<PathBuf>,
    /// pass@k metrics as JSON (default `<samples>_pass_at_k.json`).
    #[arg(long)]
    metrics: Option<PathBuf>,
    /// Values of k for pass@k (each reported only when every task has at least k samples).
    #[arg(short = 'k', long = "k", value_delimiter = ',', default_values_t = vec![1, 10, 100])]
    k: Vec<usize>,
    #[command(flatten)]
    scoring: super::scoring::ScoringArgs,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let tasks = TaskSet::load(&args.tasks)?;
    let samples = read_samples(&args.samples, &tasks)?;
    let scorer = super::scoring::scorer(args.scoring.coding_config()?).await?;
    let n = samples.len();
    let opts = scorer.options();
    let results = evaluate_samples(&scorer, &tasks, samples, opts).await?;
    let out = args
        .out
        .unwrap_or_else(|| default_results_path(&args.samples));
    write_results(&out, &results)?;
    let metrics = pass_at_ks(&results, &args.k);
    let json = serde_json::to_string_pretty(&metrics)?;
    let metrics_path = args.metrics.unwrap_or_else(|| {
        let mut s = args.samples.as_os_str().to_owned();
        s.push("_pass_at_k.json");
        PathBuf::from(s)
    });
    trajectory::atomic::write_atomic(&metrics_path, format!("{json}\n").as_bytes())
        .with_context(|| format!("cannot write {}", metrics_path.display()))?;
    let passed = results.iter().filter(|r| r.passed).count();
    eprintln!(
        "{passed} of {n} samples passed; results in {}, metrics in {}",
        out.display(),
        metrics_path.display()
    );
    println!("{json}");
    Ok(ExitCode::SUCCESS)
}
