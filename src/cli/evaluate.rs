//! `codegym evaluate`: scores a JSONL of completions against a task set (HumanEval convention) and
//! reports pass@k.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use codegym_sandbox::SandboxConfig;
use env_coding::completions::{
    default_results_path, evaluate_samples, pass_at_ks, read_samples, write_results,
};
use env_coding::reward::run::EvalOptions;
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
    /// Python interpreter (default: the real binary behind `python3`).
    #[arg(long, env = "CODEGYM_PYTHON")]
    python: Option<PathBuf>,
    /// Wall-clock budget of each unit test, in ms.
    #[arg(long, default_value_t = 3_000)]
    per_test_timeout_ms: u64,
    #[command(flatten)]
    isolation: super::isolation::IsolationArg,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let tasks = TaskSet::load(&args.tasks)?;
    let samples = read_samples(&args.samples, &tasks)?;
    let config = SandboxConfig {
        python: args.python,
        min_isolation: args.isolation.level(SandboxConfig::default().min_isolation),
        ..SandboxConfig::default()
    };
    let sandbox = tokio::task::spawn_blocking(move || env_coding::new_sandbox(config))
        .await?
        .context("cannot start the sandbox")?;
    let n = samples.len();
    let opts = EvalOptions {
        limits: None,
        per_test_timeout_ms: args.per_test_timeout_ms,
    };
    let results = evaluate_samples(&sandbox, &tasks, samples, opts).await?;
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
