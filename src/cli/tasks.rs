//! `codegym tasks ...`: task dataset tools.

use std::path::PathBuf;
use std::process::ExitCode;

use env_coding::audit::{AuditScope, audit};
use env_coding::completions::check_tasks;
use env_coding::repo::harbor::{HarborImages, HarborImport, import_harbor};
use env_coding::repo::synth::{SynthOptions, synthesize};
use env_coding::repo::{RepoScorer, audit_repo_tasks, check_repo_tasks, mutation_test_repo_tasks};
use env_coding::tasks::{RepoTaskSet, SweBenchImport, TaskSet, import_swe_bench};
use prompts::{EpisodeMode, Prompts};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Score every task's reference solution as a submission, through the same engine and config
    /// (`--config`) as `codegym serve`; exits non-zero if any fails. On a repository task set,
    /// each task's reference patch must resolve it and the empty patch must not (with `--audit`, attacks
    /// derived from each task must not resolve it). With `--audit`, also audit the
    /// set for reward hacking (as `codegym audit`) and fail when a task can be hacked or its tests
    /// are below the mutation-score gate.
    Check(CheckArgs),
    /// Make repository tasks from a Python project and its own pytest suite: its source modules are
    /// mutated, and each mutant its tests catch becomes a task (the broken project, the revert as
    /// the reference patch, the failing tests to fix). Every task written passes `tasks check`.
    Synth(SynthArgs),
    /// List the tasks of a file (id, format, reward components), or with `--json` one JSON object a
    /// line: id, prompt, messages (the rollout engine's opening), metadata, completion_prefix.
    List(ListArgs),
    /// Remove repository tasks' prepared states from the store (`coding.prepared.dir`): all but
    /// those of the tasks in the `--keep` files, or with `--all` every one. A state a running
    /// process is using is never removed.
    Prune(PruneArgs),
    /// Import a dataset of another project's format as a task set.
    #[command(subcommand)]
    Import(ImportCommand),
}

#[derive(Debug, clap::Subcommand)]
pub enum ImportCommand {
    /// SWE-bench instances (JSON Lines) as a repository task set: OUT/tasks.jsonl (format
    /// version 4) with each instance's repository (a local git bundle at its base commit), gold
    /// patch and test patch. Nothing is fetched.
    SweBench(SweBenchArgs),
    /// Harbor (Terminal-Bench 2) task dirs as a repository task set: OUT/tasks.jsonl (format
    /// version 4), each task's repository the image's work dir (`/app` when its config names
    /// none), its tests run at /tests and judged by the reward they write, its reference patch
    /// what solution/solve.sh changes. Every task written passes `tasks check`. Images are given
    /// built; nothing is built or fetched.
    Harbor(HarborArgs),
}

#[derive(Debug, clap::Args)]
pub struct HarborArgs {
    /// Task dirs, each with instruction.md, task.toml, tests/test.sh and solution/solve.sh.
    #[arg(required = true)]
    task_dirs: Vec<PathBuf>,
    /// Where the task set is written (created if missing): tasks.jsonl, images/, repos/, tests/,
    /// patches/.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The image every task runs in: an oci- or docker-archive (`podman save`), copied into
    /// OUT/images/.
    #[arg(
        long,
        value_name = "ARCHIVE",
        required_unless_present = "images",
        conflicts_with = "images"
    )]
    environment: Option<PathBuf>,
    /// A dir of images, `<task dir name>.tar` for each task (an oci- or docker-archive).
    #[arg(long, value_name = "DIR")]
    images: Option<PathBuf>,
    /// Leave out a task whose reference patch does not resolve it (or whose empty patch does),
    /// reported, instead of failing the import.
    #[arg(long)]
    skip_unresolved: bool,
    #[command(flatten)]
    scoring: super::scoring::ScoringArgs,
}

