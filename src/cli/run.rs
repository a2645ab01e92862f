//! `codegym run`: runs a solution again, in the sandbox, on a data task's files and on new
//! inputs, and prints its typed outputs (Flyte's `as_task`). The solution is a Python file or an
//! episode of a rollout dataset (its last program).
//!
//! ```text
//! codegym run --solution out.jsonl#EPISODE_ID --task tasks.jsonl --task-id sales -- --region east
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use env_coding::Submission;
use env_coding::data::RawData;
use env_coding::reward::run::Program;
use env_coding::tasks::{Task, TaskSet};
use env_core::OutputValue;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A Python file, or a rollout JSONL (`FILE#EPISODE_ID` for one episode; default: the last
    /// solved episode, else the last one), whose last program is run.
    #[arg(long)]
    solution: String,
    /// The task file (native JSONL): its files, inputs, outputs and requirements are used.
    #[arg(long)]
    task: PathBuf,
    /// The task's id (default: the file's only task).
    #[arg(long)]
    task_id: Option<String>,
    /// Print the whole execution result as JSON instead of `name = value` lines.
    #[arg(long)]
    json: bool,
    /// Where task requirements are cached (default: the config's `coding.packages.cache_dir`).
    #[arg(long, value_name = "DIR")]
    package_cache: Option<PathBuf>,
    /// New inputs, `--name value` pairs (after `--`), replacing the task's by name.
    #[arg(last = true, value_name = "--NAME VALUE")]
    inputs: Vec<String>,
    #[command(flatten)]
    scoring: super::scoring::ScoringArgs,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (source, solution_requirements) = solution_source(&args.solution)?;
    let set = TaskSet::load(&args.task)?;
    let task = match &args.task_id {
        Some(id) => set
            .get(id)
            .with_context(|| format!("no task {id:?} in {}", args.task.display()))?,
        None if set.len() == 1 => set.by_index(0).context("empty task set")?,
        None => bail!(
            "{} has {} tasks: choose one with --task-id",
            args.task.display(),
            set.len()
        ),
    };
    let mut task = Task::clone(task);
    let inputs = parse_inputs(&args.inputs)?;
    if !inputs.is_empty() {
        let raw = RawData {
            inputs: Some(serde_json::Value::Object(inputs)),
            ..RawData::default()
        };
        task.data.overlay(raw, None).map_err(anyhow::Error::msg)?;
    }
    // An AutoCoder episode's solution runs with the requirements it was scored with.
    for r in solution_requirements {
        if !task.data.requirements.contains(&r) {
            task.data.requirements.push(r);
        }
    }
    let mut coding = args.scoring.coding_config()?;
    // A task's requirements are what it runs with: asking for them is asking to install them.
    coding.packages.enabled |= !task.data.requirements.is_empty();
    if let Some(dir) = args.package_cache {
        coding.packages.cache_dir = dir;
    }
    // The task's checks are not this command's business: the program runs ungraded, through the
    // same engine (sandbox, packages, data) as a scored submission.
    task.reward.components.clear();
    let scorer = super::scoring::scorer(coding).await?;
    let program = Program::new(source);
    let result = scorer
        .score(Arc::new(task), Submission::Run(program), scorer.options())
        .await?
        .execution;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        eprint!("{}", result.stderr);
        for (name, value) in &result.outputs {
            match value {
                OutputValue::Value(v) => println!("{name} = {v}"),
                OutputValue::Error(e) => println!("{name}: error: {e}"),
            }
        }
        if result.outputs.is_empty() {
            print!("{}", result.stdout);
        }
    }
    let ok = result.success()
        && result
            .outputs
            .values()
            .all(|v| matches!(v, OutputValue::Value(_)));
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `--name value` pairs; a value that parses as JSON (a number, bool, ...) is typed, else a string.
fn parse_inputs(args: &[String]) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    let mut out = serde_json::Map::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let Some(name) = flag.strip_prefix("--") else {
            bail!("expected --NAME VALUE pairs after --, got {flag:?}");
        };
        let value = it
            .next()
            .with_context(|| format!("--{name} has no value"))?;
        let v = serde_json::from_str(value)
            .ok()
            .filter(|v: &serde_json::Value| !v.is_null())
            .unwrap_or_else(|| serde_json::Value::String(value.clone()));
        out.insert(name.to_string(), v);
    }
    Ok(out)
}

/// The program: the file itself, or the last program of an episode of a rollout dataset (with an
/// AutoCoder episode's requirements, `autocoder.requirements`).
///
/// A file whose first character is `{` (a JSON line: no Python program starts so in practice) or
/// that names an episode is a dataset, read by the one reader ([`trajectory::read`]): its latest
/// attempt per episode, its torn last line ignored, and a corrupt line or newer schema version an
/// error naming the line.
fn solution_source(spec: &str) -> anyhow::Result<(String, Vec<String>)> {
    // Episode ids hold a `#` themselves (`TASK#SAMPLE`): the path ends at the first one.
    let (path, episode) = match spec.split_once('#') {
        Some((p, e)) if !e.is_empty() => (p, Some(e)),
        _ => (spec, None),
    };
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
    if episode.is_none() && !text.trim_start().starts_with('{') {
        return Ok((text, Vec::new()));
    }
    let records = trajectory::read::read_latest(std::path::Path::new(path))?;
    let record = match episode {
        Some(id) => records
            .iter()
            .find(|r| r.episode_id == id)
            .with_context(|| format!("no episode {id:?} in {path}"))?,
        None => records
            .iter()
            .rev()
            .find(|r| r.solved)
            .or(records.last())
            .with_context(|| format!("{path} has no trajectory records"))?,
    };
    let code = record
        .last_program()
        .with_context(|| format!("episode {:?} of {path} ran no program", record.episode_id))?;
    let requirements = record
        .autocoder
        .as_ref()
        .map(|a| a.requirements.clone())
        .unwrap_or_default();
    Ok((code.to_string(), requirements))
}
