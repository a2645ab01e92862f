//! Memory and pids cgroups per execution: cgroup v1 hierarchies (this kind of hybrid host) or
//! cgroup v2 with delegated controllers. cgroups need no crate, only a few file writes. How a new
//! process gets into its groups: [`Join`]; the warm backend's runs, forked by its server, move
//! themselves into groups kept in a pool and reused ([`CellPool`]).

mod join;
mod pool;

use std::path::{Path, PathBuf};

pub(crate) use join::{Entered, Join, enter};
pub(crate) use pool::{CellPool, Lease};

/// Where the v1 hierarchies are mounted, one directory per controller.
const V1_MOUNT: &str = "/sys/fs/cgroup";

/// The kernel's largest pid (`PID_MAX_LIMIT` on 64-bit): no `pids.max` above it.
const PID_MAX_LIMIT: u32 = 4 << 20;

/// Where this process may create per-execution cgroups.
#[derive(Debug, Clone)]
pub(crate) enum CgroupRoot {
    /// v1: separate `memory` and `pids` hierarchies (either may be missing).
    V1 {
        memory: Option<PathBuf>,
        pids: Option<PathBuf>,
    },
    /// v2: one dir with `memory` and/or `pids` enabled for its children.
    V2 {
        dir: PathBuf,
        memory: bool,
        pids: bool,
    },
}

impl CgroupRoot {
    pub fn has_memory(&self) -> bool {
        match self {
            CgroupRoot::V1 { memory, .. } => memory.is_some(),
            CgroupRoot::V2 { memory, .. } => *memory,
        }
    }
    pub fn has_pids(&self) -> bool {
        match self {
            CgroupRoot::V1 { pids, .. } => pids.is_some(),
            CgroupRoot::V2 { pids, .. } => *pids,
        }
    }
    pub fn describe(&self) -> String {
        match self {
            CgroupRoot::V1 { memory, pids } => format!(
                "v1 memory={} pids={}",
                memory
                    .as_ref()
                    .map_or("-".into(), |p| p.display().to_string()),
                pids.as_ref()
                    .map_or("-".into(), |p| p.display().to_string())
            ),
            CgroupRoot::V2 { dir, memory, pids } => {
                format!("v2 {} memory={memory} pids={pids}", dir.display())
            }
        }
    }
}

/// Our own cgroup path in a hierarchy, from `/proc/self/cgroup`.
fn own_path(controller: &str) -> Option<String> {
    own_path_in(
        &std::fs::read_to_string("/proc/self/cgroup").ok()?,
        controller,
    )
}

/// [`own_path`] in a `/proc/<pid>/cgroup` listing already read.
fn own_path_in(text: &str, controller: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controller.is_empty() {
            ctrls.is_empty().then(|| path.to_string())
        } else {
            ctrls
                .split(',')
                .any(|c| c == controller)
                .then(|| path.to_string())
        }
    })
}

/// Removes empty `codegym-*` groups (and their `run-*` children) of dead processes.
fn sweep_stale(parent: &Path) {
    for e in std::fs::read_dir(parent).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !super::workdir::is_stale(&name) || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        sweep_stale(&e.path());
        for child in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
            if child.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir(child.path());
            }
        }
        let _ = std::fs::remove_dir(e.path());
    }
}

/// Creates `<own cgroup>/<name>` in a v1 hierarchy, if writable.
fn v1_dir(controller: &str, name: &str) -> Option<PathBuf> {
    let own = own_path(controller)?;
    let parent = Path::new(V1_MOUNT)
        .join(controller)
        .join(own.trim_start_matches('/'));
    sweep_stale(&parent);
    let dir = parent.join(name);
    match std::fs::create_dir(&dir) {
        Ok(()) => Some(dir),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Some(dir),
        Err(_) => None,
    }
}

fn v2_dir(name: &str) -> Option<CgroupRoot> {
    let own = own_path("")?;
    let mount = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .into_iter()
        .map(Path::new)
        .find(|m| m.join("cgroup.controllers").exists())?;
    let parent = mount.join(own.trim_start_matches('/'));
    sweep_stale(&parent);
    let available =
        std::fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
    let memory = available.split_whitespace().any(|c| c == "memory");
    let pids = available.split_whitespace().any(|c| c == "pids");
    if !memory && !pids {
        return None;
    }
    let dir = parent.join(name);
    if std::fs::create_dir(&dir).is_err() && !dir.is_dir() {
        return None;
    }
    let mut enable = String::new();
    if memory {
        enable.push_str("+memory ");
    }
    if pids {
        enable.push_str("+pids");
    }
    let ok = std::fs::write(dir.join("cgroup.subtree_control"), enable.trim()).is_ok();
    if !ok {
        let _ = std::fs::remove_dir(&dir);
        return None;
    }
    Some(CgroupRoot::V2 { dir, memory, pids })
}

