//! `codegym-bench exec`: sandboxed executions through the coding env's `step` and its
//! `BatchEvaluator`, beside a naive baseline (`python3 -I -S -c` per request, no isolation), for a trivial
//! program and a HumanEval-sized program with its tests, at several concurrent callers.
//!
//! Callers are closed loops: each keeps one call in flight, so latency is a full round trip and the
//! rate is what that many synchronous callers achieve. A `step` of the `print(1)` task is one sandboxed
//! run; a `step` of the unit-test task is two (the program, then the tests in a fresh process under
//! the harness); the baseline runs program and tests in one unsandboxed process.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use env_coding::{CODE_ENV_ID, CodingConfig};
use env_core::{AsyncEnv, EvalItem, Kwargs, Options, Registry, Value};
use serde_json::json;

use crate::latency::Latency;

/// What to measure.
#[derive(Debug, Clone)]
pub struct ExecBenchArgs {
    /// Concurrent callers per row.
    pub callers: Vec<usize>,
    /// Measured time per row (after one warm-up call per caller).
    pub duration: Duration,
    /// Python interpreter (default: the real binary behind `python3`).
    pub python: Option<PathBuf>,
    /// How scripts start (warm fork or a fresh interpreter).
    pub backend: codegym_sandbox::Backend,
    /// Which workloads (`print`, `humaneval`) and paths (`step`, `batch`, `naive`) to measure: a
    /// profile of one row is only readable without the others.
    pub workloads: Vec<String>,
    pub paths: Vec<String>,
}

impl Default for ExecBenchArgs {
    fn default() -> Self {
        ExecBenchArgs {
            callers: vec![1, 8, 64],
            duration: Duration::from_secs(5),
            python: None,
            backend: codegym_sandbox::Backend::Auto,
            workloads: vec!["print".into(), "humaneval".into()],
            paths: vec!["step".into(), "batch".into(), "naive".into()],
        }
    }
}

const TRIVIAL: &str = "print(1)";

const HE_PROGRAM: &str = r#"from typing import List


def below_zero(operations: List[int]) -> bool:
    """Given deposit and withdrawal operations on a bank account that starts at zero, return
    whether the balance ever falls below zero.
    >>> below_zero([1, 2, 3])
    False
    >>> below_zero([1, 2, -4, 5])
    True
    """
    balance = 0
    for op in operations:
        balance += op
        if balance < 0:
            return True
    return False
"#;

const HE_TESTS: &str = r#"METADATA = {'author': 'codegym', 'dataset': 'bench'}


def check(candidate):
    assert candidate([]) == False
    assert candidate([1, 2, -3, 1, 2, -3]) == False
    assert candidate([1, 2, -4, 5, 6]) == True
    assert candidate([1, -1, 2, -2, 5, -5, 4, -4]) == False
    assert candidate([1, -1, 2, -2, 5, -5, 4, -5]) == True
    assert candidate([1, -2, 2, -2, 5, -5, 4, -4]) == True
"#;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    Trivial,
    HumanEval,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Trivial => "print(1)",
            Workload::HumanEval => "HumanEval-sized + tests",
        }
    }

    fn task(self) -> serde_json::Value {
        let reward = match self {
            Workload::Trivial => json!({"version": 1, "components": [{"type": "exit_code"}]}),
            Workload::HumanEval => json!({"version": 1, "components": [
                {"type": "check_function", "code": HE_TESTS, "entry_point": "below_zero"}]}),
        };
        json!({"id": "bench", "prompt": "bench", "reward": reward})
    }

    fn source(self) -> &'static str {
        match self {
            Workload::Trivial => TRIVIAL,
            Workload::HumanEval => HE_PROGRAM,
        }
    }

    fn baseline_source(self) -> String {
        match self {
            Workload::Trivial => TRIVIAL.to_string(),
            Workload::HumanEval => format!("{HE_PROGRAM}\n{HE_TESTS}\ncheck(below_zero)\n"),
        }
    }
}

/// The coding env's configuration for throughput rows: the same program is submitted over and over,
/// so verdict sharing (on by default; `codegym-bench grpo` measures it) would measure a cache lookup
/// instead of an execution.
pub(crate) fn unshared_config() -> CodingConfig {
    CodingConfig {
        verdict_cache_mib: 0,
        ..CodingConfig::default()
    }
}

