//! The workspace tests' sandbox, repository and shell step (`tests/workspace.rs`,
//! `tests/workspace_quota.rs`, `tests/image_root.rs`: each uses part of it).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use codegym_sandbox::{Backend, Limits, Sandbox, SandboxConfig, Workspace, WorkspaceRun};
use env_core::ExecutionResult;

/// A fresh-backend sandbox whose work root is `/dev/shm/codegym-ws-TAG-PID` (returned).
pub fn sandbox(tag: &str) -> (Sandbox, PathBuf) {
    let root = PathBuf::from(format!("/dev/shm/codegym-ws-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&root).expect("work root");
    let config = SandboxConfig {
        work_root: Some(root.clone()),
        limits: Limits {
            cpu_ms: 2000,
            wall_ms: 20_000,
            memory_bytes: 256 << 20,
            max_processes: 32,
            ..Limits::default()
        },
        uid_base: 2_600_000 + (std::process::id() % 1000) * 64,
        uid_count: 64,
        backend: Backend::Fresh,
        ..SandboxConfig::default()
    };
    (Sandbox::new(config).expect("sandbox"), root)
}

pub const HOST_SECRET: &str = "host-secret-5d1e";

/// A repository with a file, a dir, and a link to a host file no run may read (beside the
/// sandbox's work root, in a dir hidden from runs).
pub fn repository(root: &Path) -> PathBuf {
    let src = root.join("src-repo");
    std::fs::create_dir_all(src.join("sub")).expect("src");
    std::fs::write(src.join("a.txt"), "base\n").expect("a");
    std::fs::write(src.join("sub/b.txt"), "bee\n").expect("b");
    std::fs::write(root.join("secret"), HOST_SECRET).expect("secret");
    std::os::unix::fs::symlink(root.join("secret"), src.join("link")).expect("link");
    src
}

/// One shell command in `ws` with the sandbox's default limits.
pub async fn sh(ws: &Workspace, command: String) -> ExecutionResult {
    let run = WorkspaceRun {
        command,
        ..WorkspaceRun::default()
    };
    ws.run(run).await.expect("workspace run").0
}

/// The mount points at or under `root` in this process's mount namespace.
pub fn mounts_under(root: &Path) -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(root))
        .collect()
}
