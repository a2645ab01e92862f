//! A bounded soak test: one real `codegym serve` (gRPC, HTTP facades, metrics over TCP) under
//! mixed load for `CODEGYM_SOAK_SECS` seconds (default 120; hours in a long run), with faults
//! injected, then checked for leaks. Ignored by plain `cargo test`; run it with
//! `CODEGYM_SOAK_SECS=120 cargo test -p codegym --test soak -- --ignored --nocapture`.
//!
//! The load (`support/soak_load.rs`): `Evaluate` batches (Python and C), `Session` streams, unary
//! `Step`s, `/run_code` (Python and C), `/submit` and OpenEnv WebSocket episodes, whose rewards
//! are known exactly, beside hostile programs (fork bomb, memory hog, output flood, sleeper, a
//! child outliving its run). Beside it (`support/soak_rollout.rs`), `codegym rollout` round after
//! round over a pool of this server and two more, against the fake model answering some requests
//! with 429 and 500. The faults: the sandbox's fork server SIGKILLed from outside every few
//! seconds, a pool server SIGKILLed and restarted on its address every 20 s, and clients that
//! drop a gRPC stream, an `Evaluate` call, an HTTP request or a WebSocket mid-flight.
//!
//! The checks: every request got its exact outcome (no 5xx, no gRPC error), the good requests'
//! p99 latency is bounded, every rollout round has each episode once with its exact reward and no
//! error, the model's faults were retried and the killed servers' episodes restarted, and after a
//! settle the server's fds, threads and RSS are back near a baseline taken after warm-up, no
//! process is left under it but the fork server (and the children it forked ahead), and no run
//! dir, run cgroup or temp file is left. Each figure is printed, so CI's log shows them. The
//! dataset's disk filling up and the package cache made unreadable have tests of their own
//! (`dataset_disk_full.rs`, `package_cache_unreadable.rs`): their faults fail requests on purpose,
//! which the soak's checks allow nowhere.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;
#[allow(dead_code)] // the sandbox tests' helpers beside the finder
#[path = "../sandbox/tests/support/forkserver.rs"]
mod forkserver;
#[path = "support/rollout_util.rs"]
mod rollout_util;
#[path = "support/soak_load.rs"]
mod soak_load;
#[path = "support/soak_proc.rs"]
mod soak_proc;
#[path = "support/soak_rollout.rs"]
mod soak_rollout;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use soak_load::{Tally, Target};
use soak_proc::Snapshot;
use soak_rollout::{PoolServer, RolloutTally};

/// Runs the sandbox may have in flight (also the bound on the run cgroups it keeps for reuse).
const MAX_CONCURRENT: usize = 8;
/// The sandbox's cache of compiled programs (the default is 512 MiB).
const COMPILE_CACHE_BYTES: u64 = 4 << 20;
/// Clients sending good requests at once.
const GOOD_CLIENTS: u64 = 4;
/// How often the fork server is SIGKILLed: runs in flight then are run again, once.
const KILL_EVERY: Duration = Duration::from_secs(5);
/// Generous: the host runs other builds; a leak or a stuck run shows as far more.
const P99_BOUND_MS: f64 = 30_000.0;
/// How long the server may take after the load to give back what it held.
const SETTLE: Duration = Duration::from_secs(30);

fn soak_secs() -> u64 {
    std::env::var("CODEGYM_SOAK_SECS")
        .ok()
        .map(|s| s.parse().expect("CODEGYM_SOAK_SECS is a number of seconds"))
        .unwrap_or(120)
}

/// One good request of each kind by turn, `n` the request's number.
async fn good(t: &Target, tally: &Tally, n: u64) {
    let start = Instant::now();
    let (kind, r) = match n % 6 {
        0 => ("Evaluate batch", soak_load::evaluate_batch(t, n).await),
        1 => ("Session stream", soak_load::session_episode(t, n).await),
        2 => ("unary Step", soak_load::unary_steps(t, n).await),
        3 => ("/run_code", soak_load::run_code(t, n).await),
        4 => ("/submit", soak_load::submit(t, n).await),
        _ => ("OpenEnv WebSocket", soak_load::openenv_episode(t, n).await),
    };
    tally.record(kind, start, true, r);
}

/// SIGKILLs the sandbox's fork servers (found by their cmdline and work root) every 5 s, and
/// scrapes `/metrics` between kills.
async fn kill_fork_servers(t: &Target, work: &std::path::Path, tally: &Tally, until: Instant) {
    while Instant::now() + KILL_EVERY < until {
        tokio::time::sleep(KILL_EVERY).await;
        for pid in forkserver::server_processes(work).0 {
            // SAFETY: kill(2) on a pid just found; at worst ESRCH.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            tally.count("fault: fork server SIGKILLed", 0);
        }
        let start = Instant::now();
        let scrape = soak_proc::metric(t, soak_proc::RESTARTS).await.map(|_| 0);
        tally.record("metrics scrape", start, false, scrape);
    }
}

