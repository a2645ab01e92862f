//! `codegym-bench repo-copies`: G copies of one prepared repository task, codegym's copy-on-write
//! workspaces beside one podman container per sample, round by round on the same host.
//!
//! Each round, in this order, each side starting from its prepared state (`t0`):
//! - codegym: G episodes of the shipped repository task at once (`RepoScorer::episode`, then its
//!   commands through `RepoScorer::run`, the path `codegym/Repo-v0` takes), then the reference
//!   patch scored in a fresh copy (`RepoScorer::score`).
//! - podman: G samples at once, each the peer's usual one: `podman create` of the base image
//!   (network none), `podman cp` of the repository into it, `podman start`, its commands by
//!   `podman exec`, removed at the end (what SWE-style harnesses do with `docker`).
//! - floor: G host `fork+exec`s of the first command, unsandboxed.
//!
//! The first command is `date +%s%N`: it prints when it started, so "to start" is that instant less
//! `t0` on every side, and "to end" is when its caller saw it finish. Then
//! `python -c 'import inflection'` and a typical edit (the task's one-line fix with `sed`), after
//! which each copy's disk is read: the upper dir's blocks (codegym), the container's `SizeRw`
//! (podman). Memory: each run's peak RSS from its cgroup and the server's RSS growth with all G
//! copies open (codegym); each container's memory cgroup peak plus its `conmon`'s RSS (podman).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use codegym_sandbox::packages::PackagesConfig;
use codegym_sandbox::{Backend, SandboxConfig};
use env_coding::repo::{Prepared, RepoScorer};
use env_coding::tasks::RepoTaskSet;
use env_coding::{CodingConfig, Scorer};

/// The first command: it prints its own start (ns since the epoch).
const FIRST: &str = "date +%s%N";
const SECOND: &str = "python -c 'import inflection'";
/// The shipped task's fix (also `env-coding/tests/repository.rs`'s): an episode's typical edit.
const EDIT: &str = "sed -i 's/    if number in (11, 12, 13):/    if number % 100 in (11, 12, 13):/' inflection/__init__.py";

/// One sample's numbers (ms, bytes).
#[derive(Debug, Default, Clone)]
pub struct Sample {
    pub start_ms: f64,
    pub first_end_ms: f64,
    pub second_end_ms: f64,
    pub mem_bytes: u64,
    pub disk_bytes: u64,
}

/// One round of one side.
#[derive(Debug, Default)]
pub struct Side {
    pub samples: Vec<Sample>,
    /// codegym: the server's RSS growth with every copy open.
    pub shared_bytes: u64,
    /// codegym: the reference patch scored in a fresh copy.
    pub score_ms: Option<f64>,
}

pub async fn run(
    copies: usize,
    rounds: usize,
    tasks: Option<PathBuf>,
    image: Option<String>,
    podman: bool,
) -> anyhow::Result<String> {
    let tasks = tasks.unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../env-coding/tasks/repository/tasks.jsonl")
    });
    let set = RepoTaskSet::load(&tasks).map_err(|e| anyhow::anyhow!("{e}"))?;
    let task = Arc::new(set.tasks.first().context("an empty task set")?.clone());
    let repo_dir = tasks
        .parent()
        .context("the task file's dir")?
        .join(&task.repository);
    let repo = scorer()?;
    let started = Instant::now();
    let prepared = repo.prepare(task.clone()).await?;
    let prepare_ms = ms(started.elapsed());
    let image = match (podman, image) {
        (false, _) => None,
        (true, Some(i)) => Some(i),
        (true, None) => Some(base_image().await?),
    };
    let mut table: Vec<[Side; 3]> = Vec::new();
    for round in 0..rounds {
        let ours = codegym_round(&repo, &prepared, copies).await?;
        let theirs = match &image {
            Some(image) => podman_round(image, &repo_dir, copies, round).await?,
            None => Side::default(),
        };
        let floor = floor_round(copies).await?;
        eprintln!("round {} of {rounds} done", round + 1);
        table.push([ours, theirs, floor]);
    }
    Ok(crate::repo_copies_table::render(
        &table,
        copies,
        prepare_ms,
        image.as_deref(),
    ))
}