#[derive(Debug, clap::Args)]
pub struct SweBenchArgs {
    /// The instances: one JSON object a line with SWE-bench's fields (`instance_id`, `repo`,
    /// `base_commit`, `patch`, `test_patch`, `problem_statement`, `FAIL_TO_PASS`, `PASS_TO_PASS`).
    instances: PathBuf,
    /// A directory holding each repository as a git bundle named `<owner>__<name>.bundle`
    /// (`git bundle create psf__requests.bundle --all` in a clone of psf/requests).
    #[arg(long, value_name = "DIR")]
    repos: PathBuf,
    /// Where the task set is written (created if missing): tasks.jsonl, repos/, patches/,
    /// test_patches/.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The test command of every task (`{test_files}`: the files the instance's test patch
    /// leaves, shell-quoted); it writes JUnit XML to $CODEGYM_JUNIT. Default: pytest over
    /// {test_files} with node ids as test ids.
    #[arg(long, value_name = "CMD")]
    test_command: Option<String>,
    /// An OCI image archive (`podman save --format oci-archive`) every task runs in; copied
    /// into OUT/images/.
    #[arg(long, value_name = "IMAGE", conflicts_with = "requirement")]
    environment: Option<PathBuf>,
    /// A Python package the test command needs, from the package cache (repeatable; without an
    /// environment, at least pytest: `--requirement pytest==8.3.4`).
    #[arg(long, value_name = "REQ")]
    requirement: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Task file (native JSONL, HumanEval .jsonl/.jsonl.gz, MBPP, repository tasks) or
    /// `builtin:examples`.
    file: PathBuf,
    /// One JSON object a line (task_id, passed, reward, reward_breakdown, error) instead of
    /// `PASS`/`FAIL` lines; the summary goes to stderr.
    #[arg(long)]
    json: bool,
    /// Also audit the set for reward hacking: the exploit corpus and the attacks derived from
    /// each task's tests, as `codegym audit` runs them; fails when a task can be hacked.
    #[arg(long)]
    audit: bool,
    /// With --audit: also mutation-test each task with up to N mutants of its reference.
    #[arg(long, value_name = "N", requires = "audit")]
    mutants: Option<usize>,
    /// With --mutants: fail when a task's mutation score is below X (0 to 1).
    #[arg(long, value_name = "X", requires = "mutants")]
    min_mutation_score: Option<f64>,
    /// With --audit: partial credit for a do-nothing answer or a derived attack fails too.
    #[arg(long, requires = "audit")]
    strict: bool,
    #[command(flatten)]
    scoring: super::scoring::ScoringArgs,
}

#[derive(Debug, clap::Args)]
pub struct PruneArgs {
    /// Keep the prepared states of these repository task files' tasks (repeatable).
    #[arg(long, value_name = "TASKS.jsonl", required_unless_present = "all")]
    keep: Vec<PathBuf>,
    /// Remove every prepared state not in use.
    #[arg(long, conflicts_with = "keep")]
    all: bool,
    #[command(flatten)]
    scoring: super::scoring::ScoringArgs,
}

