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

/// Waits (up to 5 s) until `root`'s servers have children forked ahead, kills them all, and
/// returns how many it killed.
pub async fn kill_forked_ahead(root: &Path) -> usize {
    let mut waiting = Vec::new();
    for _ in 0..100 {
        waiting = server_processes(root).1;
        if !waiting.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for pid in &waiting {
        // SAFETY: kill(2) on a pid just found; at worst ESRCH.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    waiting.len()
}