/// Finds writable cgroup controllers and creates this sandbox's parent group in them.
pub(crate) fn probe(name: &str) -> Option<CgroupRoot> {
    let memory = v1_dir("memory", name);
    let pids = v1_dir("pids", name);
    if memory.is_some() || pids.is_some() {
        return Some(CgroupRoot::V1 { memory, pids });
    }
    v2_dir(name)
}

/// The cgroup(s) of one execution (or, on the warm backend, of one run at a time: `pool.rs`).
pub(crate) struct RunCgroup {
    dirs: Vec<PathBuf>,
    memory: Option<PathBuf>,
    /// The dir holding `pids.max`, when the pids controller is there.
    pids: Option<PathBuf>,
    v2: bool,
    /// v1: the `pids.max` to write once the process is in, before the spawning thread leaves
    /// (see [`Join::Inherit`]).
    pids_max: Option<(PathBuf, String)>,
}

impl RunCgroup {
    /// Creates the run's groups with the limits; `None` members are skipped.
    pub fn create(
        root: &CgroupRoot,
        name: &str,
        memory_bytes: u64,
        max_processes: u32,
    ) -> std::io::Result<Self> {
        let mut run = RunCgroup::make(root, name)?;
        let limited = run.limit_memory(memory_bytes, None).and_then(|()| {
            let Some(d) = &run.pids else { return Ok(()) };
            if run.v2 {
                return std::fs::write(d.join("pids.max"), max_processes.to_string());
            }
            // One more while the spawning thread is in the group with the new process (a limit
            // of one would refuse the fork), lowered before the thread leaves: the run's own
            // processes never exceed the limit, even if it runs by then.
            let during = match max_processes.checked_add(1) {
                Some(n) if n <= PID_MAX_LIMIT => n.to_string(),
                _ => "max".to_string(),
            };
            std::fs::write(d.join("pids.max"), during)?;
            run.pids_max = Some((d.join("pids.max"), max_processes.to_string()));
            Ok(())
        });
        match limited {
            Ok(()) => Ok(run),
            Err(e) => {
                run.remove_blocking();
                Err(e)
            }
        }
    }

    /// Creates the groups, with no limits yet; on an error, none is left.
    fn make(root: &CgroupRoot, name: &str) -> std::io::Result<Self> {
        let mut run = RunCgroup {
            dirs: Vec::new(),
            memory: None,
            pids: None,
            v2: matches!(root, CgroupRoot::V2 { .. }),
            pids_max: None,
        };
        let made = (|| {
            match root {
                CgroupRoot::V1 { memory, pids } => {
                    if let Some(m) = memory {
                        run.memory = Some(run.mkdir(m.join(name))?);
                    }
                    if let Some(p) = pids {
                        run.pids = Some(run.mkdir(p.join(name))?);
                    }
                }
                CgroupRoot::V2 { dir, memory, pids } => {
                    let d = run.mkdir(dir.join(name))?;
                    if *memory {
                        // No swap on top of the limit.
                        let _ = std::fs::write(d.join("memory.swap.max"), "0");
                        run.memory = Some(d.clone());
                    }
                    if *pids {
                        run.pids = Some(d);
                    }
                }
            }
            Ok(())
        })();
        match made {
            Ok(()) => Ok(run),
            Err(e) => {
                run.remove_blocking();
                Err(e)
            }
        }
    }

    fn mkdir(&mut self, dir: PathBuf) -> std::io::Result<PathBuf> {
        std::fs::create_dir(&dir)?;
        self.dirs.push(dir.clone());
        Ok(dir)
    }

    /// Sets the memory limit (v1: memory+swap too, where swap is accounted); `previous` is the
    /// group's limit now, if it has one (memory+swap may never be below memory: a higher limit
    /// is written after it, a lower one before).
    pub(super) fn limit_memory(&self, bytes: u64, previous: Option<u64>) -> std::io::Result<()> {
        let Some(d) = &self.memory else { return Ok(()) };
        if self.v2 {
            return std::fs::write(d.join("memory.max"), bytes.to_string());
        }
        // (The swap file is absent without swap accounting.)
        let swap = || std::fs::write(d.join("memory.memsw.limit_in_bytes"), bytes.to_string());
        let raise = previous.is_some_and(|p| bytes > p);
        if raise {
            let _ = swap();
        }
        std::fs::write(d.join("memory.limit_in_bytes"), bytes.to_string())?;
        if !raise {
            let _ = swap();
        }
        Ok(())
    }

    /// Sets `pids.max` exactly (nothing else is in the group as its process enters).
    pub(super) fn limit_pids(&self, max_processes: u32) -> std::io::Result<()> {
        match &self.pids {
            Some(d) => std::fs::write(d.join("pids.max"), max_processes.to_string()),
            None => Ok(()),
        }
    }

