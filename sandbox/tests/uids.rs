//! No two live runs share a uid, seen from inside the programs: not two codegym processes on one
//! host (a second process is this test binary again, as a peer), not a long run and the many
//! short ones that pass while it lives, and a process that dies (SIGKILL) gives its uids back; a
//! run's uid is free again by the time its result is back, so runs back to back need one.
//! A uid is what `RLIMIT_NPROC` counts host-wide, so a shared one lets a fork bomb in one run
//! fail another run's `execve`. And operators see where the leases are.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use codegym_sandbox::{Backend, ExecRequest, Sandbox, SandboxConfig};

const PEER: &str = "CODEGYM_UIDS_PEER";
const TEST: &str = "two_processes_never_share_a_uid";

/// A uid range of this test binary's own (other test binaries may run at the same time).
fn range(n: u32) -> u32 {
    4_200_000 + (std::process::id() % 1000) * 1000 + n * 100
}

fn sandbox(backend: Backend, uid_base: u32, uid_count: u32, max_concurrent: usize) -> Sandbox {
    Sandbox::new(SandboxConfig {
        backend,
        uid_base,
        uid_count,
        max_concurrent,
        ..SandboxConfig::default()
    })
    .unwrap_or_else(|e| panic!("sandbox setup failed: {e}"))
}

/// Runs `n` programs at once, each printing its uid and then sleeping `seconds`; their uids.
async fn uids_of(sb: &Sandbox, n: usize, seconds: f64) -> Vec<u32> {
    let source = format!("import os, time\nprint(os.getuid(), flush=True)\ntime.sleep({seconds})");
    let runs = (0..n).map(|_| sb.run(ExecRequest::new(source.as_str())));
    futures::future::join_all(runs)
        .await
        .into_iter()
        .map(|o| {
            let o = o.unwrap_or_else(|e| panic!("infrastructure error: {e}"));
            assert_eq!(o.exit_code, Some(0), "{o:?}");
            o.stdout.trim().parse().expect("a uid")
        })
        .collect()
}

fn assert_distinct(uids: &[u32]) {
    let set: std::collections::BTreeSet<_> = uids.iter().collect();
    assert_eq!(
        set.len(),
        uids.len(),
        "two live runs shared a uid: {uids:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_never_share_a_uid() {
    if let Ok(base) = std::env::var(PEER) {
        return peer(base.parse().expect("base")).await;
    }
    // 24 uids for two processes of 12 runs each (the peer on the warm backend, this one fresh):
    // the range is exactly used up, so any sharing shows.
    let base = range(0);
    #[allow(clippy::disallowed_methods)] // a second codegym process is the point of the test
    let mut child = Peer(
        Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
            .env(PEER, base.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .expect("peer process"),
    );
    let mut lines = BufReader::new(child.0.stdout.take().expect("stdout")).lines();
    let mut next = move |prefix: &str| loop {
        let line = lines
            .next()
            .expect("the peer ended early")
            .expect("peer stdout");
        // (libtest may print its own words before ours on the same line)
        if let Some((_, rest)) = line.split_once(prefix) {
            return rest.to_string();
        }
    };
    let next_line = tokio::task::spawn_blocking(move || {
        next("peer ready");
        let uids = next("peer uids:");
        (uids, next)
    });
    let sb = sandbox(Backend::Fresh, base, 24, 12);
    let ours = uids_of(&sb, 12, 1.0).await;
    let (theirs, _rest) = next_line.await.expect("peer reader");
    let theirs: Vec<u32> = theirs
        .split_whitespace()
        .map(|u| u.parse().expect("a uid"))
        .collect();
    assert_eq!(theirs.len(), 12, "{theirs:?}");
    let all: Vec<u32> = ours.iter().chain(&theirs).copied().collect();
    assert!(all.iter().all(|u| (base..base + 24).contains(u)), "{all:?}");
    assert_distinct(&all);

    // The peer dies without a word: the kernel drops its leases, and its uids serve this process.
    drop(child);
    let sb = sandbox(Backend::Fresh, base, 24, 20);
    let after = uids_of(&sb, 20, 0.5).await;
    assert_distinct(&after);
    assert!(
        after.iter().any(|u| theirs.contains(u)),
        "no uid of the dead peer was ever reused: {after:?} vs {theirs:?}"
    );
}

/// The peer process, killed (SIGKILL) and reaped when dropped, also when the test fails.
struct Peer(std::process::Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The peer: 12 warm-backend runs at once in the shared range, its uids on stdout, then it stays
/// alive (its leases held) until the test kills it.
async fn peer(base: u32) {
    let sb = sandbox(Backend::WarmFork, base, 24, 12);
    println!("peer ready");
    let uids = uids_of(&sb, 12, 1.5).await;
    let line: Vec<String> = uids.iter().map(u32::to_string).collect();
    println!("peer uids: {}", line.join(" "));
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_run_keeps_its_uid_while_many_others_pass() {
    // Four uids, one held by a run that outlives 16 others: none of them may get its uid (the
    // sequence of run ids wraps around a range; a uid must not).
    for backend in [Backend::Fresh, Backend::WarmFork] {
        let sb = sandbox(backend, range(1), 4, 4);
        let long = sb.run(ExecRequest::new(
            "import os, time\nprint(os.getuid(), flush=True)\ntime.sleep(3)",
        ));
        let short = async {
            // Started after the long run took its uid.
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            let mut uids = Vec::new();
            for _ in 0..16 {
                uids.extend(uids_of(&sb, 1, 0.0).await);
            }
            uids
        };
        let (long, short) = tokio::join!(long, short);
        let long = long.unwrap_or_else(|e| panic!("infrastructure error: {e}"));
        let held: u32 = long.stdout.trim().parse().expect("a uid");
        assert!(
            !short.contains(&held),
            "{backend:?}: a run got uid {held} while the long run held it: {short:?}"
        );
    }
}

#[test]
fn operators_see_where_the_leases_are() {
    // `codegym doctor` and the clients' view of the sandbox say where the uids are leased.
    let sb = sandbox(Backend::Fresh, range(2), 8, 4);
    let layer = sb
        .isolation()
        .layers
        .iter()
        .find(|l| l.name == "uid drop")
        .expect("a uid drop layer")
        .clone();
    assert!(layer.active, "{layer:?}");
    let path = layer
        .detail
        .split_once("leased in ")
        .and_then(|(_, rest)| rest.split_once(", with every codegym process that sees it)"))
        .map(|(path, _)| path)
        .unwrap_or_else(|| panic!("no lease file in {layer:?}"));
    assert!(std::path::Path::new(path).is_file(), "{layer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_s_uid_is_free_again_when_its_result_is_back() {
    // One uid, runs one after another: each must find the uid its predecessor held, on both
    // backends. A uid given back just after the result (the fork server's reply woke the caller
    // first) fails the next run now and then: busy threads make that "now and then" often.
    let _busy = Busy::threads(3);
    for backend in [Backend::Fresh, Backend::WarmFork] {
        let sb = sandbox(backend, range(3), 1, 1);
        for i in 0..300 {
            if let Err(e) = sb.run(ExecRequest::new("pass")).await {
                panic!("{backend:?}: run {i} found no uid: {e}");
            }
        }
    }
}

/// Threads that spin until dropped (also when the test fails): they preempt the sandbox's own.
struct Busy(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Busy {
    fn threads(n: usize) -> Busy {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Busy(stop, threads)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}
