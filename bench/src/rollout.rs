//! `codegym-bench rollout`: the rollout engine's overhead against the ideal schedule, and its memory
//! per in-flight episode.
//!
//! The model is the fake OpenAI server with a fixed latency and the environment answers instantly
//! (a tiny env registered here), so any time beyond the ideal schedule (every episode taking exactly
//! `turns x latency`) is the engine's: scheduling, HTTP, JSON, records and the dataset writer. The
//! run also reports the CPU the engine and the fake model used, and how much the hypervisor stole:
//! on a shared VM, steal moves the wall time more than anything the engine does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use env_core::{
    CallCost, Env, EnvError, EnvSpec, ExecutionResult, Info, Options, Registry, Space, Step, Value,
};
use rollout::config::{ProgressMode, RolloutConfig};
use tokio_util::sync::CancellationToken;

pub use crate::rollout_harness::{FAKE_WORKERS, FakeServerPlace, serve_fake_llm};
use crate::rollout_harness::{FakeServer, cpu_secs, machine_ticks, rss_bytes};

/// Parameters of the benchmark.
#[derive(Debug, Clone)]
pub struct RolloutBenchArgs {
    /// Episodes of the throughput run.
    pub episodes: usize,
    /// Model turns per episode (the env never solves, so every episode takes all of them).
    pub turns: u32,
    /// Fake model latency per request.
    pub latency: Duration,
    /// Episodes in flight in the throughput run.
    pub concurrency: usize,
    /// Episodes all in flight at once in the memory run (one slow turn each).
    pub memory_episodes: usize,
    /// Where the fake model server runs.
    pub fake_server: FakeServerPlace,
    /// Runtime threads of the fake model in its own process.
    pub fake_workers: usize,
    /// The call cost the instant env declares.
    pub env_calls: EnvCalls,
}

/// The [`CallCost`] the benchmark's instant env declares in its spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EnvCalls {
    /// `CallCost::Cheap`: the engine calls the env in place.
    Cheap,
    /// `CallCost::Blocking`: every env call is handed to a blocking thread.
    Blocking,
}

impl From<EnvCalls> for CallCost {
    fn from(e: EnvCalls) -> CallCost {
        match e {
            EnvCalls::Cheap => CallCost::Cheap,
            EnvCalls::Blocking => CallCost::Blocking,
        }
    }
}

impl Default for RolloutBenchArgs {
    fn default() -> Self {
        RolloutBenchArgs {
            episodes: 2_000,
            turns: 3,
            latency: Duration::from_millis(50),
            concurrency: 256,
            memory_episodes: 4_000,
            fake_server: FakeServerPlace::Process,
            fake_workers: FAKE_WORKERS,
            env_calls: EnvCalls::Cheap,
        }
    }
}

const ENV_ID: &str = "bench/Instant-v0";

/// An env that answers at once: the prompt on reset, a failed execution on every step.
struct InstantEnv;

/// The program of an action: the engine sends code blocks as `run_python` tool calls, as the coding
/// env accepts them.
struct Program(String);

impl TryFrom<Value> for Program {
    type Error = EnvError;

    fn try_from(action: Value) -> Result<Program, EnvError> {
        match action {
            Value::Json(call) => match call.get("code").and_then(|c| c.as_str()) {
                Some(code) => Ok(Program(code.to_owned())),
                None => Err(EnvError::InvalidAction("expected a run_python call".into())),
            },
            Value::Text(code) => Ok(Program(code)),
            other => Err(EnvError::InvalidAction(format!(
                "expected a run_python call, got {}",
                other.kind()
            ))),
        }
    }
}

impl Env for InstantEnv {
    type Obs = Value;
    type Action = Program;

    fn reset(&mut self, _seed: Option<u64>, options: &Options) -> env_core::Result<(Value, Info)> {
        let task = options
            .get("task_id")
            .and_then(|v| v.as_str())
            .unwrap_or("task");
        Ok((Value::Text(format!("Solve {task}.")), Info::new()))
    }

    fn step(&mut self, action: Program) -> env_core::Result<Step<Value>> {
        let obs = Value::Execution(ExecutionResult {
            exit_code: Some(1),
            stderr: format!("{} bytes received; not solved", action.0.len()),
            ..ExecutionResult::default()
        });
        Ok(Step {
            obs,
            reward: 0.0,
            terminated: false,
            truncated: false,
            info: Info::new(),
        })
    }