/// The test suite's repository config: the fresh backend (workspaces run there), pytest from
/// the package cache the repository tests share.
fn scorer() -> anyhow::Result<RepoScorer> {
    let config = CodingConfig {
        sandbox: SandboxConfig {
            backend: Backend::Fresh,
            uid_base: 3_300_000,
            uid_count: 64,
            ..SandboxConfig::default()
        },
        packages: PackagesConfig {
            enabled: true,
            cache_dir: PathBuf::from("/tmp/codegym-test-repository-packages"),
            ..PackagesConfig::default()
        },
        ..CodingConfig::default()
    };
    let scorer = Scorer::new(&config)?;
    Ok(RepoScorer::new(
        scorer.sandbox().clone(),
        scorer.packages().cloned(),
    ))
}

async fn codegym_round(
    repo: &RepoScorer,
    prepared: &Arc<Prepared>,
    copies: usize,
) -> anyhow::Result<Side> {
    let rss0 = rss_bytes();
    let (t0, wall0) = (Instant::now(), epoch_ns());
    let mut handles = Vec::new();
    for _ in 0..copies {
        let (repo, prepared) = (repo.clone(), prepared.clone());
        handles.push(tokio::spawn(async move {
            let ws = repo.episode(&prepared)?;
            let first = repo.run(&ws, &prepared, FIRST, None).await?;
            let first_end_ms = ms(t0.elapsed());
            let second = repo.run(&ws, &prepared, SECOND, None).await?;
            let second_end_ms = ms(t0.elapsed());
            let edit = repo.run(&ws, &prepared, EDIT, None).await?;
            for r in [&first, &second, &edit] {
                anyhow::ensure!(r.exit_code == Some(0), "a command failed: {}", r.stderr);
            }
            let sample = Sample {
                start_ms: started_ms(&first.stdout, wall0)?,
                first_end_ms,
                second_end_ms,
                mem_bytes: first.peak_rss_bytes.max(second.peak_rss_bytes),
                disk_bytes: du_bytes(&ws.upper()),
            };
            anyhow::Ok((sample, ws))
        }));
    }
    let mut samples = Vec::new();
    let mut open = Vec::new();
    for h in handles {
        let (sample, ws) = h.await??;
        samples.push(sample);
        open.push(ws);
    }
    // Every copy still open: what they hold in this process.
    let shared_bytes = rss_bytes().saturating_sub(rss0);
    drop(open);
    let scored = Instant::now();
    let verdict = repo.score(prepared, &prepared.task.patch).await?;
    anyhow::ensure!(verdict.resolved, "the reference patch: {verdict:?}");
    Ok(Side {
        samples,
        shared_bytes,
        score_ms: Some(ms(scored.elapsed())),
    })
}

async fn podman_round(
    image: &str,
    repo_dir: &Path,
    copies: usize,
    round: usize,
) -> anyhow::Result<Side> {
    let (t0, wall0) = (Instant::now(), epoch_ns());
    let mut handles = Vec::new();
    for i in 0..copies {
        let (image, repo_dir) = (image.to_string(), repo_dir.to_path_buf());
        let name = format!("codegym-bench-copies-{}-{round}-{i}", std::process::id());
        handles.push(tokio::spawn(async move {
            let sample = podman_sample(&name, &image, &repo_dir, t0, wall0).await;
            let _ = podman(&["rm", "-f", "-t", "0", &name]).await;
            sample
        }));
    }
    // Every sample is awaited (and its container removed) before any failure is returned.
    let mut samples = Vec::new();
    for h in handles {
        samples.push(h.await?);
    }
    Ok(Side {
        samples: samples.into_iter().collect::<anyhow::Result<_>>()?,
        ..Side::default()
    })
}

