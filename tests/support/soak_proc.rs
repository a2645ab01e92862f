//! The soak test's view of the server from outside (`tests/soak.rs`): its fds, threads and RSS
//! from `/proc`, the processes under it and in its uid range, the run dirs in its work root, its
//! runs' cgroups, its temp dir, and its Prometheus counters; and the leak checks against the
//! baseline taken after warm-up.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use super::soak_load::{Tally, Target};

/// The server's uid range, its own on this host: any process in it after the soak is a leak. The
/// other tests' ranges end below 12.2 million, and each soak's range (with its pool servers' after
/// it) comes from the test process's pid, so two soaks at once (a long one by hand, one in a
/// branch's CI) never see each other's runs as leaks.
pub fn uid_base() -> u32 {
    20_000_000 + (std::process::id() % 16_384) * UID_STRIDE
}
pub const UID_COUNT: u32 = 1_024;
/// A soak's whole range: its server's and its pool servers'.
const UID_STRIDE: u32 = 4_096;
/// The fork-server restarts counter the server exports.
pub const RESTARTS: &str = "codegym_sandbox_fork_server_restarts_total";
/// Allowed growth over the baseline: tokio's and the sandbox's pools vary a little; a leak per
/// run grows by hundreds.
const FD_SLACK: usize = 16;
const THREAD_SLACK: usize = 8;
/// The files a cell of run cgroups keeps open (`sandbox/src/cgroup/pool.rs`).
const FDS_PER_CELL: usize = 6;
const RSS_SLACK_KIB: u64 = 64 << 10;

/// What the server holds at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub fds: usize,
    /// What the fds are (their link's target, numbers stripped), and how many of each.
    pub fd_kinds: std::collections::BTreeMap<String, usize>,
    pub threads: usize,
    pub rss_kib: u64,
    pub fork_servers: usize,
    pub forked_ahead: usize,
    /// Processes under the server, or in its uid range, that are neither a fork server nor a
    /// child it forked ahead.
    pub strays: Vec<String>,
    /// `run-*` dirs in the sandbox's work root.
    pub run_dirs: Vec<String>,
    /// Groups under the sandbox's cgroups (memory and pids), the run cells kept for reuse included.
    pub cgroups: usize,
    /// Entries in the server's `TMPDIR`.
    pub tmp: Vec<String>,
}

fn count(dir: impl AsRef<Path>) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

fn names(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().display().to_string())
        .collect();
    out.sort();
    out
}

fn status_field(pid: i32, field: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .map(|v| v.trim().to_string())
}

/// Every process: (pid, parent, real uid).
fn processes() -> Vec<(i32, i32, u32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let ppid = status_field(pid, "PPid:").and_then(|v| v.parse().ok());
        let uid = status_field(pid, "Uid:").and_then(|v| v.split_whitespace().next()?.parse().ok());
        if let (Some(ppid), Some(uid)) = (ppid, uid) {
            out.push((pid, ppid, uid));
        }
    }
    out
}

fn describe(pid: i32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    format!("{pid} {}", cmdline.chars().take(80).collect::<String>())
}

/// Groups below the sandbox's own (`codegym-PID-*`) in each v1 hierarchy the server is in.
fn cgroups(pid: i32) -> usize {
    let listing = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let mut total = 0;
    for controller in ["memory", "pids"] {
        let Some(own) = listing.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
            ctrls
                .split(',')
                .any(|c| c == controller)
                .then(|| path.to_string())
        }) else {
            continue;
        };
        let parent = Path::new("/sys/fs/cgroup")
            .join(controller)
            .join(own.trim_start_matches('/'));
        for group in names(&parent) {
            if Path::new(&group)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&format!("codegym-{pid}-")))
            {
                total += subgroups(Path::new(&group));
            }
        }
    }
    total
}

fn fd_kinds(pid: i32) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let target = std::fs::read_link(e.path()).unwrap_or_default();
        let kind: String = target
            .display()
            .to_string()
            .chars()
            .filter(|c| !c.is_ascii_digit())
            .collect();
        *out.entry(kind).or_default() += 1;
    }
    out
}

fn subgroups(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| 1 + subgroups(&e.path()))
        .sum()
}

