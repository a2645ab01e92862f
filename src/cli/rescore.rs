//! `codegym rescore`: a rollout's programs (a repository episode's diff) scored again with the
//! current tasks, reward specs and sandbox (`env_coding::rescore`), written as a dataset with the new rewards in place and the
//! recorded ones kept, plus a summary of what changed and why; with `--cross-check`, rewarded
//! programs also compared with their task's reference, as `rollout --cross-check` does.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use env_coding::rescore::{Rescorer, Turns};
use env_coding::tasks::BUILTIN_EXAMPLES_NAME;
use env_core::contract::repo::REPO_ENV_ID;
use trajectory::TrajectoryRecord;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Rollout dataset (JSONL of trajectory records, as written by `codegym rollout`).
    #[arg(value_name = "RUN.jsonl")]
    input: PathBuf,
    /// The rescored dataset to write (atomically); its summary goes beside it as
    /// `FILE.rescore.json`.
    #[arg(short, long, value_name = "RESCORED.jsonl")]
    out: PathBuf,
    /// The current task set (a task file codegym loads, or `builtin:examples`); default: the one
    /// the rollout names (its manifest's or records' `env_kwargs.tasks`), else the built-in
    /// examples.
    #[arg(long, value_name = "FILE")]
    tasks: Option<String>,
    /// Which steps to rescore: each episode's final scored step, or every scored step.
    #[arg(long, value_enum, default_value_t = TurnsArg::Final)]
    turns: TurnsArg,
    /// Run each program N times (verdict cache off) and report those whose rewards differ.
    #[arg(long, value_name = "N", default_value_t = 1)]
    repeat: u32,
    /// Print the summary as JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    scoring: super::scoring::ScoringArgs,
    #[command(flatten)]
    cross_check: super::cross_check::CrossCheckArgs,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum TurnsArg {
    Final,
    All,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.repeat >= 1, "--repeat must be at least 1");
    let input = args.input.clone();
    let records =
        tokio::task::spawn_blocking(move || trajectory::read::read_latest(&input)).await??;
    // A repository episode's answer is a diff, rescored by scoring it again; the others replay
    // their programs. One rescoring is of one kind.
    let repository = records.iter().any(|r| r.env_id == REPO_ENV_ID);
    if let Some(r) = records
        .iter()
        .find(|r| repository && r.env_id != REPO_ENV_ID)
    {
        anyhow::bail!(
            "{} mixes episodes of the repository env {REPO_ENV_ID} with others ({}, episode {}): \
             rescore one kind at a time",
            args.input.display(),
            r.env_id,
            r.episode_id
        );
    }
    let tasks = match &args.tasks {
        Some(t) => t.clone(),
        None => recorded_tasks(&args.input, &records),
    };
    let mut coding = args.scoring.coding_config()?;
    // A repository task's requirements (its test runner) come from the package cache, as in the
    // rollout that recorded it.
    if repository {
        coding.packages.enabled = true;
    }
    let turns = match args.turns {
        TurnsArg::Final => Turns::Final,
        TurnsArg::All => Turns::All,
    };
    let repeat = args.repeat;
    let fraction = args.cross_check.fraction()?.unwrap_or(0.0);
    let on_disagreement = args
        .cross_check
        .on_disagreement
        .map_or_else(Default::default, Into::into);
    let for_rescorer = tasks.clone();
    let rescorer = tokio::task::spawn_blocking(move || match repository {
        true => Rescorer::repository(coding, &for_rescorer, repeat),
        false => Rescorer::new(coding, &for_rescorer, turns, repeat),
    })
    .await?
    .and_then(|r| r.with_cross_checks(fraction, on_disagreement))
    .with_context(|| format!("cannot rescore with tasks {tasks}"))?;
    let (rescored, summary) = rescorer.rescore(records).await;

    let mut data = Vec::new();
    for r in &rescored {
        serde_json::to_writer(&mut data, r)?;
        data.push(b'\n');
    }
    let summary_json = serde_json::to_vec_pretty(&summary)?;
    let (out, summary_path) = (args.out.clone(), sidecar(&args.out, ".rescore.json"));
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        trajectory::atomic::write_atomic(&out, &data)
            .with_context(|| format!("cannot write {}", out.display()))?;
        trajectory::atomic::write_atomic(&summary_path, &summary_json)
            .with_context(|| format!("cannot write {}", summary_path.display()))
    })
    .await??;
    if args.json {
        println!(
            "{}",
            String::from_utf8_lossy(&serde_json::to_vec_pretty(&summary)?)
        );
    } else {
        print!("{}", summary.table());
        println!("rescored: {} (tasks: {tasks})", args.out.display());
    }
    Ok(if summary.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `FILE` + `suffix`.
fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The task set the rollout ran on: its manifest's `config.env_kwargs.tasks`, else its first
/// record's `env_kwargs.tasks`, else the built-in examples (what `rollout` defaults to).
fn recorded_tasks(input: &Path, records: &[TrajectoryRecord]) -> String {
    let manifest = std::fs::read(sidecar(input, ".manifest.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|m| {
            m.pointer("/config/env_kwargs/tasks")?
                .as_str()
                .map(String::from)
        });
    manifest
        .or_else(|| {
            records
                .first()
                .and_then(|r| r.env_kwargs.get("tasks")?.as_str().map(String::from))
        })
        .unwrap_or_else(|| BUILTIN_EXAMPLES_NAME.to_string())
}
