//! `codegym audit TASKS`: runs the reward-hacking corpus and the attacks derived from each task's
//! own tests against a task set, and fails when a task not marked known-weak can be hacked; with
//! `--mutants N`, also measures each task's tests by mutation testing and fails below
//! `--min-mutation-score` (`env_coding::audit` does the work).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use codegym_sandbox::lang::Language;
use env_coding::audit::{AuditReport, AuditScope, audit, exploits, html};
use env_coding::tasks::TaskSet;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Task file (native JSONL, HumanEval .jsonl/.jsonl.gz, MBPP) or `builtin:examples`.
    #[arg(required_unless_present = "list")]
    tasks: Option<PathBuf>,
    /// Only tasks in these languages (comma-separated, e.g. `python,cpp`).
    #[arg(long, value_delimiter = ',')]
    languages: Vec<String>,
    /// Only these exploits, by name (comma-separated; `--list` names them).
    #[arg(long, value_delimiter = ',')]
    exploits: Vec<String>,
    /// Print the report as JSON on stdout instead of a summary.
    #[arg(long)]
    json: bool,
    /// Also write the report as one self-contained HTML page.
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
    /// Also fail when a do-nothing answer earns a reward on a task (partial credit for nothing: a
    /// test that expects `None`, `0` or empty output), or an attack derived from the task earns
    /// partial credit.
    #[arg(long)]
    strict: bool,
    /// Only the corpus's exploits: derive no attacks from the tasks' tests.
    #[arg(long)]
    corpus_only: bool,
    /// List the corpus (name, category, languages, what it does) and exit.
    #[arg(long)]
    list: bool,
    /// Also mutation-test every task with a reference solution: up to N mutants of it (small
    /// bugs: operators, comparisons, constants, boundaries, returns, dropped statements), scored
    /// like submissions; the share the tests reject is the task's mutation score.
    #[arg(long, value_name = "N")]
    mutants: Option<usize>,
    /// With --mutants: fail (exit status 1) when a task's mutation score is below X (0 to 1).
    #[arg(long, value_name = "X", requires = "mutants")]
    min_mutation_score: Option<f64>,
    #[command(flatten)]
    scoring: super::scoring::ScoringArgs,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.list {
        for e in exploits()? {
            let langs: Vec<&str> = e.languages.iter().map(|l| l.name()).collect();
            println!(
                "{}\t{}\t{}\t{}",
                e.name,
                e.category,
                langs.join(","),
                e.what
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let Some(path) = args.tasks else {
        anyhow::bail!("a task file is required");
    };
    let tasks = TaskSet::load(&path)?;
    let languages = args
        .languages
        .iter()
        .map(|l| Language::parse(l.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    check_mutation_flags(args.mutants, args.min_mutation_score)?;
    let scorer = super::scoring::scorer(args.scoring.coding_config()?).await?;
    let scope = AuditScope {
        languages,
        exploits: args.exploits,
        strict: args.strict,
        corpus_only: args.corpus_only,
        mutants: args.mutants,
        min_mutation_score: args.min_mutation_score,
    };
    let report = audit(&scorer, &tasks, &scope, scorer.options()).await?;
    let source = path.display().to_string();
    if let Some(out) = &args.output {
        trajectory::atomic::write_atomic(out, html::render(&report, &source).as_bytes())
            .with_context(|| format!("cannot write {}", out.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&report, args.strict);
    }
    Ok(if report.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The audit's text summary: a line per finding and trivial task, the mutation scores, the verdict
/// (`codegym tasks check --audit` prints the same).
pub(super) fn print_summary(report: &AuditReport, strict: bool) {
    // A derived attack that earns partial credit, and a do-nothing answer that earns any, fail
    // the audit only with --strict.
    let unless_strict = if strict {
        ""
    } else {
        " (fails the audit with --strict)"
    };
    for f in &report.findings {
        let weak = f
            .known_weak
            .as_deref()
            .map(|w| format!(" [known weak: {w}]"));
        let partial = f.derived && !f.solved;
        println!(
            "{} {} by {} ({}): reward {:.3}{}{}",
            if partial { "PARTIAL" } else { "HACKED" },
            f.task_id,
            f.exploit,
            f.category,
            f.reward,
            if partial { unless_strict } else { "" },
            weak.unwrap_or_default()
        );
    }
    for b in &report.baselines {
        println!(
            "TRIVIAL {}: a do-nothing answer earns {:.3}{unless_strict}",
            b.task_id, b.reward
        );
    }
    if let Some(m) = &report.mutation {
        for line in m.summary_lines() {
            println!("{line}");
        }
    }
    println!(
        "{} task(s), {} exploit(s), {} program(s) scored: {}",
        report.tasks,
        report.exploits.len(),
        report.attempts,
        if report.hackable_tasks.is_empty() {
            "no task can be hacked (known-weak tasks aside)".to_string()
        } else {
            format!("{} task(s) can be hacked", report.hackable_tasks.len())
        }
    );
}

/// `--mutants` and `--min-mutation-score` as given (`codegym tasks check --audit` takes them too).
pub(super) fn check_mutation_flags(mutants: Option<usize>, min: Option<f64>) -> anyhow::Result<()> {
    if let Some(x) = min
        && !(0.0..=1.0).contains(&x)
    {
        anyhow::bail!("--min-mutation-score must be between 0 and 1, got {x}");
    }
    if mutants == Some(0) {
        anyhow::bail!("--mutants must be at least 1");
    }
    Ok(())
}