impl Snapshot {
    /// The server `pid`, whose sandbox works under `work` with `tmp` as its `TMPDIR`.
    pub fn take(pid: i32, work: &Path, tmp: &Path) -> Snapshot {
        let (servers, ahead) = crate::forkserver::server_processes(work);
        let all = processes();
        let mut under = vec![pid];
        let mut strays = Vec::new();
        while let Some(parent) = under.pop() {
            for &(child, ppid, _) in &all {
                if ppid == parent {
                    under.push(child);
                    if !servers.contains(&child) && !ahead.contains(&child) {
                        strays.push(describe(child));
                    }
                }
            }
        }
        for &(p, _, uid) in &all {
            let in_range = (uid_base()..uid_base() + UID_COUNT).contains(&uid);
            if in_range && !ahead.contains(&p) && !servers.contains(&p) {
                strays.push(format!("uid {uid}: {}", describe(p)));
            }
        }
        strays.sort();
        strays.dedup();
        let run_dirs = names(work)
            .iter()
            .flat_map(|root| names(Path::new(root)))
            .filter(|p| {
                Path::new(p)
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("run-"))
            })
            .collect();
        Snapshot {
            fds: count(format!("/proc/{pid}/fd")),
            fd_kinds: fd_kinds(pid),
            threads: count(format!("/proc/{pid}/task")),
            rss_kib: status_field(pid, "VmRSS:")
                .and_then(|v| v.trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0),
            fork_servers: servers.len(),
            forked_ahead: ahead.len(),
            strays,
            run_dirs,
            cgroups: cgroups(pid),
            tmp: names(tmp),
        }
    }

    /// What `self` (after the soak) holds beyond `base` and the allowances.
    fn leaks(&self, base: &Snapshot, max_concurrent: usize) -> Vec<String> {
        let mut out = Vec::new();
        // The sandbox keeps one cell of run cgroups (memory and pids) per run it had in flight
        // at its peak, each with its files open: a bounded pool, not a leak.
        let new_cells = self.cgroups.saturating_sub(base.cgroups) / 2;
        let fd_bound = base.fds + FD_SLACK + FDS_PER_CELL * new_cells;
        if self.fds > fd_bound {
            out.push(format!(
                "fds: {} open, baseline {} (+{FD_SLACK}, +{FDS_PER_CELL} for each of {new_cells} new cgroup cells allowed): {:?}, baseline {:?}",
                self.fds, base.fds, self.fd_kinds, base.fd_kinds
            ));
        }
        if self.threads > base.threads + THREAD_SLACK {
            out.push(format!(
                "threads: {}, baseline {} (+{THREAD_SLACK} allowed)",
                self.threads, base.threads
            ));
        }
        if self.rss_kib > base.rss_kib + RSS_SLACK_KIB {
            out.push(format!(
                "RSS: {} KiB, baseline {} KiB (+{RSS_SLACK_KIB} allowed)",
                self.rss_kib, base.rss_kib
            ));
        }
        if self.fork_servers > 1 || self.forked_ahead > max_concurrent {
            out.push(format!(
                "{} fork servers with {} children forked ahead",
                self.fork_servers, self.forked_ahead
            ));
        }
        if !self.strays.is_empty() {
            out.push(format!("processes left: {:?}", self.strays));
        }
        if !self.run_dirs.is_empty() {
            out.push(format!("run dirs left: {:?}", self.run_dirs));
        }
        // Each controller: the fork server's group and the cells, at most one per run in flight
        // (twice the sandbox's bound: a cell goes back only once its work dir is removed).
        let groups = 2 * (2 * max_concurrent + 1);
        if self.cgroups > groups {
            out.push(format!(
                "cgroups: {}, baseline {} (at most {groups} kept)",
                self.cgroups, base.cgroups
            ));
        }
        if self.tmp.len() > base.tmp.len() {
            out.push(format!(
                "temp files left: {:?}, baseline {:?}",
                self.tmp, base.tmp
            ));
        }
        out
    }
}

/// Polls the server until it holds no more than `base` allows, or `limit` passes; the last view.
pub async fn settle(
    pid: i32,
    work: &Path,
    tmp: &Path,
    base: &Snapshot,
    max_concurrent: usize,
    limit: Duration,
) -> Snapshot {
    let start = Instant::now();
    loop {
        let now = Snapshot::take(pid, work, tmp);
        if now.leaks(base, max_concurrent).is_empty() || start.elapsed() > limit {
            println!("soak: settled for {:.1} s", start.elapsed().as_secs_f64());
            return now;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Prints one line per resource and fails on any leak.
pub fn print_and_check(base: &Snapshot, end: &Snapshot, max_concurrent: usize) {
    println!("soak: fds {} -> {}", base.fds, end.fds);
    println!("soak: threads {} -> {}", base.threads, end.threads);
    println!("soak: RSS {} KiB -> {} KiB", base.rss_kib, end.rss_kib);
    println!(
        "soak: fork servers {} -> {}, forked ahead {} -> {}, other processes {} -> {}",
        base.fork_servers,
        end.fork_servers,
        base.forked_ahead,
        end.forked_ahead,
        base.strays.len(),
        end.strays.len()
    );
    println!(
        "soak: run dirs {} -> {}",
        base.run_dirs.len(),
        end.run_dirs.len()
    );
    println!("soak: run cgroups {} -> {}", base.cgroups, end.cgroups);
    println!("soak: temp entries {} -> {}", base.tmp.len(), end.tmp.len());
    let leaks = end.leaks(base, max_concurrent);
    assert!(
        leaks.is_empty(),
        "the server leaked after the soak:\n{}",
        leaks.join("\n")
    );
}

/// Fails with every recorded failure (the first 20) if there is any.
pub fn assert_no_failures(phase: &str, tally: &Tally) {
    let failures = tally.failures.lock().unwrap();
    let shown: Vec<_> = failures.iter().take(20).cloned().collect();
    assert!(
        failures.is_empty(),
        "{} failures in {phase}:\n{}",
        failures.len(),
        shown.join("\n")
    );
}

/// The sum of the samples of the counter `name` on the server's `/metrics` (0 when absent).
pub async fn metric(t: &Target, name: &str) -> Result<f64, String> {
    let response = t
        .client
        .get(format!("http://{}/metrics", t.metrics))
        .send()
        .await
        .map_err(|e| format!("/metrics: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("/metrics: HTTP {}", response.status()));
    }
    let body = response
        .text()
        .await
        .map_err(|e| format!("/metrics: {e}"))?;
    Ok(body
        .lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum())
}
