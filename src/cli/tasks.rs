//! `codegym tasks ...`: task dataset tools.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use codegym_sandbox::SandboxConfig;
use env_coding::completions::check_tasks;
use env_coding::reward::run::EvalOptions;
use env_coding::tasks::TaskSet;
use prompts::{EpisodeMode, Prompts};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Run every task's reference solution through its reward spec in the sandbox; exits non-zero
    /// if any fails.
    Check(CheckArgs),
    /// List the tasks of a file (id, format, reward components), or with `--json` one JSON object a
    /// line: id, prompt, messages (the rollout engine's opening), metadata, completion_prefix.
    List(ListArgs),
}

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Task file (native JSONL, HumanEval .jsonl/.jsonl.gz, MBPP) or `builtin:examples`.
    file: PathBuf,
    /// Python interpreter (default: the real binary behind `python3`).
    #[arg(long, env = "CODEGYM_PYTHON")]
    python: Option<PathBuf>,
    /// Wall-clock budget of each unit test, in ms.
    #[arg(long, default_value_t = 10_000)]
    per_test_timeout_ms: u64,
    #[command(flatten)]
    isolation: super::isolation::IsolationArg,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    file: PathBuf,
    /// JSON lines (what `codegym.load_tasks(path=...)` reads) instead of a table.
    #[arg(long)]
    json: bool,
}

pub async fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Check(args) => check(args).await,
        Command::List(args) => {
            let set = TaskSet::load(&args.file)?;
            if args.json {
                let prompts = Prompts::default();
                for t in set.iter() {
                    let language = t.language.name();
                    let (system, user) =
                        prompts.opening_in(EpisodeMode::CodeBlock, &t.prompt, "", language);
                    let row = serde_json::json!({
                        "id": t.id,
                        "prompt": t.prompt,
                        "messages": [
                            {"role": "system", "content": system},
                            {"role": "user", "content": user},
                        ],
                        "metadata": t.metadata,
                        "completion_prefix": t.completion_prefix,
                        "language": language,
                    });
                    println!("{row}");
                }
                return Ok(ExitCode::SUCCESS);
            }
            for t in set.iter() {
                let kinds: Vec<&str> = t.reward.components.iter().map(|c| c.kind()).collect();
                println!("{}\t{}", t.id, kinds.join(","));
            }
            eprintln!("{} tasks ({:?})", set.len(), set.format());
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let set = TaskSet::load(&args.file)?;
    let config = SandboxConfig {
        python: args.python,
        min_isolation: args.isolation.level(SandboxConfig::default().min_isolation),
        ..SandboxConfig::default()
    };
    let sandbox = tokio::task::spawn_blocking(move || env_coding::new_sandbox(config))
        .await?
        .context("cannot start the sandbox")?;
    let opts = EvalOptions {
        limits: None,
        per_test_timeout_ms: args.per_test_timeout_ms,
    };
    let results = check_tasks(&sandbox, &set, opts).await?;
    let failed = results.iter().filter(|r| !r.passed).count();
    for r in &results {
        match (&r.error, r.passed) {
            (_, true) => println!("PASS {}", r.task_id),
            (Some(e), false) => println!("FAIL {}: {e}", r.task_id),
            (None, false) => println!("FAIL {}", r.task_id),
        }
    }
    println!(
        "{} of {} reference solutions pass",
        results.len() - failed,
        results.len()
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
