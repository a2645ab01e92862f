//! The rollout benchmark's harness: the fake model server (in its own process by default, so the
//! benchmark process's time and memory are the engine's alone), the start-up of any server process
//! that announces `listening on ADDR` (the fake model, `codegym serve` for the pool benchmark), and
//! the `/proc` readings behind its CPU, steal and memory numbers.

use std::time::Duration;

use fake_llm::{FakeLlm, FakeScript, Reply};

/// The fake model's runtime threads unless told otherwise. On one thread it took less CPU per
/// request (0.045-0.07 ms against 0.06-0.08), but it handles a round's 256 requests one after
/// another: the request it reaches last is answered a few ms late, a different one each round,
/// and the engine was charged ~2 points of overhead for it (median +8.4% against +6.5% over six
/// alternated runs of the rollout example, BENCHMARKS.md).
pub const FAKE_WORKERS: usize = 2;

/// Serves the benchmark's fake model until stdin closes (the benchmark ended or died): prints
/// `listening on <base URL>` first. The server runs on a runtime of its own with `workers` threads
/// (1: a current-thread runtime). `script`: a `FakeScript` JSON file to answer with instead of the
/// rollout benchmark's (its latency replaced by `latency`), for benchmarks that drive
/// `codegym rollout` against real tasks (`bench/cross_check.sh`).
pub async fn serve_fake_llm(
    latency: Duration,
    script: Option<&std::path::Path>,
    workers: usize,
) -> anyhow::Result<()> {
    use tokio::io::AsyncReadExt;
    let script = match script {
        None => fake_script(latency)?,
        Some(path) => FakeScript {
            latency_ms: u64::try_from(latency.as_millis())?,
            ..serde_json::from_slice(&std::fs::read(path)?)?
        },
    };
    let (url_tx, url_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || -> anyhow::Result<()> {
        // Answers are due at exact times; the default 50 us of timer slack would be charged to
        // the engine on every request (on every thread that waits for a timer).
        let _ = nix::sys::prctl::set_timerslack(1);
        let runtime = if workers <= 1 {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .on_thread_start(|| {
                    let _ = nix::sys::prctl::set_timerslack(1);
                })
                .enable_all()
                .build()?
        };
        runtime.block_on(async move {
            let server = FakeLlm::start(script).await?;
            let _ = url_tx.send(server.base_url());
            let _ = stop_rx.await;
            drop(server);
            Ok(())
        })
    });
    let Ok(url) = url_rx.await else {
        return match server.join() {
            Ok(result) => result,
            Err(_) => Err(anyhow::anyhow!("the fake server thread panicked")),
        };
    };
    println!("listening on {url}");
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    let _ = stop_tx.send(());
    Ok(())
}

/// The fake model's script: a fixed latency and a code answer the instant env never accepts.
fn fake_script(latency: Duration) -> anyhow::Result<FakeScript> {
    Ok(FakeScript {
        latency_ms: u64::try_from(latency.as_millis())?,
        default_reply: Reply::code("print(sum(range(10)))"),
        ..FakeScript::default()
    })
}

/// Where the benchmark's fake model server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FakeServerPlace {
    /// Its own process (`codegym-bench fake-llm`): this process's time and memory are the engine's.
    Process,
    /// This process, on the engine's runtime (harness and engine measured together).
    InProcess,
}

/// A fake server in either place; stops when dropped.
pub enum FakeServer {
    InProcess(FakeLlm),
    Process {
        base_url: String,
        child: tokio::process::Child,
    },
}

impl FakeServer {
    /// `workers`: the runtime threads of a fake in its own process (in-process, it shares ours).
    pub async fn start(
        place: FakeServerPlace,
        latency: Duration,
        workers: usize,
    ) -> anyhow::Result<FakeServer> {
        if place == FakeServerPlace::InProcess {
            return Ok(FakeServer::InProcess(
                FakeLlm::start(fake_script(latency)?).await?,
            ));
        }
        let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
        // This benchmark's own binary (`codegym-bench fake-llm`), whatever it was started as; the
        // fake model runs in its own process so that this process's time and memory are the
        // engine's alone. Its stdin stays open: it serves until the pipe closes.
        cmd.args(["fake-llm", "--latency-ms"])
            .arg(latency.as_millis().to_string())
            .arg("--workers")
            .arg(workers.to_string())
            .stdin(std::process::Stdio::piped());
        let (child, base_url) = spawn_listening(cmd, "fake server").await?;
        Ok(FakeServer::Process { base_url, child })
    }

    /// CPU seconds used so far by the server's own process (`None` when it shares ours).
    pub fn cpu_secs(&self) -> Option<f64> {
        match self {
            FakeServer::InProcess(_) => None,
            FakeServer::Process { child, .. } => {
                child.id().and_then(|pid| cpu_secs(&pid.to_string()))
            }
        }
    }

    pub fn base_url(&self) -> String {
        match self {
            FakeServer::InProcess(s) => s.base_url(),
            FakeServer::Process { base_url, .. } => base_url.clone(),
        }
    }
}

/// Starts `cmd` (stdout piped, killed on drop) and waits for its first line, `listening on ADDR`:
/// the child and `ADDR`. `what` names it in errors.
pub async fn spawn_listening(
    mut cmd: tokio::process::Command,
    what: &str,
) -> anyhow::Result<(tokio::process::Child, String)> {
    use tokio::io::AsyncBufReadExt;
    cmd.stdout(std::process::Stdio::piped()).kill_on_drop(true);
    // The benchmark's harness and the servers under measurement, not sandboxed code.
    #[allow(clippy::disallowed_methods)]
    let mut child = cmd.spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("{what}: no stdout"))?;
    let mut line = String::new();
    tokio::io::BufReader::new(stdout)
        .read_line(&mut line)
        .await?;
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| anyhow::anyhow!("{what} said {line:?}"))?
        .to_owned();
    Ok((child, addr))
}

/// All CPU ticks of the machine and the stolen ones, from the first line of `/proc/stat`.
pub fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal [guest guest_nice, already in user and nice]
    Some((ticks.iter().take(8).sum(), *ticks.get(7)?))
}

/// User + system CPU seconds of process `pid` (`self` for this one), from `/proc/PID/stat`.
pub fn cpu_secs(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name (which may contain spaces); utime and stime are
    // the 14th and 15th fields overall, in USER_HZ ticks (100 per second in Linux's ABI).
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// Resident set size of this process.
pub fn rss_bytes() -> u64 {
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
