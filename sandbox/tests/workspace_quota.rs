//! A workspace's hard disk quota (`workspace/quota.rs`): 8 episodes at once each write far past
//! their quota, with 16 MiB files (space) in the repository and in their run's own work dir, and
//! with empty files (inodes). Each stops at its quota with `ENOSPC` as an outcome of its command,
//! goes on after deleting, and leaves its neighbours' runs alone; the host's free space on the
//! work root's file system never drops by more than the quotas; nothing stays mounted.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use codegym_sandbox::{Limits, Workspace, WorkspaceRun};
use env_core::ExecutionResult;
use support::workspace::{mounts_under, repository, sandbox};

const EPISODES: usize = 8;
/// Each episode's quota: two 16 MiB files fit, a third does not.
const QUOTA_MIB: u64 = 40;
/// 16 MiB files each episode tries to write in one run (4 x its quota).
const BIG_FILES: u32 = 10;
/// Empty files each episode tries to create (the quota allows `QUOTA_MIB * 64` inodes).
const TINY_FILES: u32 = 8000;

/// The free bytes of the file system holding `dir`.
fn free_bytes(dir: &Path) -> u64 {
    let s = nix::sys::statvfs::statvfs(dir).expect("statvfs");
    s.blocks_available() * s.fragment_size()
}

async fn step(ws: &Workspace, command: String) -> ExecutionResult {
    let run = WorkspaceRun {
        command,
        // Memory above the quota: the tmpfs pages a run writes are charged to it, and the
        // quota, not the memory limit, must be what stops it here.
        limits: Some(Limits {
            cpu_ms: 20_000,
            wall_ms: 60_000,
            memory_bytes: 512 << 20,
            max_processes: 32,
            ..Limits::default()
        }),
        ..WorkspaceRun::default()
    };
    ws.run(run).await.expect("workspace run").0
}