/// The load and the faults, all at once until `until`.
async fn load(t: &Target, work: &std::path::Path, tally: &Arc<Tally>, until: Instant) {
    let next = Arc::new(AtomicU64::new(1_000));
    let mut tasks = Vec::new();
    for _ in 0..GOOD_CLIENTS {
        let (t, tally, next) = (t.clone(), tally.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                good(&t, &tally, next.fetch_add(1, Ordering::Relaxed)).await;
            }
        }));
    }
    let (t2, tally2, next2) = (t.clone(), tally.clone(), next.clone());
    tasks.push(tokio::spawn(async move {
        while Instant::now() < until {
            let n = next2.fetch_add(1, Ordering::Relaxed);
            let start = Instant::now();
            let r = soak_load::hostile(&t2, n).await;
            tally2.record("hostile (5 programs + 2 /run_code)", start, false, r);
        }
    }));
    let (t3, tally3, next3) = (t.clone(), tally.clone(), next.clone());
    tasks.push(tokio::spawn(async move {
        while Instant::now() < until {
            let n = next3.fetch_add(1, Ordering::Relaxed);
            let kind = soak_load::drop_mid_flight(&t3, n).await;
            tally3.count(kind, 0);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }));
    kill_fork_servers(t, work, tally, until).await;
    for task in tasks {
        task.await.expect("a load task panicked");
    }
}

/// The rollout's rounds over the pool (`urls`: the soak's server and `pool`), and the pool's
/// faults: one of `pool` SIGKILLed and restarted on its address every 20 s, by turn. Returns the
/// rounds' tally and the kills.
async fn rollout_load(
    urls: Vec<String>,
    mut pool: Vec<PoolServer>,
    dir: &std::path::Path,
    until: Instant,
) -> (RolloutTally, u64, Vec<PoolServer>) {
    let model = soak_rollout::model().await;
    let killed: soak_rollout::Killed = Arc::new(Mutex::new(Default::default()));
    let killer_killed = killed.clone();
    let killer = tokio::spawn(async move {
        let mut kills = 0u64;
        while Instant::now() + soak_rollout::KILL_POOL_EVERY < until {
            tokio::time::sleep(soak_rollout::KILL_POOL_EVERY).await;
            let victim = &mut pool[kills as usize % 2];
            let kill = soak_rollout::Kill {
                addr: victim.serve.addr.clone(),
                killed_ms: soak_rollout::now_ms(),
                restarted_ms: None,
            };
            killer_killed.lock().unwrap().push(kill);
            victim.kill_and_restart().await;
            let restarted = Some(soak_rollout::now_ms());
            killer_killed
                .lock()
                .unwrap()
                .last_mut()
                .unwrap()
                .restarted_ms = restarted;
            kills += 1;
        }
        (kills, pool)
    });
    let tally = soak_rollout::rounds(urls, &model, dir, killed, until).await;
    let (kills, pool) = killer.await.expect("the pool killer panicked");
    (tally, kills, pool)
}

