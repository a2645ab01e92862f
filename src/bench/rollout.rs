//! `codegym bench rollout`: the rollout engine's overhead against the ideal schedule, and its memory
//! per in-flight episode.
//!
//! The model is the fake OpenAI server with a fixed latency and the environment answers instantly
//! (a tiny env registered here), so any time beyond `episodes x turns x latency / concurrency` is
//! the engine's: scheduling, HTTP, JSON, records and the dataset writer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use env_core::{
    Env, EnvError, EnvSpec, ExecutionResult, Info, Options, Registry, Space, Step, Value,
};
use rollout::config::{ProgressMode, RolloutConfig};
use rollout::fake_llm::{FakeLlm, FakeScript, Reply};

/// Serves the benchmark's fake model until stdin closes (the benchmark ended or died): prints
/// `listening on <base URL>` first.
pub async fn serve_fake_llm(latency: Duration) -> anyhow::Result<()> {
    use tokio::io::AsyncReadExt;
    let server = FakeLlm::start(fake_script(latency)?).await?;
    println!("listening on {}", server.base_url());
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    drop(server);
    Ok(())
}
use tokio_util::sync::CancellationToken;

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
}

/// Where the benchmark's fake model server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FakeServerPlace {
    /// Its own process (`codegym bench fake-llm`): this process's time and memory are the engine's.
    Process,
    /// This process, on the engine's runtime (harness and engine measured together).
    InProcess,
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
        }
    }
}

const ENV_ID: &str = "bench/Instant-v0";

/// An env that answers at once: the prompt on reset, a failed execution on every step.
struct InstantEnv;

impl Env for InstantEnv {
    type Obs = Value;
    type Action = String;

    fn reset(&mut self, _seed: Option<u64>, options: &Options) -> env_core::Result<(Value, Info)> {
        let task = options
            .get("task_id")
            .and_then(|v| v.as_str())
            .unwrap_or("task");
        Ok((Value::Text(format!("Solve {task}.")), Info::new()))
    }

    fn step(&mut self, action: String) -> env_core::Result<Step<Value>> {
        let obs = Value::Execution(ExecutionResult {
            exit_code: Some(1),
            stderr: format!("{} bytes received; not solved", action.len()),
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

fn registry() -> Result<Arc<Registry>, EnvError> {
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
}

/// The fake model's script: a fixed latency and a code answer the instant env never accepts.
pub fn fake_script(latency: Duration) -> anyhow::Result<FakeScript> {
    Ok(FakeScript {
        latency_ms: u64::try_from(latency.as_millis())?,
        default_reply: Reply::code("print(sum(range(10)))"),
        ..FakeScript::default()
    })
}

/// A fake server in either place; stops when dropped.
enum FakeServer {
    InProcess(FakeLlm),
    Process {
        base_url: String,
        _child: tokio::process::Child,
    },
}

impl FakeServer {
    async fn start(place: FakeServerPlace, latency: Duration) -> anyhow::Result<FakeServer> {
        if place == FakeServerPlace::InProcess {
            return Ok(FakeServer::InProcess(
                FakeLlm::start(fake_script(latency)?).await?,
            ));
        }
        use tokio::io::AsyncBufReadExt;
        let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
        cmd.args(["bench", "fake-llm", "--latency-ms"])
            .arg(latency.as_millis().to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        // The benchmark's harness, not sandboxed code: the fake model runs in its own process so
        // that this process's time and memory are the engine's alone.
        #[allow(clippy::disallowed_methods)]
        let mut child = cmd.spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("fake server: no stdout"))?;
        let mut line = String::new();
        tokio::io::BufReader::new(stdout)
            .read_line(&mut line)
            .await?;
        let base_url = line
            .trim()
            .strip_prefix("listening on ")
            .ok_or_else(|| anyhow::anyhow!("fake server said {line:?}"))?
            .to_owned();
        Ok(FakeServer::Process {
            base_url,
            _child: child,
        })
    }

    fn base_url(&self) -> String {
        match self {
            FakeServer::InProcess(s) => s.base_url(),
            FakeServer::Process { base_url, .. } => base_url.clone(),
        }
    }
}

async fn measure(
    place: FakeServerPlace,
    episodes: usize,
    turns: u32,
    latency: Duration,
    concurrency: usize,
) -> anyhow::Result<Measured> {
    let server = FakeServer::start(place, latency).await?;
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
    config.model.api_key_env = Vec::new();
    config.episode.max_turns = turns;
    config.output.out = dir.join("bench.jsonl");
    config.output.progress = ProgressMode::Off;

    let baseline = rss_bytes();
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(baseline));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_bytes(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let start = Instant::now();
    let summary = rollout::run(
        config,
        rollout::EnvBackend::in_process(registry()?),
        CancellationToken::new(),
    )
    .await;
    let secs = start.elapsed().as_secs_f64();
    sampler.abort();
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
    })
}

/// Resident set size of this process.
fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .unwrap_or(0);
    pages * 4096
}

/// Runs the throughput and memory measurements; returns a Markdown table.
pub async fn run(args: RolloutBenchArgs) -> anyhow::Result<String> {
    anyhow::ensure!(
        args.episodes > 0 && args.concurrency > 0 && args.turns > 0,
        "empty benchmark"
    );
    let m = measure(
        args.fake_server,
        args.episodes,
        args.turns,
        args.latency,
        args.concurrency,
    )
    .await?;
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

    let mem_latency = Duration::from_millis(1_500);
    let mem = measure(
        args.fake_server,
        args.memory_episodes,
        1,
        mem_latency,
        args.memory_episodes,
    )
    .await?;
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
    Ok(t)
}
