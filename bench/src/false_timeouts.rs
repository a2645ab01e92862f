//! `codegym-bench false-timeouts`: how often a correct program is judged time-limit-exceeded
//! because the machine was busy, with the re-run of false timeouts off and on.
//!
//! Two `codegym serve` processes, identical but for `coding.timeout_rerun.enabled`, each with
//! `sandbox.max_concurrent` raised (default 64) so that all items of a batch really run at once,
//! and the verdict cache off (every item runs its own program). Each round sends `items`
//! concurrent one-item `Evaluate` calls of a judged task's reference solution to each server,
//! alternating which goes first, and counts the items judged `TLE`. The reference uses a fixed
//! share of its CPU limit by construction: it spins until its own CPU clock
//! (`time.process_time()`) reads that share, then answers; the calibration row reports the CPU time
//! the sandbox measured for it alone, on the otherwise idle server.

use std::path::{Path, PathBuf};
use std::time::Instant;

use env_core::Value;
use proto::convert::value_to_proto;
use proto::v1::{self, env_service_client::EnvServiceClient};
use serde_json::json;

use crate::rollout_harness::spawn_listening;

/// Parameters of the benchmark (its command line).
#[derive(Debug, Clone, clap::Args)]
pub struct FalseTimeoutsArgs {
    /// Concurrent one-item `Evaluate` calls per batch.
    #[arg(long, default_value_t = 64)]
    pub items: usize,
    /// Batches per server.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// The judged task's CPU limit, in ms.
    #[arg(long, default_value_t = 1000)]
    pub time_limit_ms: u64,
    /// Share of the CPU limit the reference uses, in percent.
    #[arg(long, default_value_t = 50)]
    pub cpu_share: u64,
    /// The servers' `sandbox.max_concurrent` (programs running at once).
    #[arg(long, default_value_t = 64)]
    pub max_concurrent: usize,
    /// The `codegym` binary (default: the one beside this benchmark's).
    #[arg(long)]
    pub codegym_bin: Option<PathBuf>,
}

/// The reference: spins for `spin_s` of its own CPU time when `always` or when it has input, then
/// prints the sum of its input's two integers (its plain run, without input, prints nothing).
fn reference(spin_s: f64, always: bool) -> String {
    let guard = if always { "True" } else { "data" };
    format!(
        "import sys, time\ndata = sys.stdin.read()\nif {guard}:\n    while time.process_time() < {spin_s}:\n        pass\n\
         if data:\n    a, b = map(int, data.split())\n    print(a + b)\n"
    )
}

struct Server {
    _child: tokio::process::Child,
    client: EnvServiceClient<tonic::transport::Channel>,
}

async fn serve(bin: &Path, config: &Path) -> anyhow::Result<Server> {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--config"])
        .arg(config)
        .stdin(std::process::Stdio::null());
    let (child, addr) = spawn_listening(cmd, "codegym serve").await?;
    let client = EnvServiceClient::connect(format!("http://{addr}")).await?;
    Ok(Server {
        _child: child,
        client,
    })
}

/// One item's outcome: the judge's verdict and the observation's CPU and wall time.
struct Outcome {
    verdict: String,
    reran: bool,
    cpu_ms: u64,
    wall_ms: u64,
}

async fn evaluate_one(
    mut c: EnvServiceClient<tonic::transport::Channel>,
    kwargs: String,
    program: String,
) -> anyhow::Result<Outcome> {
    let req = v1::EvaluateRequest {
        env_id: "codegym/Code-v0".into(),
        kwargs_json: kwargs,
        items: vec![v1::EvaluateItem {
            seed: None,
            options_json: json!({"task_id": "sum"}).to_string(),
            action: Some(value_to_proto(&Value::Text(program))),
        }],
    };
    let results = c.evaluate(req).await?.into_inner().results;
    let step = results
        .first()
        .and_then(|r| r.step.as_ref())
        .ok_or_else(|| anyhow::anyhow!("item error: {results:?}"))?;
    let info: serde_json::Value = serde_json::from_str(&step.info_json)?;
    let breakdown = &info["reward_breakdown"];
    let verdict = breakdown["components"][0]["detail"]["verdicts"][0]
        .as_str()
        .unwrap_or("none")
        .to_string();
    let reran = breakdown["timeout_reruns"]
        .as_array()
        .is_some_and(|a| a.iter().any(|r| !r["rerun"].is_null()));
    let obs = step
        .observation
        .clone()
        .map(proto::convert::value_from_proto);
    let (cpu_ms, wall_ms) = match obs {
        Some(Ok(Value::Execution(e))) => (e.cpu_ms, e.wall_ms),
        _ => (0, 0),
    };
    Ok(Outcome {
        verdict,
        reran,
        cpu_ms,
        wall_ms,
    })
}

