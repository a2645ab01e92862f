//! Finding a warm sandbox's fork server and the children it forked ahead, from the host's `/proc`.

use std::path::Path;

/// The fork servers whose work root is `root`, and the children they forked ahead (which wait for
/// a run: they look like their server, whose child they are).
pub fn server_processes(root: &Path) -> (Vec<i32>, Vec<i32>) {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cwd = std::fs::read_link(e.path().join("cwd")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains("The fork server of the warm-fork")
            && cwd.parent() == Some(root)
        {
            out.push(pid);
        }
    }
    let all = out.clone();
    all.into_iter()
        .partition(|&pid| parent(pid).is_none_or(|pp| !out.contains(&pp)))
}

fn parent(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Waits (up to 5 s) until `root`'s servers have children forked ahead, kills them all, waits
/// until each is dead (so the server's socket to it is closed), and returns how many it killed.
pub async fn kill_forked_ahead(root: &Path) -> usize {
    // Waiting for the deaths keeps the server's own race out of the callers' next request: a
    // child whose socket is closed but whose SIGCHLD the server has not seen yet (fork_loop.c
    // must then stop forking ahead from the failed send alone).
    let waiting = forked_ahead(root, 1).await;
    kill_and_wait(&waiting).await;
    waiting.len()
}

async fn forked_ahead(root: &Path, at_least: usize) -> Vec<i32> {
    let mut waiting = Vec::new();
    for _ in 0..100 {
        waiting = server_processes(root).1;
        if waiting.len() >= at_least {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    waiting
}

fn signal_all(pids: &[i32], signal: i32) {
    for pid in pids {
        // SAFETY: kill(2) on a pid just found; at worst ESRCH.
        unsafe { libc::kill(*pid, signal) };
    }
}

async fn kill_and_wait(pids: &[i32]) {
    signal_all(pids, libc::SIGKILL);
    for _ in 0..200 {
        if pids.iter().all(|pid| !alive(*pid)) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("children forked ahead still alive 2 s after SIGKILL: {pids:?}");
}

/// Neither gone nor a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with(|c| c != 'Z'))
        })
        .unwrap_or(false)
}
