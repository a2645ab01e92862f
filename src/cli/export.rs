//! `codegym export`: rollout dataset to RL / SFT / DPO training data (JSONL or Parquet).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::ValueEnum;
use trainer_bridge::{Estimator, ExportConfig, ExportFormat, InfraErrorPolicy, MaskPolicy};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Rollout dataset (JSONL of trajectory records, as written by `codegym rollout`).
    #[arg(long = "in", value_name = "ROLLOUT.jsonl")]
    input: PathBuf,
    /// What to produce.
    #[arg(long, value_enum)]
    format: Format,
    /// Output file; `.jsonl` or `.parquet` selects the encoding. Written atomically.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// JSON file with an `ExportConfig` (advantage, sft, dpo sections); flags below override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Advantage estimator (rl).
    #[arg(long, value_enum)]
    estimator: Option<Est>,
    /// GRPO's std epsilon (rl).
    #[arg(long)]
    eps: Option<f64>,
    /// Drop groups whose rewards are all equal (rl).
    #[arg(long)]
    drop_zero_variance: bool,
    /// Truncated episodes (max turns, context length, timeout) (rl).
    #[arg(long, value_enum)]
    truncated: Option<Mask>,
    /// Episodes that ended in an infrastructure failure (the model endpoint or the environment
    /// failed, a server was lost, the run was interrupted), never a reward (rl): `mask` keeps the
    /// row flagged `masked` with no reward or advantage (the default), `drop` leaves it out.
    /// Either way they are outside their group's advantage statistics.
    #[arg(long, value_enum, value_name = "POLICY")]
    on_infra_error: Option<OnInfraError>,
    /// Replaced by --on-infra-error; refused with the reason.
    #[arg(long, hide = true, value_name = "POLICY")]
    errored: Option<String>,
    /// Solved means total reward >= this, instead of the episode's `solved` flag (sft, dpo).
    #[arg(long)]
    min_reward: Option<f64>,
    /// At most this many DPO pairs per group.
    #[arg(long)]
    max_pairs_per_group: Option<usize>,
    /// At most this many SFT examples per group.
    #[arg(long)]
    max_per_group: Option<usize>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Rl,
    Sft,
    Dpo,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Est {
    Grpo,
    DrGrpo,
    Rloo,
    Return,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OnInfraError {
    Mask,
    Drop,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Mask {
    Keep,
    Exclude,
    ZeroReward,
}

fn mask(m: Mask) -> MaskPolicy {
    match m {
        Mask::Keep => MaskPolicy::Keep,
        Mask::Exclude => MaskPolicy::Exclude,
        Mask::ZeroReward => MaskPolicy::ZeroReward,
    }
}

fn config(args: &Args) -> anyhow::Result<ExportConfig> {
    let mut c: ExportConfig = match &args.config {
        Some(path) => codegym::config::load_json(path)?,
        None => ExportConfig::default(),
    };
    c.format = match args.format {
        Format::Rl => ExportFormat::Rl,
        Format::Sft => ExportFormat::Sft,
        Format::Dpo => ExportFormat::Dpo,
    };
    if let Some(e) = args.estimator {
        c.advantage.estimator = match e {
            Est::Grpo => Estimator::Grpo,
            Est::DrGrpo => Estimator::DrGrpo,
            Est::Rloo => Estimator::Rloo,
            Est::Return => Estimator::Return,
        };
    }
    if let Some(eps) = args.eps {
        c.advantage.eps = eps;
    }
    if args.drop_zero_variance {
        c.advantage.drop_zero_variance = true;
    }
    if let Some(m) = args.truncated {
        c.advantage.truncated = mask(m);
    }
    if args.errored.is_some() {
        anyhow::bail!("--errored: {}", trainer_bridge::ERRORED_REPLACED);
    }
    if let Some(p) = args.on_infra_error {
        c.on_infra_error = match p {
            OnInfraError::Mask => InfraErrorPolicy::Mask,
            OnInfraError::Drop => InfraErrorPolicy::Drop,
        };
    }
    if let Some(r) = args.min_reward {
        c.sft.min_reward = Some(r);
        c.dpo.min_reward = Some(r);
    }
    if args.max_pairs_per_group.is_some() {
        c.dpo.max_pairs_per_group = args.max_pairs_per_group;
    }
    if args.max_per_group.is_some() {
        c.sft.max_per_group = args.max_per_group;
    }
    Ok(c)
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = config(&args)?;
    let (input, out) = (args.input, args.out);
    // Parsing and encoding are CPU and file work: keep them off the async workers.
    let summary = tokio::task::spawn_blocking(move || {
        trainer_bridge::export(&input, &out, &config).map(|s| (s, out))
    })
    .await
    .context("export task failed")??;
    let (summary, out) = summary;
    println!(
        "wrote {} rows ({} masked: infrastructure failures) from {} episodes to {}",
        summary.rows,
        summary.masked,
        summary.episodes,
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}