/// The rollout's figures, and its checks over all rounds.
fn check_rollouts(r: &RolloutTally, pool_kills: u64) {
    println!(
        "soak: rollout: {} rounds, {} episodes; pool server SIGKILLed and restarted {pool_kills} times; episode restarts by lost server {:?}",
        r.rounds, r.episodes, r.restarts
    );
    println!(
        "soak: rollout: the fake model answered {} faults; retries in the summaries {:?}",
        r.faults, r.retries
    );
    println!(
        "soak: rollout: episodes on a killed server after its restart: by the same round's pool {:?}, in later rounds {:?}",
        r.taken_back_mid_round, r.served_after_restart
    );
    let shown: Vec<_> = r.failures.iter().take(5).cloned().collect();
    assert!(
        r.failures.is_empty(),
        "{} failed rollout rounds:\n{}",
        r.failures.len(),
        shown.join("\n")
    );
    assert!(r.episodes > 0, "no rollout round finished");
    for kind in ["rate_limited", "server_error"] {
        assert!(
            r.retries.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} retry in the summaries: {:?}",
            r.retries
        );
    }
    assert!(
        pool_kills == 0 || !r.restarts.is_empty(),
        "{pool_kills} pool servers killed, but no episode was restarted"
    );
    // A restarted server works again, and the pool that saw it die takes it back on its address.
    let killed = pool_kills.min(2) as usize;
    let mut back: BTreeSet<&String> = r.served_after_restart.keys().collect();
    back.extend(r.taken_back_mid_round.keys());
    assert_eq!(
        back.len(),
        killed,
        "restarted servers that got no episode again: {back:?}"
    );
    assert!(
        pool_kills == 0 || !r.taken_back_mid_round.is_empty(),
        "no round's pool placed an episode on a server it saw killed and restarted"
    );
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes long: run with --ignored (CI's heavy step, CODEGYM_SOAK_SECS)"]
async fn one_server_under_load_and_faults_holds_its_results_and_leaks_nothing() {
    let secs = soak_secs();
    let dir = tempfile::tempdir().expect("tempdir");
    let (work, tmp) = (dir.path().join("work"), dir.path().join("tmp"));
    std::fs::create_dir(&work).unwrap();
    std::fs::create_dir(&tmp).unwrap();
    // Its own uid range, so that no other codegym on this host shares it (checked at the end);
    // a small compile cache, so that the RSS check sees leaks, not the cache filling up with the
    // C programs (each one new).
    let sandbox = serde_json::json!({"work_root": work, "max_concurrent": MAX_CONCURRENT,
                                     "uid_base": soak_proc::uid_base(), "uid_count": soak_proc::UID_COUNT,
                                     "compile_cache_bytes": COMPILE_CACHE_BYTES});
    let config = serde_json::json!({"coding": {"sandbox": sandbox, "verdict_cache_mib": 0}});
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    std::fs::write(dir.path().join("HumanEval.jsonl"), soak_load::HUMANEVAL).unwrap();
    let mut cmd = codegym_bin::command(codegym_bin::BIN, ["serve", "--addr", "127.0.0.1:0"]);
    cmd.args(["--http", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"])
        .args([
            "--config",
            "config.json",
            "--http-dataset",
            "humaneval_python=HumanEval.jsonl",
        ])
        .env("TMPDIR", &tmp)
        .env("RUST_LOG", "error")
        .current_dir(dir.path());
    let prefixes = ["http listening on ", "metrics listening on "];
    let (mut serve, found) = codegym_bin::Serve::start_command(cmd, &prefixes).await;
    let pid = serve.child.id().expect("running") as i32;
    let grpc = tonic::transport::Channel::from_shared(serve.url())
        .unwrap()
        .connect()
        .await
        .expect("connect");
    let mut pool = Vec::new();
    let mut urls = vec![serve.url()];
    for i in 0..2 {
        let server = PoolServer::start(dir.path(), i).await;
        urls.push(server.serve.url());
        pool.push(server);
    }
    let t = Target {
        grpc,
        http: found[0].clone(),
        metrics: found[1].clone(),
        client: reqwest::Client::new(),
    };

    // Warm-up: every kind once, then the baseline.
    let warm = Arc::new(Tally::default());
    for n in 0..6 {
        good(&t, &warm, n).await;
    }
    warm.record(
        "hostile",
        Instant::now(),
        false,
        soak_load::hostile(&t, 5).await,
    );
    soak_proc::assert_no_failures("warm-up", &warm);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let base = Snapshot::take(pid, &work, &tmp);
    println!(
        "soak: {secs} s against pid {pid}; baseline after warm-up: {} fds, {} threads, {} KiB RSS, {} run cgroups",
        base.fds, base.threads, base.rss_kib, base.cgroups
    );

    let tally = Arc::new(Tally::default());
    let start = Instant::now();
    let until = start + Duration::from_secs(secs);
    let ((rollouts, pool_kills, pool), ()) = tokio::join!(
        rollout_load(urls, pool, dir.path(), until),
        load(&t, &work, &tally, until)
    );
    let elapsed = start.elapsed().as_secs_f64();

    // The load's figures.
    let runs = *tally.runs.lock().unwrap();
    for (kind, count) in tally.counts.lock().unwrap().iter() {
        println!("soak: {count:>6} {kind}");
    }
    let mut lat = tally.latencies_ms.lock().unwrap().clone();
    lat.sort_by(f64::total_cmp);
    assert!(!lat.is_empty(), "no good request finished");
    let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
    println!(
        "soak: {} good requests, {runs} sandbox runs in {elapsed:.0} s ({:.1} runs/s); good latency p50 {p50:.0} ms, p99 {p99:.0} ms, max {:.0} ms",
        lat.len(),
        runs as f64 / elapsed,
        lat[lat.len() - 1]
    );
    soak_proc::assert_no_failures("the soak", &tally);
    assert!(
        p99 <= P99_BOUND_MS,
        "p99 latency {p99:.0} ms over {P99_BOUND_MS} ms"
    );
    let kills = tally
        .counts
        .lock()
        .unwrap()
        .get("fault: fork server SIGKILLed")
        .copied()
        .unwrap_or(0);
    let restarts = soak_proc::metric(&t, soak_proc::RESTARTS)
        .await
        .expect("scrape /metrics");
    println!("soak: fork server SIGKILLed {kills} times; the server counted {restarts} restarts");
    assert!(secs < 10 || kills > 0, "no fork server was found to kill");
    assert!(
        restarts >= 1.0 || kills == 0,
        "the kills were not seen by the server"
    );

    check_rollouts(&rollouts, pool_kills);
    drop(pool);

    // After a settle, the server holds what it held before the load.
    let end = soak_proc::settle(pid, &work, &tmp, &base, MAX_CONCURRENT, SETTLE).await;
    soak_proc::print_and_check(&base, &end, MAX_CONCURRENT);

    serve.signal(nix::sys::signal::Signal::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(60), serve.child.wait())
        .await
        .expect("the server stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "exit status after SIGTERM: {status:?}");
    // And a stopped server leaves nothing of its sandbox behind.
    let left: Vec<_> = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "the stopped server left {left:?}");
}
