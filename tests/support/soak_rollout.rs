//! The soak's rollout (`tests/soak.rs`): for the whole soak, `codegym rollout` (the real binary)
//! runs round after round against the fake model, which answers some requests with 429 and 500,
//! over a pool of the soak's server and two more `codegym serve` processes, one of which is
//! SIGKILLed and restarted on the same address every [`KILL_POOL_EVERY`].
//!
//! Each round is checked when it ends: exit 0, every episode exactly once, none an error, every
//! reward the one the fake model's program earns (the script answers even-positioned tasks with
//! their reference solution, reward 1, the others with a wrong program, reward 0), every restart
//! on a server that was killed. Over all rounds: the model's faults were each retried once (the
//! fake's count equals the summaries' retries, 429s and 500s both seen), and some episode was
//! restarted when a kill landed.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_llm::{FakeLlm, Fault, FaultRule};
use rollout::dataset::record::StopReason;
use rollout::dataset::sidecar;

use crate::codegym_bin::{self, Serve};
use crate::rollout_util::{per_episode, records, rollout_args, script, task_ids};

/// How often a pool server is SIGKILLed (then restarted on its address).
pub const KILL_POOL_EVERY: Duration = Duration::from_secs(20);
/// Tasks and samples of one round: 120 episodes, about 10 s under the soak's load, so that most
/// kills land mid-round and the round's own pool must take the restarted server back.
const TASKS: usize = 4;
const SAMPLES: u32 = 30;
/// The fake model's faults: 429 (with a short `retry-after-ms`) and 500, on a fraction of requests
/// each. Low enough that six failures in a row (the client's retries) never happen in a soak.
const RATE_429: f64 = 0.06;
const RATE_500: f64 = 0.04;
/// The uid range of the pool's extra servers: after the soak server's own.
const POOL_UID_COUNT: u32 = 256;

/// One extra pool server: its address is kept across restarts.
pub struct PoolServer {
    pub serve: Serve,
    config: PathBuf,
    dir: PathBuf,
    /// Incarnations so far (each gets a fresh work root).
    generation: u32,
    index: u32,
}

impl PoolServer {
    /// Starts server `index` in `dir` (its config, work roots), on a free port the first time.
    pub async fn start(dir: &Path, index: u32) -> PoolServer {
        let dir = dir.join(format!("pool-{index}"));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("config.json");
        let serve = spawn_server(&dir, &config, index, 0, "127.0.0.1:0").await;
        PoolServer {
            serve,
            config,
            dir,
            generation: 0,
            index,
        }
    }

    /// SIGKILLs the server, waits for it to die, and starts it again on the same address.
    pub async fn kill_and_restart(&mut self) {
        self.serve.signal(nix::sys::signal::Signal::SIGKILL);
        let _ = self.serve.child.wait().await;
        self.generation += 1;
        let addr = self.serve.addr.clone();
        self.serve =
            spawn_server(&self.dir, &self.config, self.index, self.generation, &addr).await;
        assert_eq!(self.serve.addr, addr, "the server came back elsewhere");
    }
}

async fn spawn_server(dir: &Path, config: &Path, index: u32, generation: u32, addr: &str) -> Serve {
    let work = dir.join(format!("work-{generation}"));
    std::fs::create_dir_all(&work).unwrap();
    let uid_base =
        crate::soak_proc::uid_base() + crate::soak_proc::UID_COUNT + index * POOL_UID_COUNT;
    let sandbox = serde_json::json!({"work_root": work, "max_concurrent": 4,
                                     "uid_base": uid_base, "uid_count": POOL_UID_COUNT});
    let json = serde_json::json!({"coding": {"sandbox": sandbox}});
    std::fs::write(config, json.to_string()).unwrap();
    let mut cmd = codegym_bin::command(codegym_bin::BIN, ["serve", "--addr", addr]);
    cmd.arg("--config").arg(config).env("RUST_LOG", "error");
    Serve::start_command(cmd, &[]).await.0
}

/// The fake model: the rollout tests' script (even-positioned tasks solved), with 429s and 500s.
pub async fn model() -> FakeLlm {
    let mut s = script(200);
    s.faults = vec![
        FaultRule::with_rate(
            Fault::RateLimited {
                retry_after_secs: None,
                retry_after_ms: Some(50),
            },
            RATE_429,
        ),
        FaultRule::with_rate(Fault::Status(500), RATE_500),
    ];
    s.fault_seed = 7;
    FakeLlm::start(s).await.expect("start the fake model")
}

/// What the rounds did, and every failure.
#[derive(Default)]
pub struct RolloutTally {
    pub rounds: u64,
    pub episodes: u64,
    /// Restarts recorded, by the server that was lost.
    pub restarts: BTreeMap<String, u64>,
    /// Retried model failures from the summaries, by kind.
    pub retries: BTreeMap<String, u64>,
    /// Faults the fake model answered during the rounds.
    pub faults: u64,
    /// Episodes placed on a killed server after it was restarted, in a later round, by its address.
    pub served_after_restart: BTreeMap<String, u64>,
    /// The same, by the pool of a round that was running when the server was killed.
    pub taken_back_mid_round: BTreeMap<String, u64>,
    pub failures: Vec<String>,
}

/// One kill of a pool server: its address, when it was killed and when it was listening again
/// (milliseconds since the Unix epoch, as records time their episodes).
#[derive(Clone)]
pub struct Kill {
    pub addr: String,
    pub killed_ms: u64,
    pub restarted_ms: Option<u64>,
}