async fn podman_sample(
    name: &str,
    image: &str,
    repo_dir: &Path,
    t0: Instant,
    wall0: u128,
) -> anyhow::Result<Sample> {
    let create = [
        "create",
        "--ulimit",
        "nofile=4096:4096",
        "--ulimit",
        "nproc=4096:4096",
        "--name",
        name,
        "--network",
        "none",
        "-w",
        "/repo",
        image,
        "sleep",
        "infinity",
    ];
    podman(&create).await?;
    let src = format!("{}/.", repo_dir.display());
    podman(&["cp", &src, &format!("{name}:/repo")]).await?;
    podman(&["start", name]).await?;
    let first = podman(&["exec", name, "sh", "-c", FIRST]).await?;
    let first_end_ms = ms(t0.elapsed());
    // The image's interpreter is `python3` (codegym's workspaces also have `python`).
    podman(&[
        "exec",
        name,
        "sh",
        "-c",
        &SECOND.replace("python ", "python3 "),
    ])
    .await?;
    let second_end_ms = ms(t0.elapsed());
    podman(&["exec", name, "sh", "-c", EDIT]).await?;
    let inspect = podman(&[
        "container",
        "inspect",
        "--size",
        "--format",
        "{{.SizeRw}} {{.State.ConmonPid}} {{.State.CgroupPath}}",
        name,
    ])
    .await?;
    let mut fields = inspect.split_whitespace();
    let disk_bytes = fields.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let conmon = fields
        .next()
        .and_then(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .map_or(0, |s| status_rss(&s));
    // The container's memory cgroup peak (this host's cgroups are v1; v2 names it memory.peak).
    let peak = fields.next().map_or(0, |cg| {
        ["memory.max_usage_in_bytes", "memory.peak"]
            .iter()
            .find_map(|f| {
                let v1 = format!("/sys/fs/cgroup/memory{cg}/{f}");
                let v2 = format!("/sys/fs/cgroup{cg}/{f}");
                [v1, v2]
                    .iter()
                    .find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok())
            })
            .unwrap_or(0)
    });
    Ok(Sample {
        start_ms: started_ms(&first, wall0)?,
        first_end_ms,
        second_end_ms,
        mem_bytes: peak + conmon,
        disk_bytes,
    })
}

/// One podman command's stdout; a failure is an error with its stderr.
async fn podman(args: &[&str]) -> anyhow::Result<String> {
    // The peer under measurement: its own CLI, as its users start it.
    #[allow(clippy::disallowed_methods)]
    let out = tokio::process::Command::new("podman")
        // As `tests/container.sh`: this host's hybrid cgroups need runc, and a container's
        // rlimits may not exceed the session's (no CAP_SYS_RESOURCE here), hence `--ulimit`.
        .args(["--runtime", "runc"])
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .context("podman")?;
    anyhow::ensure!(
        out.status.success(),
        "podman {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The newest `codegym-base:bookworm-toolchains-*` image (the Debian image with Python CI builds).
async fn base_image() -> anyhow::Result<String> {
    let list = podman(&["images", "--format", "{{.Repository}}:{{.Tag}}"]).await?;
    list.lines()
        .find(|l| l.starts_with("localhost/codegym-base:bookworm-toolchains-"))
        .map(str::to_string)
        .context("no localhost/codegym-base:bookworm-toolchains-* image (pass --image)")
}

/// The floor: the first command started straight from this process, G at once.
async fn floor_round(copies: usize) -> anyhow::Result<Side> {
    let (t0, wall0) = (Instant::now(), epoch_ns());
    let mut handles = Vec::new();
    for _ in 0..copies {
        handles.push(tokio::spawn(async move {
            // The unsandboxed baseline: a bare fork+exec of the same command.
            #[allow(clippy::disallowed_methods)]
            let out = tokio::process::Command::new("sh")
                .args(["-c", FIRST])
                .output()
                .await?;
            let first_end_ms = ms(t0.elapsed());
            anyhow::Ok(Sample {
                start_ms: started_ms(&String::from_utf8_lossy(&out.stdout), wall0)?,
                first_end_ms,
                ..Sample::default()
            })
        }));
    }
    let mut samples = Vec::new();
    for h in handles {
        samples.push(h.await??);
    }
    Ok(Side {
        samples,
        ..Side::default()
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn epoch_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The first command's printed start, in ms after `wall0`.
fn started_ms(stdout: &str, wall0: u128) -> anyhow::Result<f64> {
    let ns: u128 = stdout
        .trim()
        .parse()
        .with_context(|| format!("the first command printed {stdout:?}"))?;
    Ok(ns.saturating_sub(wall0) as f64 / 1e6)
}

/// This process's resident set (VmRSS).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status").map_or(0, |s| status_rss(&s))
}

fn status_rss(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib << 10)
}

/// Blocks allocated under `dir` (a copy's upper dir on its own tmpfs).
fn du_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0;
    for e in entries.flatten() {
        let Ok(meta) = e.path().symlink_metadata() else {
            continue;
        };
        total += meta.blocks() * 512;
        if meta.is_dir() {
            total += du_bytes(&e.path());
        }
    }
    total
}