/// Runs every (workload, path, callers) row and returns the Markdown table.
pub async fn run(args: ExecBenchArgs) -> anyhow::Result<String> {
    let python = args.python.clone();
    let backend = args.backend;
    let (registry, sandbox) = tokio::task::spawn_blocking(move || {
        let mut registry = Registry::new();
        let mut config = unshared_config();
        config.sandbox.python = python;
        config.sandbox.backend = backend;
        let sandbox = env_coding::register(&mut registry, config)?
            .sandbox()
            .clone();
        Ok::<_, anyhow::Error>((Arc::new(registry), sandbox))
    })
    .await??;
    let python = sandbox.python().to_path_buf();
    let mut table = format!(
        "Sandbox isolation: {}; backend: {}; Python: {}\n\n| workload | path | callers | calls/s | p50 (ms) | p99 (ms) |\n\
         |---|---|---:|---:|---:|---:|\n",
        sandbox.isolation().level,
        sandbox.backend(),
        python.display()
    );
    for name in &args.paths {
        anyhow::ensure!(
            ["step", "batch", "naive"].contains(&name.as_str()),
            "unknown path {name:?} (step, batch, naive)"
        );
    }
    let wanted = |p: &str| args.paths.iter().any(|x| x == p);
    for name in &args.workloads {
        let workload = match name.as_str() {
            "print" => Workload::Trivial,
            "humaneval" => Workload::HumanEval,
            other => anyhow::bail!("unknown workload {other:?} (print, humaneval)"),
        };
        for &callers in &args.callers {
            let mut rows = Vec::new();
            if wanted("step") {
                let r = measure_step(&registry, workload, callers, args.duration).await?;
                rows.push(("env step", r));
            }
            if wanted("batch") {
                let r = measure_evaluator(&registry, workload, callers, args.duration).await?;
                rows.push(("BatchEvaluator", r));
            }
            if wanted("naive") {
                let r = measure_baseline(&python, workload, callers, args.duration).await?;
                rows.push(("naive python3 -I -S -c", r));
            }
            for (path, (rate, lat)) in rows {
                table.push_str(&format!(
                    "| {} | {path} | {callers} | {rate:.1} | {:.2} | {:.2} |\n",
                    workload.name(),
                    lat.p50_us / 1000.0,
                    lat.p99_us / 1000.0
                ));
            }
        }
    }
    Ok(table)
}

/// Runs `callers` closed loops of `call` for `duration` after one warm-up call each; returns calls/s
/// and the latency distribution.
pub(crate) async fn closed_loop<F, Fut>(
    callers: usize,
    duration: Duration,
    call: F,
) -> anyhow::Result<(f64, Latency)>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let call = Arc::new(call);
    let mut warmups = Vec::new();
    for c in 0..callers {
        warmups.push(tokio::spawn(call(c)));
    }
    for w in warmups {
        w.await??;
    }
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for c in 0..callers {
        let call = call.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                call(c).await?;
                samples.push(t.elapsed().as_secs_f64() * 1e6);
            }
            Ok::<_, anyhow::Error>(samples)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let rate = all.len() as f64 / elapsed;
    Ok((rate, Latency::from_micros(&mut all)))
}

async fn measure_step(
    registry: &Arc<Registry>,
    workload: Workload,
    callers: usize,
    duration: Duration,
) -> anyhow::Result<(f64, Latency)> {
    let mut envs: Vec<Arc<tokio::sync::Mutex<Box<dyn AsyncEnv>>>> = Vec::with_capacity(callers);
    for _ in 0..callers {
        let env = registry.make_async(CODE_ENV_ID, &Kwargs::new()).await?;
        envs.push(Arc::new(tokio::sync::Mutex::new(env)));
    }
    let envs = Arc::new(envs);
    let mut options = Options::new();
    options.insert("task".into(), workload.task());
    let options = Arc::new(options);
    closed_loop(callers, duration, move |c| {
        let env = envs[c].clone();
        let options = options.clone();
        async move {
            // Each caller owns its env; the lock is never contended.
            let mut env = env.lock().await;
            env.reset(None, options.as_ref().clone()).await?;
            let step = env.step(Value::Text(workload.source().to_string())).await?;
            anyhow::ensure!(
                step.terminated,
                "the bench program did not solve its task: {:?}",
                step.info
            );
            Ok(())
        }
    })
    .await
}

async fn measure_evaluator(
    registry: &Arc<Registry>,
    workload: Workload,
    callers: usize,
    duration: Duration,
) -> anyhow::Result<(f64, Latency)> {
    let evaluator = registry.evaluator(CODE_ENV_ID)?;
    let mut options = Options::new();
    options.insert("task".into(), workload.task());
    let item = EvalItem {
        seed: None,
        options,
        action: Value::Text(workload.source().to_string()),
    };
    closed_loop(callers, duration, move |_| {
        let evaluator = evaluator.clone();
        let item = item.clone();
        async move {
            let out = evaluator.evaluate(Kwargs::new(), vec![item]).await?;
            let step = out.into_iter().next().context("no result")??;
            anyhow::ensure!(step.terminated, "the bench program did not solve its task");
            Ok(())
        }
    })
    .await
}

async fn measure_baseline(
    python: &std::path::Path,
    workload: Workload,
    callers: usize,
    duration: Duration,
) -> anyhow::Result<(f64, Latency)> {
    let python = python.to_path_buf();
    let source = workload.baseline_source();
    closed_loop(callers, duration, move |_| {
        let mut cmd = tokio::process::Command::new(&python);
        // Same start-up flags as the sandbox's default (isolated mode, no `site`), so the difference
        // is the sandbox's own cost.
        cmd.arg("-I")
            .arg("-S")
            .arg("-c")
            .arg(&source)
            .kill_on_drop(true);
        async move {
            // The benchmark's naive, unsandboxed baseline: exactly what the sandbox replaces.
            #[allow(clippy::disallowed_methods)]
            let out = cmd.output().await?;
            anyhow::ensure!(
                out.status.success(),
                "baseline failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(())
        }
    })
    .await
}
