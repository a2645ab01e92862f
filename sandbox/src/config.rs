//! Serde-able configuration of the sandbox: per-execution [`Limits`], the [`SandboxConfig`] and the
//! [`IsolationLevel`] a deployment may require.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Resource limits of one execution (or of one `exec` of a session).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// CPU time (user + system) per process (`RLIMIT_CPU`: SIGXCPU, then SIGKILL 1 s later); the
    /// main limit. A tree spreading work over many processes is bounded by `wall_ms`.
    pub cpu_ms: u64,
    /// Wall-clock backstop: machines are shared and noisy, so keep it generous.
    pub wall_ms: u64,
    /// Memory of the whole tree (cgroup) or of each process (`RLIMIT_AS` fallback).
    pub memory_bytes: u64,
    /// Processes + threads of the execution.
    pub max_processes: u32,
    /// Largest file the program may write.
    pub max_file_bytes: u64,
    pub max_open_files: u32,
    /// Bytes of stdout kept; the rest is drained and dropped (`stdout_truncated`).
    pub stdout_cap: usize,
    pub stderr_cap: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            cpu_ms: 5_000,
            wall_ms: 15_000,
            memory_bytes: 1 << 30,
            max_processes: 64,
            max_file_bytes: 16 << 20,
            max_open_files: 256,
            stdout_cap: 64 << 10,
            stderr_cap: 64 << 10,
        }
    }
}

impl Limits {
    /// `self` with no limit above `ceiling`'s: every field is the smaller of the two. What a task or
    /// a request asks for passes through this against the server's limits, so it can only lower
    /// them. (A caller that needs a larger output cap for its own trusted record raises the cap
    /// afterwards, on purpose.)
    pub fn within(self, ceiling: &Limits) -> Limits {
        Limits {
            cpu_ms: self.cpu_ms.min(ceiling.cpu_ms),
            wall_ms: self.wall_ms.min(ceiling.wall_ms),
            memory_bytes: self.memory_bytes.min(ceiling.memory_bytes),
            max_processes: self.max_processes.min(ceiling.max_processes),
            max_file_bytes: self.max_file_bytes.min(ceiling.max_file_bytes),
            max_open_files: self.max_open_files.min(ceiling.max_open_files),
            stdout_cap: self.stdout_cap.min(ceiling.stdout_cap),
            stderr_cap: self.stderr_cap.min(ceiling.stderr_cap),
        }
    }
}

/// How much isolation a sandbox provides (ordered: `None < Basic < Strict`). What each level
/// requires is [`IsolationLevel::REQUIRES`]'s.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum IsolationLevel {
    /// A plain child process.
    None,
    /// Separate process, rlimits, cleared environment, wall-clock kill of the whole tree.
    Basic,
    /// Basic + network namespace, seccomp, Landlock or a mount namespace, PID namespace or cgroup.
    /// The default requirement of every sandbox.
    #[default]
    Strict,
}

impl IsolationLevel {
    /// What reaching each level takes, in the words of `--help` and `codegym doctor`.
    pub const REQUIRES: &str = "basic = a process per run, rlimits, a cleared environment and a \
        wall-clock kill of the whole tree; strict = basic + a network namespace, seccomp, Landlock \
        or a mount namespace, and a PID namespace or a cgroup";
}

impl std::str::FromStr for IsolationLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(IsolationLevel::None),
            "basic" => Ok(IsolationLevel::Basic),
            "strict" => Ok(IsolationLevel::Strict),
            _ => Err(format!(
                "unknown isolation level {s:?} (expected strict, basic or none)"
            )),
        }
    }
}

impl std::fmt::Display for IsolationLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IsolationLevel::None => "none",
            IsolationLevel::Basic => "basic",
            IsolationLevel::Strict => "strict",
        })
    }
}