    fn observation_space(&self) -> Space {
        text_space()
    }

    fn action_space(&self) -> Space {
        text_space()
    }
}

fn text_space() -> Space {
    Space::Text {
        min_length: 0,
        max_length: 1 << 20,
        charset: None,
    }
}

fn registry(call_cost: CallCost) -> Result<Arc<Registry>, EnvError> {
    let mut registry = Registry::new();
    let spec = EnvSpec {
        id: ENV_ID.into(),
        description: "answers instantly (rollout benchmark)".into(),
        max_episode_steps: None,
        reward_threshold: None,
        nondeterministic: false,
        observation_space: text_space(),
        action_space: text_space(),
        default_kwargs: serde_json::Map::new(),
        call_cost,
        metadata: Default::default(),
    };
    registry.register(
        spec,
        Arc::new(|_| Ok(Box::new(InstantEnv) as Box<dyn env_core::DynEnv>)),
    )?;
    Ok(Arc::new(registry))
}

/// One measured run.
struct Measured {
    secs: f64,
    /// Means over episodes, in ms: wall, model calls, env calls.
    episode_ms: (f64, f64, f64),
    episodes: u64,
    requests: u64,
    peak_rss_delta: u64,
    /// CPU seconds (user + system) used during the run by this process and by the fake server's.
    cpu_secs: (f64, Option<f64>),
    /// Share of the machine's CPU time the hypervisor gave to others during the run ("steal").
    steal: Option<f64>,
}

/// The two measured runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// `episodes` x `turns` at `concurrency`: wall time against the ideal schedule.
    Throughput,
    /// `memory_episodes` all in flight at once, one slow turn each: peak RSS. Sampled only here:
    /// reading `/proc/self/statm` every 10 ms took ~3% of the engine process's CPU.
    Memory,
}

/// Latency of the memory run's single turn: long enough for every episode to be in flight.
const MEMORY_LATENCY: Duration = Duration::from_millis(1_500);

