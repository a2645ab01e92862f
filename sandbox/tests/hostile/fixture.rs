//! Fixture of the hostile suite: an outer cgroup guard, one sandbox per test with its own work
//! root and uid range, and checks that nothing survives an execution.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use codegym_sandbox::{ExecRequest, Limits, Sandbox, SandboxConfig};
use env_core::ExecutionResult;

pub const SECRET: &str = "codegym-test-secret-7f3a9c";

/// Puts the test process under a memory + pids cgroup (v1, when writable) so that a sandbox
/// regression fails a test instead of taking the machine down; sets the fake host secret.
fn outer_guard() {
    static GUARD: OnceLock<()> = OnceLock::new();
    GUARD.get_or_init(|| {
        // SAFETY: set once, before any sandbox exists; the sandbox must never pass it on.
        unsafe { std::env::set_var("CODEGYM_TEST_SECRET", SECRET) };
        let own = |ctrl: &str| -> Option<PathBuf> {
            let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
            let path = text.lines().find_map(|l| {
                let mut p = l.splitn(3, ':');
                let (_, c, path) = (p.next()?, p.next()?, p.next()?);
                c.split(',').any(|c| c == ctrl).then(|| path.to_string())
            })?;
            Some(
                Path::new("/sys/fs/cgroup")
                    .join(ctrl)
                    .join(path.trim_start_matches('/')),
            )
        };
        let name = format!("codegym-hostile-guard-{}", std::process::id());
        for (ctrl, file, value) in [
            ("memory", "memory.limit_in_bytes", "4294967296"),
            ("pids", "pids.max", "1024"),
        ] {
            if let Some(dir) = own(ctrl).map(|d| d.join(&name))
                && std::fs::create_dir_all(&dir).is_ok()
                && std::fs::write(dir.join(file), value).is_ok()
            {
                let _ = std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string());
            }
        }
    });
}

/// A sandbox of its own for one test.
pub struct Fixture {
    pub sandbox: Sandbox,
    pub root: PathBuf,
    pub uid_base: u32,
    pub uid_count: u32,
}

pub fn limits() -> Limits {
    Limits {
        cpu_ms: 1000,
        wall_ms: 8000,
        memory_bytes: 256 << 20,
        max_processes: 32,
        ..Limits::default()
    }
}

impl Fixture {
    pub fn new() -> Fixture {
        outer_guard();
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let uid_base = 2_100_000 + (std::process::id() % 1000) * 10_000 + n * 16;
        let root = PathBuf::from(format!(
            "/dev/shm/codegym-hostile-{}-{n}",
            std::process::id()
        ));
        std::fs::create_dir_all(&root).expect("work root");
        let config = SandboxConfig {
            work_root: Some(root.clone()),
            limits: limits(),
            uid_base,
            uid_count: 16,
            backend: crate::BACKEND,
            ..SandboxConfig::default()
        };
        let sandbox = Sandbox::new(config).unwrap_or_else(|e| panic!("sandbox: {e}"));
        Fixture {
            sandbox,
            root,
            uid_base,
            uid_count: 16,
        }
    }

    pub async fn run(&self, src: &str) -> ExecutionResult {
        self.run_req(ExecRequest::new(src)).await
    }

    pub async fn run_req(&self, req: ExecRequest) -> ExecutionResult {
        let o = self
            .sandbox
            .run(req)
            .await
            .unwrap_or_else(|e| panic!("infrastructure error: {e}"));
        self.assert_clean();
        assert!(
            !o.stdout.as_str().contains(SECRET) && !o.stderr.as_str().contains(SECRET),
            "secret leaked"
        );
        o
    }

    /// No process of the sandbox's uids survives and no work dir is left.
    pub fn assert_clean(&self) {
        let survivors = processes_of(self.uid_base, self.uid_count);
        assert!(
            survivors.is_empty(),
            "surviving sandbox processes: {survivors:?}"
        );
        let left: Vec<_> = std::fs::read_dir(&self.root)
            .map(|d| {
                d.filter_map(Result::ok)
                    .flat_map(|e| std::fs::read_dir(e.path()).into_iter().flatten())
                    .collect()
            })
            .unwrap_or_default();
        assert!(left.is_empty(), "leftover work dirs: {left:?}");
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Host pids whose real uid is in the range.
pub fn processes_of(base: u32, count: u32) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|u| u.parse::<u32>().ok());
        if uid.is_some_and(|u| u >= base && u < base + count) {
            out.push((pid, status.lines().next().unwrap_or_default().to_string()));
        }
    }
    out
}