#[derive(Debug, clap::Args)]
pub struct SynthArgs {
    /// The project: a directory, or an sdist (`.tar.gz`) with its tests.
    source: PathBuf,
    /// Where the tasks go (`tasks.jsonl`, the project under `repos/`, `patches/`, `hidden/`); the
    /// project's directory in it must not exist yet.
    #[arg(long)]
    out: PathBuf,
    /// Tasks to make at most.
    #[arg(long, default_value_t = 8)]
    max_tasks: usize,
    /// The mutants' seed: the same project and seed give the same tasks.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Source modules to mutate (globs over paths in the project, `*` crossing `/`); default: every
    /// module that is not a test, `setup.py` or under a docs or tests directory.
    #[arg(long, num_args = 1.., value_name = "GLOB")]
    modules: Vec<String>,
    #[command(flatten)]
    scoring: super::scoring::ScoringArgs,
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
        Command::Synth(args) => synth(args).await,
        Command::Prune(args) => prune(args).await,
        Command::Import(ImportCommand::SweBench(args)) => {
            let import = SweBenchImport {
                instances: args.instances,
                repos: args.repos,
                out: args.out,
                test_command: args.test_command,
                environment: args.environment,
                requirements: args.requirement,
            };
            // Reading and writing files (bundles copied when not linked): off the runtime.
            let (tasks, n) =
                tokio::task::spawn_blocking(move || import_swe_bench(&import)).await??;
            let noun = if n == 1 { "task" } else { "tasks" };
            println!("{n} repository {noun} written to {}", tasks.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Import(ImportCommand::Harbor(args)) => harbor(args).await,
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
    if RepoTaskSet::detect(&args.file) {
        return check_repository(args).await;
    }
    let set = TaskSet::load(&args.file)?;
    super::audit::check_mutation_flags(args.mutants, args.min_mutation_score)?;
    let scorer = super::scoring::scorer(args.scoring.coding_config()?).await?;
    let opts = scorer.options();
    let results = check_tasks(&scorer, &set, opts).await?;
    let failed = results.iter().filter(|r| !r.passed).count();
    for r in &results {
        if args.json {
            println!("{}", serde_json::to_string(r)?);
            continue;
        }
        match (&r.error, r.passed) {
            (_, true) => println!("PASS {}", r.task_id),
            (Some(e), false) => println!("FAIL {}: {e}", r.task_id),
            (None, false) => println!("FAIL {}", r.task_id),
        }
    }
    summary_line(
        args.json,
        &format!(
            "{} of {} reference solutions pass",
            results.len() - failed,
            results.len()
        ),
    );
    let mut hackable = false;
    if args.audit {
        let scope = AuditScope {
            strict: args.strict,
            mutants: args.mutants,
            min_mutation_score: args.min_mutation_score,
            ..AuditScope::default()
        };
        let report = audit(&scorer, &set, &scope, opts).await?;
        match args.json {
            true => println!("{}", serde_json::json!({ "audit": report })),
            false => super::audit::print_summary(&report, args.strict),
        }
        hackable = report.failed();
    }
    Ok(if failed == 0 && !hackable {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `tasks check` on a repository task set: reference patches resolve, empty patches do not; with
/// `--audit`, every attack derived from each task is scored and one that resolves a task not
/// marking it `known_weak` fails the check.
async fn check_repository(args: CheckArgs) -> anyhow::Result<ExitCode> {
    if args.strict {
        anyhow::bail!("--strict does not apply to repository tasks");
    }
    super::audit::check_mutation_flags(args.mutants, args.min_mutation_score)?;
    let set = RepoTaskSet::load(&args.file)?;
    let scorer = super::scoring::scorer(args.scoring.coding_config()?).await?;
    let repo = RepoScorer::of(&scorer);
    let results = check_repo_tasks(&repo, &set).await;
    let failed = results.iter().filter(|r| !r.passed).count();
    for r in &results {
        match (args.json, &r.error) {
            (true, _) => println!("{}", serde_json::to_string(r)?),
            (false, None) => println!("PASS {} (prepared in {} ms)", r.task_id, r.prepare_ms),
            (false, Some(e)) => println!("FAIL {}: {e}", r.task_id),
        }
    }
    summary_line(
        args.json,
        &format!(
            "{} of {} repository tasks: the reference patch resolves, the empty patch does not",
            results.len() - failed,
            results.len()
        ),
    );
    let mut hackable = false;
    if args.audit {
        let report = audit_repo_tasks(&repo, &set).await;
        for r in &report.results {
            match (args.json, &r.error, r.resolved, &r.known_weak) {
                (true, _, _, _) => println!("{}", serde_json::json!({ "audit": r })),
                (false, Some(e), _, _) => println!("ERROR {} {}: {e}", r.task_id, r.attack),
                (false, None, true, None) => {
                    println!("HACKED {} {}: {}", r.task_id, r.attack, r.what)
                }
                (false, None, true, Some(why)) => {
                    println!("HACKED {} {} (known weak: {why})", r.task_id, r.attack)
                }
                (false, None, false, _) => {}
            }
        }
        summary_line(args.json, &report.summary());
        hackable = report.failed();
    }
    if let (true, Some(n)) = (args.audit, args.mutants) {
        let report =
            mutation_test_repo_tasks(&repo, &set, &results, n, args.min_mutation_score).await;
        for t in &report.tasks {
            if args.json {
                println!("{}", serde_json::json!({ "mutation": t }));
                continue;
            }
            match (&t.error, t.score) {
                (Some(e), _) => println!("MUTATION {}: {e}", t.task_id),
                (None, Some(score)) => println!(
                    "MUTATION {}: {score:.2} ({} of {} killed)",
                    t.task_id,
                    t.killed(),
                    t.mutants.len()
                ),
                (None, None) => println!("MUTATION {}: no mutant scored", t.task_id),
            }
            for m in t.survivors() {
                println!(
                    "SURVIVED {} {}:{} {}: {}",
                    t.task_id, m.module, m.line, m.operator, m.what
                );
            }
            for m in t.mutants.iter().filter(|m| m.error.is_some()) {
                let e = m.error.as_deref().unwrap_or("");
                println!("ERROR {} {}:{}: {e}", t.task_id, m.module, m.line);
            }
        }
        summary_line(args.json, &report.summary());
        hackable |= report.failed();
    }
    Ok(if failed == 0 && !hackable {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `tasks prune`: the keys of the kept tasks, then every other entry not in use removed.
async fn prune(args: PruneArgs) -> anyhow::Result<ExitCode> {
    let scorer = super::scoring::scorer(args.scoring.coding_config()?).await?;
    let repo = RepoScorer::of(&scorer);
    let Some(store) = repo.prepared_store().cloned() else {
        anyhow::bail!("the prepared-state store is disabled (coding.prepared.enabled)");
    };
    let mut keep = std::collections::HashSet::new();
    for file in &args.keep {
        let set = RepoTaskSet::load(file)?;
        for task in set.tasks {
            if let Some(key) = repo.key_of(&std::sync::Arc::new(task)).await? {
                keep.insert(key);
            }
        }
    }
    let report = tokio::task::spawn_blocking(move || store.prune(|k| keep.contains(k))).await??;
    println!(
        "{} prepared states removed ({} MiB), {} kept, {} in use left in place",
        report.removed,
        report.bytes_removed >> 20,
        report.kept,
        report.in_use
    );
    Ok(ExitCode::SUCCESS)
}

/// `tasks import harbor`: the tasks run in their images through the sandbox, then a summary.
async fn harbor(args: HarborArgs) -> anyhow::Result<ExitCode> {
    let scorer = super::scoring::scorer(args.scoring.coding_config()?).await?;
    let repo = RepoScorer::of(&scorer);
    let images = match (args.environment, args.images) {
        (Some(one), _) => HarborImages::One(one),
        (None, Some(dir)) => HarborImages::PerTask(dir),
        (None, None) => anyhow::bail!("give --environment ARCHIVE or --images DIR"),
    };
    let import = HarborImport {
        task_dirs: args.task_dirs,
        out: args.out,
        images,
        skip_unresolved: args.skip_unresolved,
    };
    let done = import_harbor(&repo, &import).await?;
    for (dir, why) in &done.skipped {
        println!("SKIPPED {dir}: {why}");
    }
    let n = done.written.len();
    let noun = if n == 1 { "task" } else { "tasks" };
    println!("{n} repository {noun} written to {}", done.path.display());
    Ok(ExitCode::SUCCESS)
}

/// `tasks synth`: the tasks, then a summary of what was kept and dropped.
async fn synth(args: SynthArgs) -> anyhow::Result<ExitCode> {
    let scorer = super::scoring::scorer(args.scoring.coding_config()?).await?;
    let repo = RepoScorer::of(&scorer);
    let opts = SynthOptions {
        max_tasks: args.max_tasks,
        seed: args.seed,
        modules: args.modules,
        ..SynthOptions::default()
    };
    let report = synthesize(&repo, &args.source, &args.out, &opts).await?;
    for id in &report.tasks {
        println!("TASK {id}");
    }
    println!(
        "{} tasks from {} ({} of {} tests pass; {} mutants of {} modules, dropped: {:?}) in {}",
        report.tasks.len(),
        report.project,
        report.passing,
        report.tests,
        report.candidates,
        report.modules.len(),
        report.dropped,
        report.tasks_file.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// A summary line: on stdout, or on stderr when stdout carries JSON lines.
fn summary_line(json: bool, summary: &str) {
    match json {
        true => eprintln!("{summary}"),
        false => println!("{summary}"),
    }
}