async fn measure(args: &RolloutBenchArgs, phase: Phase) -> anyhow::Result<Measured> {
    let (episodes, turns, latency, concurrency) = match phase {
        Phase::Throughput => (args.episodes, args.turns, args.latency, args.concurrency),
        Phase::Memory => (
            args.memory_episodes,
            1,
            MEMORY_LATENCY,
            args.memory_episodes,
        ),
    };
    let server = FakeServer::start(args.fake_server, latency, args.fake_workers).await?;
    let dir = std::env::temp_dir().join(format!("codegym-bench-rollout-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir)?;
    let mut config = RolloutConfig {
        env_id: ENV_ID.into(),
        tasks: (0..episodes).map(|i| format!("t{i}")).collect(),
        samples: 1,
        concurrency,
        ..RolloutConfig::default()
    };
    config.model.model = "bench/model".into();
    config.model.base_urls = vec![server.base_url()];
    config.model.api_key_env = Some(Vec::new());
    config.episode.max_turns = turns;
    config.output.out = dir.join("bench.jsonl");
    config.output.progress = ProgressMode::Off;

    let baseline = rss_bytes();
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(baseline));
    let sampler = (phase == Phase::Memory).then(|| {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_bytes(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    });
    let cpu_before = (cpu_secs("self"), server.cpu_secs());
    let machine_before = machine_ticks();
    let start = Instant::now();
    let summary = rollout::run(
        config,
        rollout::EnvBackend::in_process(registry(args.env_calls.into())?),
        CancellationToken::new(),
    )
    .await;
    let secs = start.elapsed().as_secs_f64();
    let cpu_after = (cpu_secs("self"), server.cpu_secs());
    let steal = machine_ticks()
        .zip(machine_before)
        .map(|((total, steal), (total0, steal0))| {
            (steal - steal0) as f64 / (total - total0).max(1) as f64
        });
    if let Some(sampler) = sampler {
        sampler.abort();
    }
    let records = rollout::dataset::read_latest(&dir.join("bench.jsonl"));
    let _ = std::fs::remove_dir_all(&dir);
    let summary = summary?;
    let records = records?;
    let n = records.len().max(1) as f64;
    let mean = |f: fn(&rollout::dataset::record::Timings) -> u64| {
        records.iter().map(|r| f(&r.timings) as f64).sum::<f64>() / n
    };
    let episode_ms = (
        mean(|t| t.wall_ms),
        mean(|t| t.model_ms),
        mean(|t| t.env_ms),
    );
    Ok(Measured {
        secs,
        episode_ms,
        episodes: summary.episodes_this_run,
        requests: records
            .iter()
            .flat_map(|r| &r.turns)
            .map(|t| u64::from(t.model_call.attempts))
            .sum(),
        peak_rss_delta: peak
            .load(std::sync::atomic::Ordering::Relaxed)
            .saturating_sub(baseline),
        cpu_secs: (
            cpu_after.0.zip(cpu_before.0).map_or(0.0, |(a, b)| a - b),
            cpu_after.1.zip(cpu_before.1).map(|(a, b)| a - b),
        ),
        steal,
    })
}

/// Runs the throughput and memory measurements; returns a Markdown table.
pub async fn run(args: RolloutBenchArgs) -> anyhow::Result<String> {
    anyhow::ensure!(
        args.episodes > 0 && args.concurrency > 0 && args.turns > 0,
        "empty benchmark"
    );
    let m = measure(&args, Phase::Throughput).await?;
    anyhow::ensure!(
        m.episodes == args.episodes as u64,
        "only {} of {} episodes ran",
        m.episodes,
        args.episodes
    );
    // Every episode takes exactly `turns x latency`, so with `concurrency` slots the best possible
    // schedule runs ceil(episodes / slots) rounds of them back to back.
    let latency = args.latency.as_secs_f64();
    let rounds = args.episodes.div_ceil(args.concurrency) as f64;
    let ideal = rounds * f64::from(args.turns) * latency;
    let overhead = (m.secs / ideal - 1.0) * 100.0;

    let mem_latency = MEMORY_LATENCY;
    let mem = measure(&args, Phase::Memory).await?;
    let per_episode_kib = mem.peak_rss_delta as f64 / args.memory_episodes.max(1) as f64 / 1024.0;

    let mut t = String::new();
    t.push_str("| run | episodes | turns | latency | concurrency | requests | wall s | ideal s | overhead | episodes/s | episode ms: wall / model / env |\n");
    t.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    t.push_str(&format!(
        "| throughput | {} | {} | {} ms | {} | {} | {:.3} | {:.3} | {:+.1}% | {:.0} | {:.1} / {:.1} / {:.1} |\n",
        args.episodes,
        args.turns,
        args.latency.as_millis(),
        args.concurrency,
        m.requests,
        m.secs,
        ideal,
        overhead,
        m.episodes as f64 / m.secs,
        m.episode_ms.0,
        m.episode_ms.1,
        m.episode_ms.2
    ));
    t.push_str(&format!(
        "| memory | {} | 1 | {} ms | {} | {} | {:.3} | {:.3} | peak RSS +{:.1} MiB, {:.1} KiB/episode in flight | {:.0} | {:.1} / {:.1} / {:.1} |\n",
        args.memory_episodes,
        mem_latency.as_millis(),
        args.memory_episodes,
        mem.requests,
        mem.secs,
        mem_latency.as_secs_f64(),
        mem.peak_rss_delta as f64 / (1024.0 * 1024.0),
        per_episode_kib,
        mem.episodes as f64 / mem.secs,
        mem.episode_ms.0,
        mem.episode_ms.1,
        mem.episode_ms.2
    ));
    let per_request = |cpu: f64| cpu * 1e3 / m.requests.max(1) as f64;
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
    let fake = m.cpu_secs.1.map_or_else(
        || "shares this process".to_string(),
        |c| format!("{c:.2} s ({:.3} ms/request)", per_request(c)),
    );
    t.push_str(&format!(
        "\nThroughput run CPU: engine {:.2} s ({:.3} ms/request), fake model {fake}; {:.0}% of {cores} cores over {:.3} s; stolen by the hypervisor: {}.\n",
        m.cpu_secs.0,
        per_request(m.cpu_secs.0),
        (m.cpu_secs.0 + m.cpu_secs.1.unwrap_or(0.0)) / (m.secs * cores) * 100.0,
        m.secs,
        m.steal
            .map_or_else(|| "unknown".to_string(), |s| format!("{:.1}%", s * 100.0)),
    ));
    Ok(t)
}