/// The number after `marker-` in `out`.
fn marker(out: &str, marker: &str) -> Option<u64> {
    out.lines().find_map(|l| {
        l.strip_prefix(marker)?
            .strip_prefix('-')?
            .trim()
            .parse()
            .ok()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn episodes_stop_at_their_quota_and_go_on() {
    let (sandbox, root) = sandbox("quota");
    let layer = sandbox
        .import_layer(&repository(&root))
        .await
        .expect("import");
    let workspaces: Vec<Arc<Workspace>> = (0..EPISODES)
        .map(|_| {
            Arc::new(
                sandbox
                    .workspace(vec![layer.clone()], Some(QUOTA_MIB))
                    .expect("workspace"),
            )
        })
        .collect();
    // Each workspace is a mount of its own while it lives.
    let mounted = mounts_under(&root);
    for ws in &workspaces {
        let dir = ws.upper().parent().expect("ws dir").to_path_buf();
        assert!(
            mounted.contains(&dir),
            "{} is not a mount: {mounted:?}",
            dir.display()
        );
    }
    // Watch the work root's file system while the episodes write.
    let before = free_bytes(&root);
    let lowest = Arc::new(AtomicU64::new(before));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (root, lowest, done) = (root.clone(), lowest.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                lowest.fetch_min(free_bytes(&root), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, ws) in workspaces.iter().enumerate() {
        let ws = ws.clone();
        tasks.push(tokio::spawn(async move {
            // Space: 16 MiB files into the repository, then into $TMPDIR (the run's work dir).
            let fill = step(
                &ws,
                format!(
                    "n=0; for i in $(seq 1 {BIG_FILES}); do \
                       head -c 16777216 /dev/zero > big$i 2>/dev/null || {{ echo FULL-$n; break; }}; \
                       n=$((n+1)); done; \
                     rm -f big$((n+1)); \
                     for i in $(seq 1 {BIG_FILES}); do \
                       head -c 16777216 /dev/zero > $TMPDIR/t$i 2>/dev/null || {{ echo TMPFULL-$i; break; }}; \
                     done"
                ),
            )
            .await;
            // The files of the first step persist; deleting them frees the space.
            let after = step(
                &ws,
                "ls big* | wc -l; rm big*; head -c 16777216 /dev/zero > again && echo WROTE-AGAIN".into(),
            )
            .await;
            // Inodes: empty files until the file system refuses one.
            let inodes = step(
                &ws,
                format!(
                    "rm again; i=0; while [ $i -lt {TINY_FILES} ]; do \
                       true > e$i 2>/dev/null || {{ echo INODES-$i; break; }}; i=$((i+1)); done"
                ),
            )
            .await;
            let cleaned = step(&ws, "rm e*; echo ok > ok.txt && cat ok.txt; ls".into()).await;
            (i, fill, after, inodes, cleaned)
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.expect("episode"));
    }
    done.store(true, Ordering::Relaxed);
    watcher.join().expect("watcher");
    let elapsed = started.elapsed();
    let dropped = before.saturating_sub(lowest.load(Ordering::Relaxed));
    for (i, fill, after, inodes, cleaned) in results {
        let out = fill.stdout.as_str();
        let err = fill.stderr.as_str();
        let written = marker(out, "FULL").unwrap_or_else(|| {
            panic!("episode {i} wrote every file past its quota: {out:?} {err} {fill:?}")
        });
        assert_eq!(written, 2, "episode {i}: {out:?} {err}");
        // The run's work dir is a tmpfs of the same size: the third file fails there too.
        assert_eq!(
            marker(out, "TMPFULL"),
            Some(3),
            "episode {i}'s work dir is not bounded by its quota: {out:?} {err}"
        );
        assert_eq!(
            after.stdout.as_str(),
            "2\nWROTE-AGAIN\n",
            "episode {i} after deleting: {}",
            after.stderr.as_str()
        );
        let created = marker(inodes.stdout.as_str(), "INODES").unwrap_or_else(|| {
            panic!(
                "episode {i} created {TINY_FILES} files: {:?} {}",
                inodes.stdout.as_str(),
                inodes.stderr.as_str()
            )
        });
        assert!(created <= QUOTA_MIB * 64, "episode {i}: {created} files");
        assert_eq!(
            cleaned.stdout.as_str(),
            "ok\na.txt\nlink\nok.txt\nsub\n",
            "episode {i} after deleting its files: {}",
            cleaned.stderr.as_str()
        );
    }
    // The quotas are file systems of their own: the work root's may move by other processes'
    // files, never by what the episodes wrote (8 x 2 x 10 x 16 MiB if unbounded; an episode's
    // bound is twice its quota while a run lives: its workspace's and its run's work dir's).
    assert!(
        dropped <= 2 * EPISODES as u64 * (QUOTA_MIB << 20),
        "the work root's file system lost {} MiB during the episodes ({elapsed:?})",
        dropped >> 20
    );
    drop(workspaces);
    assert_eq!(
        mounts_under(&root),
        Vec::<std::path::PathBuf>::new(),
        "left mounted"
    );
    // A task may not ask for more than the sandbox's maximum.
    let err = sandbox
        .workspace(vec![layer.clone()], Some(1 << 20))
        .expect_err("a quota above the maximum");
    assert!(err.to_string().contains("workspace_disk_max_mib"), "{err}");
    drop((layer, sandbox));
    let _ = std::fs::remove_dir_all(&root);
}

/// A server killed with live workspaces leaves their tmpfs mounts behind: the next sandbox over
/// the same work root detaches them with the rest of the stale root.
#[test]
fn a_killed_servers_quotas_are_detached_and_removed() {
    let parent =
        std::path::PathBuf::from(format!("/dev/shm/codegym-ws-stale-{}", std::process::id()));
    // No process has this pid (above pid_max): its root is stale.
    let ws = parent.join("codegym-4000000000-dead/ws-1");
    std::fs::create_dir_all(&ws).expect("stale ws dir");
    nix::mount::mount(
        Some("codegym-ws"),
        &ws,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=1m"),
    )
    .expect("mount");
    std::fs::write(ws.join("left.txt"), "x").expect("write");
    assert_eq!(mounts_under(&parent), vec![ws.clone()]);
    let (sandbox, root) = sandbox("stale");
    assert_eq!(root, parent);
    assert_eq!(
        mounts_under(&parent),
        Vec::<std::path::PathBuf>::new(),
        "still mounted"
    );
    assert!(
        !parent.join("codegym-4000000000-dead").exists(),
        "the stale root survived"
    );
    drop(sandbox);
    let _ = std::fs::remove_dir_all(&parent);
}

/// What the quota costs: a workspace made and dropped (its tmpfs and overlay mounted and
/// detached), a command in it (its work dir's tmpfs), and a bare tmpfs mount and detach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a microbenchmark: cargo test -p codegym-sandbox --test workspace_quota -- --ignored --nocapture"]
async fn cost_of_the_quota() {
    const N: u32 = 200;
    let (sandbox, root) = sandbox("bench");
    let layer = sandbox
        .import_layer(&repository(&root))
        .await
        .expect("import");
    let started = Instant::now();
    for _ in 0..N {
        drop(
            sandbox
                .workspace(vec![layer.clone()], None)
                .expect("workspace"),
        );
    }
    let workspace = started.elapsed() / N;
    let ws = sandbox
        .workspace(vec![layer.clone()], None)
        .expect("workspace");
    support::workspace::sh(&ws, "true".into()).await;
    let started = Instant::now();
    for _ in 0..N / 4 {
        support::workspace::sh(&ws, "true".into()).await;
    }
    let run = started.elapsed() / (N / 4);
    let raw = root.join("raw");
    std::fs::create_dir(&raw).expect("raw");
    let started = Instant::now();
    for _ in 0..N {
        nix::mount::mount(
            Some("codegym-ws"),
            &raw,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=512m,nr_inodes=32768"),
        )
        .expect("mount");
        nix::mount::umount2(&raw, nix::mount::MntFlags::MNT_DETACH).expect("umount");
    }
    let tmpfs = started.elapsed() / N;
    println!(
        "workspace create+drop {workspace:?}, `true` in a workspace {run:?}, \
         tmpfs mount+detach {tmpfs:?} (means over {N}, {N}/4, {N})"
    );
    drop((ws, layer, sandbox));
    let _ = std::fs::remove_dir_all(&root);
}
