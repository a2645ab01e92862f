//! `codegym-bench evalplus`: scoring GRPO groups of HumanEval+-style completions (differential
//! testing, issue 14) through `score_program` on one sandbox: the first group of a task pays for
//! the reference's outputs (computed once, in the sandbox), later groups reuse them. Each group
//! holds `group` distinct completions (half right, half wrong), all scored at once; every round uses
//! a task never seen before (a tag in the reference), so its first group is always cold.

use std::sync::Arc;
use std::time::Instant;

use codegym_sandbox::{Sandbox, SandboxConfig};
use env_coding::reward::run::{EvalOptions, Program, score_program};
use env_coding::tasks::TaskSet;

/// What to measure.
#[derive(Debug, Clone)]
pub struct EvalPlusBenchArgs {
    /// Completions per group.
    pub group: usize,
    /// Base + plus inputs of the task.
    pub inputs: usize,
    /// Tasks (rounds), each scored with one cold group, then `warm_groups` warm ones.
    pub rounds: usize,
    pub warm_groups: usize,
}

pub async fn run(args: EvalPlusBenchArgs) -> anyhow::Result<String> {
    anyhow::ensure!(
        args.group > 0 && args.inputs >= 2,
        "--group > 0, --inputs >= 2"
    );
    let sandbox =
        Arc::new(tokio::task::spawn_blocking(|| Sandbox::new(SandboxConfig::default())).await??);
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for round in 0..args.rounds {
        let task = task(round, args.inputs)?;
        for g in 0..=args.warm_groups {
            let t0 = Instant::now();
            let mut group = tokio::task::JoinSet::new();
            for i in 0..args.group {
                // Distinct programs (no verdict could be shared), half of them wrong.
                let body = if i % 2 == 0 { "x + y" } else { "x - y" };
                let program = Program::new(format!("{}    return {body}  # {i}\n", task.prompt));
                let (reward, sandbox) = (task.reward.clone(), sandbox.clone());
                group.spawn(async move {
                    let opts = EvalOptions::default();
                    (
                        i,
                        score_program(&sandbox, &reward, &program, None, opts).await,
                    )
                });
            }
            let scores = group.join_all().await;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            for (i, s) in scores {
                let want = if i % 2 == 0 { 1.0 } else { 0.0 };
                anyhow::ensure!(s?.reward == want, "completion {i} scored wrongly");
            }
            if g == 0 { cold.push(ms) } else { warm.push(ms) }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let per_s = |ms: f64| args.group as f64 / (ms / 1e3);
    let (c, w) = (median(&mut cold), median(&mut warm));
    Ok(format!(
        "| group | first group of a task (reference computed) | later groups (reference cached) |\n\
         |---|---:|---:|\n\
         | {} completions, {} inputs | {c:.0} ms ({:.1} completions/s) | {w:.0} ms ({:.1} completions/s) |\n\n\
         {} tasks, {} warm groups each; medians.\n",
        args.group,
        args.inputs,
        per_s(c),
        per_s(w),
        args.rounds,
        args.warm_groups
    ))
}

/// A HumanEval+-style task `add` with `inputs` argument lists (half base, half plus), unique to
/// `round`.
fn task(round: usize, inputs: usize) -> anyhow::Result<std::sync::Arc<env_coding::tasks::Task>> {
    let list = |from: usize, to: usize| {
        let items: Vec<String> = (from..to).map(|i| format!("[{i}, {}]", i * 7)).collect();
        format!("[{}]", items.join(", "))
    };
    let half = inputs / 2;
    let record = serde_json::json!({
        "task_id": format!("HumanEval/bench-{round}"),
        "prompt": format!("def add(x, y):\n    \"\"\"Add (task {round}).\"\"\"\n"),
        "entry_point": "add",
        "canonical_solution": "    return x + y\n",
        "atol": 0,
    });
    // The inputs are spliced in as text, as EvalPlus's files hold them.
    let mut line = record.to_string();
    line.pop();
    line.push_str(&format!(
        ", \"base_input\": {}, \"plus_input\": {}}}",
        list(0, half),
        list(half, inputs)
    ));
    let set = TaskSet::parse(&line, std::path::Path::new("bench.jsonl"))?;
    set.by_index(0)
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no task"))
}