/// Configuration of a [`super::Sandbox`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// The Python interpreter. `None`: resolve the real binary behind `python3` once (pyenv shims
    /// cost ~100 ms per start). `CODEGYM_PYTHON` overrides the lookup.
    pub python: Option<PathBuf>,
    /// Default limits of every execution.
    pub limits: Limits,
    /// Where per-execution work dirs are created. `None`: `/dev/shm` (tmpfs) when writable and not
    /// mounted `noexec` (compiled programs run from the work dir), else the system temp dir.
    pub work_root: Option<PathBuf>,
    /// Executions in flight; `0` = 4 x cores (a run spends part of its life waiting on pipes and
    /// its reply: with 2 x cores, 2 cores were not kept busy; issue 17 measured +7-10% at 4 x). Excess
    /// calls wait.
    pub max_concurrent: usize,
    /// `Sandbox::new` fails when the machine cannot provide at least this level (default
    /// `strict`): a deployment that accepts less says so.
    pub min_isolation: IsolationLevel,
    /// How executions find third-party packages (numpy...). The default keeps them importable
    /// without paying for `site` at every start.
    pub site_packages: SitePackages,
    /// First uid/gid of the range executions run as when the supervisor is root; every execution
    /// gets a uid no other live execution on the host has (leased in one host file, so codegym
    /// processes sharing a range share it out: `docs/sandbox.md`), so that per-uid limits and file
    /// permissions separate concurrent episodes.
    pub uid_base: u32,
    /// Number of uids in the range: at least the executions and sessions alive at once, on this
    /// host, of every codegym process using the range (a run finding none free fails).
    pub uid_count: u32,
    /// How one-shot scripts start (sessions always get a fresh interpreter).
    pub backend: Backend,
    /// Data tasks (issue 13): host dirs runs may read but never write (the package cache), visible
    /// even under hidden dirs (bound back read-only) and readable under Landlock.
    pub read_only_dirs: Vec<PathBuf>,
    // Issue 14 (languages): the compile step of compiled languages.
    /// Default limits of a compile (`wall_ms` is SandboxFusion's `compile_timeout`; `stderr_cap`
    /// caps the compiler's message kept in the result).
    pub compile_limits: Limits,
    /// Bytes of compiled artifacts kept in memory for reuse (least recently used evicted).
    pub compile_cache_bytes: u64,
    /// Trusted, constant Python programs that many runs use as their `main.py` (a test harness
    /// that reads its tests from stdin): the warm backend compiles each once, in its server, and
    /// a run whose source is byte-identical uses that code. Never anything that holds tests or
    /// expected outputs (children can reach the server's objects through `gc`). Set by the
    /// caller's code, not by configuration files.
    #[serde(skip)]
    pub precompiled: Vec<String>,
    /// A repository workspace's disk quota in MiB when its task names none: a tmpfs of its own
    /// holding everything an episode writes (`workspace/quota.rs`). Tmpfs pages are memory,
    /// charged to the writing run's memory limit.
    pub workspace_disk_mib: u64,
    /// The largest quota a task may ask for; a workspace asking more fails.
    pub workspace_disk_max_mib: u64,
}

/// The default limits of a compile: compilers need more memory, processes (gcc's driver, `cc1plus`,
/// `as`, `ld`; Go's and the JVM's threads) and time than a judged run.
pub fn default_compile_limits() -> Limits {
    Limits {
        cpu_ms: 30_000,
        wall_ms: 60_000,
        memory_bytes: 2 << 30,
        max_processes: 512,
        max_file_bytes: 256 << 20,
        max_open_files: 1024,
        stdout_cap: 16 << 10,
        stderr_cap: 16 << 10,
    }
}

/// How a script's interpreter is started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// `warm_fork` where the machine allows it (root, PID and mount namespaces), else `fresh`.
    #[default]
    Auto,
    /// Fork each run from a pre-started interpreter (several times cheaper than a fresh start);
    /// `Sandbox::new` fails where that is impossible.
    WarmFork,
    /// A fresh interpreter per run.
    Fresh,
}

/// Whether and how the interpreter's site-packages are importable.
///
/// Running `site` at start-up executes every `.pth` file of the install; on pyenv machines one of them
/// imports certifi, which makes each execution ~4x slower (measured in BENCHMARKS.md). `Paths` skips
/// `site` (`-S`) and puts the site-packages directories on `PYTHONPATH` instead: packages import the
/// same, `.pth` hooks do not run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SitePackages {
    /// `-S` + site-packages on `PYTHONPATH` (fast; packages importable; `.pth` files ignored).
    #[default]
    Paths,
    /// Run `site` as usual, `.pth` files included (slow on some installs).
    Full,
    /// `-S` and nothing else: the standard library only (fastest).
    None,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            python: None,
            limits: Limits::default(),
            work_root: None,
            max_concurrent: 0,
            min_isolation: IsolationLevel::Strict,
            site_packages: SitePackages::Paths,
            uid_base: 1_500_000,
            uid_count: 65_536,
            backend: Backend::Auto,
            read_only_dirs: Vec::new(),
            compile_limits: default_compile_limits(),
            compile_cache_bytes: 512 << 20,
            precompiled: Vec::new(),
            workspace_disk_mib: 512,
            workspace_disk_max_mib: 4096,
        }
    }
}
