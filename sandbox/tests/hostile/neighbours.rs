//! Neighbours: a run that exhausts its memory or processes does it alone. Beside it, well-behaved
//! runs of the same sandbox (on the warm backend: forks of the same server) pass with their own
//! verdicts, the offender gets its own, and a run that later reuses the offender's groups
//! (`cgroup/pool.rs`) is not charged with anything of it. The fixture's sandbox admits 8 runs at
//! once: one offender and 7 neighbours.

use std::collections::BTreeSet;

use codegym_sandbox::{Backend, ExecRequest, Limits};
use env_core::ExecutionResult;

use super::fixture::{Fixture, limits};

const MIB: u64 = 1 << 20;

/// The run's memory group, as it reads it (printed first by the programs below).
const GROUP: &str = "print([l.split(':', 2)[2] for l in open('/proc/self/cgroup').read().split() if ':memory:' in l][0], flush=True)\n";

fn request(src: &str, limits: Limits) -> ExecRequest {
    let mut req = ExecRequest::new(format!("{GROUP}{src}"));
    req.limits = Some(limits);
    req
}

fn group_of(o: &ExecutionResult) -> String {
    o.stdout
        .as_str()
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Runs `offender` with 7 neighbours at once; returns the offender's result, after asserting
/// each neighbour's.
async fn beside_neighbours(
    f: &Fixture,
    offender: ExecRequest,
    neighbour: &str,
    expected: &str,
) -> ExecutionResult {
    let mut runs = vec![f.sandbox.run(offender)];
    for _ in 0..7 {
        runs.push(f.sandbox.run(request(neighbour, limits())));
    }
    let mut results = futures::future::join_all(runs).await.into_iter();
    let offender = match results.next() {
        Some(Ok(o)) => o,
        other => panic!("the offender's run: {other:?}"),
    };
    for o in results {
        let o = o.unwrap_or_else(|e| panic!("a neighbour failed to run: {e}"));
        let out = o.stdout.as_str();
        assert!(
            o.exit_code == Some(0) && out.ends_with(expected) && !o.memory_exceeded && !o.timed_out,
            "a neighbour of {offender:?} paid for it: {o:?}"
        );
    }
    offender
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_memory_hog_is_oom_killed_alone() {
    let f = Fixture::new();
    // 30 processes of 100 MiB each: each within the run's address space, 3 GB together. The
    // neighbours hold 150 MiB each, more than any of the hog's processes.
    let hog = request(
        "import os, time\nfor _ in range(30):\n    if os.fork() == 0:\n        x = b'1' * (100 << 20)\n        time.sleep(4)\n        os._exit(0)\nwhile True:\n    try: os.wait()\n    except ChildProcessError: break\nprint('hog done')",
        Limits {
            wall_ms: 20_000,
            ..limits()
        },
    );
    let neighbour = "import time\nx = b'2' * (150 << 20)\ntime.sleep(2)\nprint(len(x))";
    let o = beside_neighbours(&f, hog, neighbour, &format!("\n{}\n", 150 * MIB)).await;
    assert!(o.memory_exceeded, "the hog's verdict: {o:?}");
    let limit = limits().memory_bytes;
    assert!(
        o.peak_rss_bytes >= limit / 2 && o.peak_rss_bytes <= limit + 16 * MIB,
        "the hog's peak {} MiB: {o:?}",
        o.peak_rss_bytes / MIB
    );
    let hog_group = group_of(&o);

    // Runs after it, 8 at once (every group of the sandbox in use): the one in the hog's group,
    // if groups are reused, carries nothing of it.
    let mut runs = Vec::new();
    for _ in 0..8 {
        runs.push(f.sandbox.run(request(
            "import time\ntime.sleep(1)\nprint('small')",
            limits(),
        )));
    }
    let mut groups = BTreeSet::new();
    for o in futures::future::join_all(runs).await {
        let o = o.unwrap_or_else(|e| panic!("infrastructure error: {e}"));
        assert!(
            o.exit_code == Some(0) && !o.memory_exceeded && o.peak_rss_bytes < 64 * MIB,
            "a run after the hog, in group {} (the hog's: {hog_group}): {o:?}",
            group_of(&o)
        );
        groups.insert(group_of(&o));
    }
    assert_eq!(groups.len(), 8, "runs at once shared a group: {groups:?}");
    if crate::BACKEND == Backend::WarmFork {
        // (A fresh run's groups are new.)
        assert!(
            groups.contains(&hog_group),
            "no run reused the hog's group {hog_group}: {groups:?}"
        );
    }
    f.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fork_bomb_takes_no_one_elses_processes() {
    let f = Fixture::new();
    // Allowed more processes than the sandbox's default (a request's own limits), it forks until
    // refused, then every process waits.
    let bomb = request(
        "import os, time\nwhile True:\n    try: os.fork()\n    except OSError: break\ntime.sleep(4)",
        Limits {
            max_processes: 400,
            wall_ms: 20_000,
            ..limits()
        },
    );
    // Each forks 4 processes and starts 4 threads once the bomb has filled its budget.
    let neighbour = "import os, threading, time\ntime.sleep(1.5)\nts = [threading.Thread(target=time.sleep, args=(0.2,)) for _ in range(4)]\nfor t in ts: t.start()\nfor _ in range(4):\n    if os.fork() == 0: os._exit(0)\nfor _ in range(4): os.wait()\nfor t in ts: t.join()\nprint('ok')";
    let o = beside_neighbours(&f, bomb, neighbour, "\nok\n").await;
    assert!(!o.timed_out, "the bomb ends with its main process: {o:?}");
    f.assert_clean();
}