/// `items` concurrent one-item `Evaluate` calls: (TLE count, re-run count, wall seconds).
async fn batch(
    server: &Server,
    kwargs: &str,
    program: &str,
    items: usize,
) -> anyhow::Result<(usize, usize, f64)> {
    let t0 = Instant::now();
    let calls: Vec<_> = (0..items)
        .map(|_| {
            tokio::spawn(evaluate_one(
                server.client.clone(),
                kwargs.to_string(),
                program.to_string(),
            ))
        })
        .collect();
    let mut tle = 0;
    let mut reran = 0;
    for call in calls {
        let o = call.await??;
        anyhow::ensure!(
            o.verdict == "AC" || o.verdict == "TLE",
            "the reference must pass or time out, got {}",
            o.verdict
        );
        tle += usize::from(o.verdict == "TLE");
        reran += usize::from(o.reran);
    }
    Ok((tle, reran, t0.elapsed().as_secs_f64()))
}

pub async fn run(args: FalseTimeoutsArgs) -> anyhow::Result<String> {
    anyhow::ensure!(
        args.items > 0 && args.rounds > 0,
        "items and rounds must be positive"
    );
    let bin = crate::pool::codegym_bin(args.codegym_bin.as_ref())?;
    let dir = tempfile::tempdir()?;
    let tl = args.time_limit_ms;
    let task = json!({"schema_version": 1, "id": "sum", "prompt": "Print the sum of two integers.",
        "reward": {"version": 1, "components": [{"type": "judge", "time_limit_ms": tl,
            "tests": [{"input": "1 2\n", "output": "3\n"}]}]}});
    std::fs::write(dir.path().join("tasks.jsonl"), format!("{task}\n"))?;
    let mut servers = Vec::new();
    for enabled in [false, true] {
        let path = dir.path().join(format!("rerun-{enabled}.json"));
        let config = json!({"coding": {"task_dirs": [dir.path()], "verdict_cache_mib": 0,
            "sandbox": {"max_concurrent": args.max_concurrent},
            "timeout_rerun": {"enabled": enabled}}});
        std::fs::write(&path, config.to_string())?;
        servers.push(serve(&bin, &path).await?);
    }
    // The plain run gets the judge's CPU limit and wall backstop too (`judge::test_limits`).
    let kwargs = json!({"tasks": dir.path().join("tasks.jsonl"), "extract": "raw",
        "limits": {"cpu_ms": tl, "wall_ms": (tl * 3).max(tl + 2_000)}})
    .to_string();
    let spin_s = (tl * args.cpu_share) as f64 / 100_000.0;

    // Calibration: the reference alone, its plain run spinning too so its CPU time is observed.
    let mut cal = Vec::new();
    for _ in 0..3 {
        let o = evaluate_one(
            servers[0].client.clone(),
            kwargs.clone(),
            reference(spin_s, true),
        )
        .await?;
        anyhow::ensure!(o.verdict == "AC", "the reference alone must pass");
        cal.push((o.cpu_ms, o.wall_ms));
    }
    let mut t = format!(
        "judged task: CPU limit {tl} ms, wall backstop {} ms; reference spins to {}% of the CPU limit \
         (alone, measured by the sandbox: CPU {:?} ms, wall {:?} ms); {} concurrent one-item `Evaluate` \
         calls per batch, `sandbox.max_concurrent` {}, on {} cores\n\n",
        (tl * 3).max(tl + 2_000),
        args.cpu_share,
        cal.iter().map(|c| c.0).collect::<Vec<_>>(),
        cal.iter().map(|c| c.1).collect::<Vec<_>>(),
        args.items,
        args.max_concurrent,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    t.push_str("| round | re-run | correct references judged TLE | re-runs | batch wall s |\n|---:|---|---:|---:|---:|\n");
    let program = reference(spin_s, false);
    let mut totals = [(0usize, 0usize); 2];
    for r in 1..=args.rounds {
        // Alternate which server goes first, so neither always meets the other's leftovers.
        let order: [usize; 2] = if r % 2 == 1 { [0, 1] } else { [1, 0] };
        for i in order {
            let (tle, reran, secs) = batch(&servers[i], &kwargs, &program, args.items).await?;
            totals[i].0 += tle;
            totals[i].1 += reran;
            let mode = if i == 1 { "on" } else { "off" };
            t.push_str(&format!(
                "| {r} | {mode} | {tle} / {} | {reran} | {secs:.1} |\n",
                args.items
            ));
        }
    }
    let n = args.items * args.rounds;
    for (i, mode) in [(0, "off"), (1, "on")] {
        t.push_str(&format!(
            "| all | {mode} | {} / {n} ({:.1}%) | {} | |\n",
            totals[i].0,
            100.0 * totals[i].0 as f64 / n as f64,
            totals[i].1
        ));
    }
    Ok(t)
}