/// The kills so far.
pub type Killed = Arc<Mutex<Vec<Kill>>>;

pub fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.expect("after 1970").as_millis() as u64
}

/// Runs rounds until `until` (the last one runs to its end), each checked.
pub async fn rounds(
    urls: Vec<String>,
    model: &FakeLlm,
    dir: &Path,
    killed: Killed,
    until: Instant,
) -> RolloutTally {
    let mut tally = RolloutTally::default();
    let tasks = task_ids(TASKS);
    let config = dir.join("rollout.json");
    // Short backoffs: the fake model's 500s carry no retry-after, and the default first step
    // (500 ms, doubled) would spend the soak waiting.
    let json = r#"{"model": {"backoff_initial_ms": 50, "backoff_max_ms": 1000}}"#;
    std::fs::write(&config, json).unwrap();
    while Instant::now() < until {
        tally.rounds += 1;
        let out = dir.join(format!("round-{}.jsonl", tally.rounds));
        let mut args = rollout_args(&model.base_url(), &tasks, SAMPLES, &out);
        for url in &urls {
            args.extend(["--env-server".to_string(), url.clone()]);
        }
        args.extend(["--concurrency", "6", "--config"].map(String::from));
        args.push(config.display().to_string());
        let started = now_ms();
        let faults_before = model.fault_count();
        let (code, stdout, stderr) = codegym_bin::finish(codegym_bin::spawn(&args)).await;
        let faults = model.fault_count() - faults_before;
        tally.faults += faults;
        let round = tally.rounds;
        if code != 0 {
            let err = format!("round {round}: exit {code}\nstdout: {stdout}\nstderr: {stderr}");
            tally.failures.push(err);
            continue;
        }
        let kills = killed.lock().unwrap().clone();
        taken_back(&out, started, &kills, &mut tally);
        let killed: BTreeSet<String> = kills.into_iter().map(|k| k.addr).collect();
        if let Err(e) = check_round(&out, &tasks, &killed, faults, &mut tally) {
            tally.failures.push(format!("round {round}: {e}"));
        }
    }
    tally
}

/// Counts the round's episodes that started on a server after its restart: in a round that
/// started after the restart (the server works again), and in a round that started before the
/// kill (the same pool took the server back).
fn taken_back(out: &Path, round_started: u64, kills: &[Kill], tally: &mut RolloutTally) {
    for r in records(out) {
        let (Some(server), start) = (r.env_server.as_ref(), r.timings.started_at_ms) else {
            continue;
        };
        for k in kills.iter().filter(|k| &k.addr == server) {
            let Some(restarted) = k.restarted_ms.filter(|&t| t < start) else {
                continue;
            };
            if restarted < round_started {
                *tally
                    .served_after_restart
                    .entry(k.addr.clone())
                    .or_default() += 1;
            } else if k.killed_ms > round_started {
                *tally
                    .taken_back_mid_round
                    .entry(k.addr.clone())
                    .or_default() += 1;
            }
        }
    }
}

/// One round's dataset and summary.
fn check_round(
    out: &Path,
    tasks: &[String],
    killed: &BTreeSet<String>,
    faults: u64,
    tally: &mut RolloutTally,
) -> Result<(), String> {
    let all = records(out);
    let counts = per_episode(&all);
    let expected = tasks.len() * SAMPLES as usize;
    if counts.len() != expected || counts.values().any(|&n| n != 1) {
        return Err(format!(
            "{} episodes in {} records, {expected} expected once each: {counts:?}",
            counts.len(),
            all.len()
        ));
    }
    let reward: HashMap<&str, f64> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), if i % 2 == 0 { 1.0 } else { 0.0 }))
        .collect();
    for r in &all {
        if r.stop_reason == StopReason::Error {
            return Err(format!("{}: an error record: {:?}", r.episode_id, r.error));
        }
        if r.final_reward != reward[r.task_id.as_str()] {
            return Err(format!(
                "{} ({}): reward {}, expected {}",
                r.episode_id,
                r.task_id,
                r.final_reward,
                reward[r.task_id.as_str()]
            ));
        }
        for x in &r.restarts {
            if !killed.contains(&x.env_server) {
                return Err(format!(
                    "{}: restarted off {}, which was not killed ({:?})",
                    r.episode_id, x.env_server, x.reason
                ));
            }
            *tally.restarts.entry(x.env_server.clone()).or_default() += 1;
        }
    }
    let text = std::fs::read_to_string(sidecar(out, ".summary.json")).map_err(|e| e.to_string())?;
    let summary: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    if summary["errors_by_kind"] != serde_json::json!({}) {
        return Err(format!("errors in the summary: {summary}"));
    }
    let mut retried = 0;
    for (kind, n) in summary["retries_by_kind"].as_object().into_iter().flatten() {
        let n = n.as_u64().unwrap_or(0);
        retried += n;
        *tally.retries.entry(kind.clone()).or_default() += n;
    }
    // Each fault the model answered was retried once. A restarted episode's records keep only
    // the attempt that finished, so its lost turns' retries may be missing from the summary.
    let restarted = all.iter().any(|r| !r.restarts.is_empty());
    if retried > faults || (!restarted && retried != faults) {
        return Err(format!(
            "the fake model answered {faults} faults, the summary counts {retried} retries: {summary}"
        ));
    }
    tally.episodes += all.len() as u64;
    Ok(())
}