    /// How a new process gets into these groups.
    pub fn join(&self) -> Join {
        if self.v2 {
            Join::Attach(self.dirs.iter().map(|d| d.join("cgroup.procs")).collect())
        } else {
            Join::Inherit {
                dirs: self.dirs.clone(),
                then: self.pids_max.iter().cloned().collect(),
            }
        }
    }

    /// (peak memory bytes, whether the OOM killer fired in the group).
    pub fn memory_stats(&self) -> (Option<u64>, bool) {
        let Some(d) = &self.memory else {
            return (None, false);
        };
        let read = |f: &str| std::fs::read_to_string(d.join(f)).ok();
        let peak = read(self.memory_files().peak).and_then(|s| s.trim().parse().ok());
        let oom = read(self.memory_files().events).and_then(|s| oom_kills(&s));
        (peak, oom.is_some_and(|n| n > 0))
    }

    /// The names of the memory controller's files, by version.
    pub(super) fn memory_files(&self) -> MemoryFiles {
        match self.v2 {
            true => MemoryFiles {
                usage: "memory.current",
                peak: "memory.peak",
                events: "memory.events",
            },
            false => MemoryFiles {
                usage: "memory.usage_in_bytes",
                peak: "memory.max_usage_in_bytes",
                events: "memory.oom_control",
            },
        }
    }

    /// The memory group's dir, if there is one.
    pub(super) fn memory_dir(&self) -> Option<&Path> {
        self.memory.as_deref()
    }

    /// The pids group's dir, if there is one.
    pub(super) fn pids_dir(&self) -> Option<&Path> {
        self.pids.as_deref()
    }

    /// Any of the groups' dirs.
    pub(super) fn first_dir(&self) -> Option<&Path> {
        self.dirs.first().map(PathBuf::as_path)
    }

    pub(super) fn is_v2(&self) -> bool {
        self.v2
    }

    /// The group's processes: where a process writes `0` to move itself in (v1: `tasks`, the
    /// calling thread alone, without the kernel's global lock; v2: `cgroup.procs`).
    pub(super) fn entry_files(&self) -> Vec<PathBuf> {
        let file = if self.v2 { "cgroup.procs" } else { "tasks" };
        self.dirs.iter().map(|d| d.join(file)).collect()
    }

    /// Pids still in the group (should be none after a PID namespace is torn down). Never this
    /// process: on v1 its spawning thread passes through a group while it forks into it, and
    /// would stay if it could not leave (see [`Join::Inherit`]).
    pub fn pids(&self) -> Vec<i32> {
        let me = std::process::id() as i32;
        let mut out = Vec::new();
        for d in &self.dirs {
            if let Ok(s) = std::fs::read_to_string(d.join("cgroup.procs")) {
                out.extend(
                    s.lines()
                        .filter_map(|l| l.trim().parse::<i32>().ok())
                        .filter(|&p| p != me),
                );
            }
        }
        out
    }

    /// SIGKILLs everything left in the group (`cgroup.kill` on v2).
    pub fn kill_all(&self) {
        if self.v2
            && let Some(d) = self.dirs.first()
            && std::fs::write(d.join("cgroup.kill"), "1").is_ok()
        {
            return;
        }
        for pid in self.pids() {
            // SAFETY: kill() with a pid read from our own cgroup.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    /// Removes the groups; retries while the last tasks finish exiting.
    pub fn remove_blocking(self) {
        for d in &self.dirs {
            let mut tries = 0;
            while let Err(e) = std::fs::remove_dir(d) {
                tries += 1;
                if e.kind() == std::io::ErrorKind::NotFound || tries > 200 {
                    if tries > 200 {
                        tracing::warn!(dir = %d.display(), error = %e, "cannot remove a sandbox cgroup");
                    }
                    break;
                }
                self.kill_all();
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
}

/// A memory group's files, by cgroup version.
pub(super) struct MemoryFiles {
    /// The usage now.
    pub usage: &'static str,
    /// The peak usage (v1: reset by writing `0`; v2, Linux >= 6.12: reset per open file).
    pub peak: &'static str,
    /// Where the OOM-kill count is (`oom_kill N`, cumulative).
    pub events: &'static str,
}

/// The `oom_kill` count of a memory group's events file (`memory.oom_control` on v1,
/// `memory.events` on v2).
pub(super) fn oom_kills(events: &str) -> Option<u64> {
    events.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next() == Some("oom_kill")).then(|| it.next()?.parse().ok())?
    })
}

/// Removes this sandbox's parent groups (at drop of the sandbox).
pub(crate) fn remove_root(root: &CgroupRoot) {
    match root {
        CgroupRoot::V1 { memory, pids } => {
            for d in [memory, pids].into_iter().flatten() {
                let _ = std::fs::remove_dir(d);
            }
        }
        CgroupRoot::V2 { dir, .. } => {
            let _ = std::fs::remove_dir(dir);
        }
    }
}
