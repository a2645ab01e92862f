//! The host's side of the isolation probes (`tests/probes/isolation.py`, `isolation.c`): each run
//! of a probe reports, as one JSON line, what it could see of the others; [`check`] says which
//! isolation promise a set of reports breaks. Shared by the sandbox crate's tests and the server's
//! (every surface runs the same probes and the same checks).

#![allow(dead_code)] // each test binary uses a subset

use serde_json::Value;

/// The Python probe's source.
pub const PYTHON_PROBE: &str = include_str!("../probes/isolation.py");
/// The C probe's source.
pub const C_PROBE: &str = include_str!("../probes/isolation.c");

/// The Python probe's stdin for run `index` of `n`, holding on for `hold_ms`.
pub fn python_stdin(index: usize, n: usize, hold_ms: u64) -> Vec<u8> {
    format!(r#"{{"index": {index}, "n": {n}, "hold_ms": {hold_ms}}}"#).into_bytes()
}

/// The C probe's stdin.
pub fn c_stdin(index: usize, n: usize, hold_ms: u64) -> Vec<u8> {
    format!("{index} {n} {hold_ms}\n").into_bytes()
}

/// What the checks expect of a backend's namespaces.
#[derive(Clone, Copy, Debug)]
pub struct Expect {
    /// Whether every run has its own network namespace (the fresh backend; the warm backend's runs
    /// share one empty namespace where Landlock scopes abstract sockets).
    pub own_net: bool,
}

/// One report, parsed from a run's stdout (its last line).
pub fn parse(stdout: &str) -> Result<Value, String> {
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).map_err(|e| format!("probe output {stdout:?}: {e}"))
}

/// The most runs alive at one instant, from the reports' `[start, end]` intervals.
pub fn max_overlap(reports: &[Value]) -> usize {
    let mut events: Vec<(f64, i32)> = Vec::new();
    for r in reports {
        events.push((r["start"].as_f64().unwrap_or(0.0), 1));
        events.push((r["end"].as_f64().unwrap_or(0.0), -1));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut max) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        max = max.max(now);
    }
    max as usize
}

/// Every broken promise in `reports`, one line each (empty: all runs were isolated).
pub fn check(reports: &[Value], expect: Expect) -> Vec<String> {
    let mut broken = Vec::new();
    for r in reports {
        let i = &r["index"];
        // Alone in its PID namespace, and `/proc` is its own: it lists the run's own processes.
        for when in ["proc_pids", "early.proc_pids", "late.proc_pids"] {
            let pids = pointer(r, when);
            if pids != &serde_json::json!([1]) {
                broken.push(format!(
                    "run {i}: /proc lists {pids} ({when}), not just its own PID 1"
                ));
            }
        }
        // The same SysV key in every run: EEXIST is another run's object, alive or left behind.
        for kind in ["shm", "msg", "sem"] {
            if r[kind] != "created" {
                broken.push(format!("run {i}: {kind} with the shared key: {}", r[kind]));
            }
        }
        // POSIX message queues: refused by `RLIMIT_MSGQUEUE` = 0 (EMFILE), or private to the run.
        if r["mq"] != "created" && r["mq"] != "EMFILE" {
            broken.push(format!("run {i}: mq with the shared name: {}", r["mq"]));
        }
        for when in ["early", "late"] {
            for kind in ["sysvipc_shm", "sysvipc_msg", "sysvipc_sem"] {
                let seen = &r[when][kind];
                if seen != 1 {
                    broken.push(format!(
                        "run {i}: /proc/sysvipc lists {seen} {kind} ({when})"
                    ));
                }
            }
            let connected = &r[when]["abstract_connected"];
            if connected.as_array().is_none_or(|a| !a.is_empty()) {
                broken.push(format!(
                    "run {i}: connected to other runs' abstract sockets {connected} ({when})"
                ));
            }
            if r[when]["kill_all"] != "ESRCH" {
                broken.push(format!(
                    "run {i}: kill(-1, 0) gave {} ({when}): another process is in reach",
                    r[when]["kill_all"]
                ));
            }
            // POSIX shared memory: /dev/shm shows nothing of the host or of other runs (only the
            // way down to the run's own work dir, where the work root lies in /dev/shm).
            let cwd = r["cwd"].as_str().unwrap_or_default();
            let foreign: Vec<&Value> = r[when]["dev_shm"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|n| {
                    let own = format!("/dev/shm/{}/", n.as_str().unwrap_or_default());
                    !cwd.starts_with(&own)
                })
                .collect();
            if !foreign.is_empty() {
                broken.push(format!("run {i}: /dev/shm holds {foreign:?} ({when})"));
            }
        }
        if r["posix_shm"] == "created" {
            broken.push(format!("run {i}: created a file in /dev/shm"));
        }
        if r["abstract_bind"] != "ok" {
            broken.push(format!(
                "run {i}: could not bind its own abstract socket: {}",
                r["abstract_bind"]
            ));
        }
    }
    // Namespaces: no two runs alive at the same time share one (an inode number can be reused
    // once a namespace is gone, so only overlapping runs are compared).
    let mut kinds = vec!["mnt", "ipc", "pid"];
    if expect.own_net {
        kinds.push("net");
    }
    for (a, ra) in reports.iter().enumerate() {
        for rb in &reports[a + 1..] {
            let overlap = ra["start"].as_f64() < rb["end"].as_f64()
                && rb["start"].as_f64() < ra["end"].as_f64();
            if !overlap {
                continue;
            }
            for kind in &kinds {
                if ra["ns"][kind] == rb["ns"][kind] {
                    broken.push(format!(
                        "runs {} and {} share a {kind} namespace ({})",
                        ra["index"], rb["index"], ra["ns"][kind]
                    ));
                }
            }
        }
    }
    broken
}

fn pointer<'a>(v: &'a Value, dotted: &str) -> &'a Value {
    v.pointer(&format!("/{}", dotted.replace('.', "/")))
        .unwrap_or(&Value::Null)
}

/// Fails with every broken promise (at most 20 listed) and the overlap reached.
pub fn assert_isolated(what: &str, reports: &[Value], expect: Expect, min_overlap: usize) {
    let broken = check(reports, expect);
    let overlap = max_overlap(reports);
    assert!(
        broken.is_empty(),
        "{what}: {} broken isolation promises (max {overlap} runs at once), e.g.:\n{}",
        broken.len(),
        broken
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        overlap >= min_overlap,
        "{what}: only {overlap} runs were alive at once (want >= {min_overlap}): the test proved less than it claims"
    );
}
