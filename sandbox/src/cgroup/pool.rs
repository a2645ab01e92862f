//! Memory and pids groups of the warm backend's runs: one group (per controller) of its own for
//! each run, so that no run's memory or processes count against another's budget, and each run's
//! OOM verdict and peak are its own.
//!
//! The fork server's children cannot be born in them (the server forks, not this process), so
//! each child moves itself in before anything of the program runs, by writing `0` to files this
//! process opened and passed along ([`Lease::entry_files`]): on v1 to `tasks`, which moves the
//! calling thread alone and skips the kernel's global lock (moving another process waits for an
//! RCU grace period, ~10-20 ms on a VM; see `join.rs`); on v2 to `cgroup.procs` (a child has
//! one thread).
//!
//! Making and removing groups per run costs ~0.3-0.6 ms (a v1 memory group also lingers in the
//! kernel after its removal), so groups are made once and reused, one run at a time
//! ([`CellPool`]). A cell goes back only once its run's tree is gone *and* its work dir is removed
//! (the files a run wrote on a tmpfs are charged to its memory group until then): both the run's
//! guard and its fork server's reply hold its [`Lease`]. What a reused group keeps, and how each
//! run still gets its own accounting:
//! - its processes: none may be left (a cell still holding one is removed instead);
//! - its limits: written for each run (the request's, which may differ from the last run's);
//! - the OOM-kill count, cumulative: a run's verdict compares the count with the one at its start;
//! - the peak: reset to the usage at the run's start (v1 `memory.max_usage_in_bytes`; v2
//!   `memory.peak`, reset per open file, read through the same one, Linux >= 6.12, else no peak
//!   is reported); a run's peak is what it adds to the usage its cell started with;
//! - page cache of files earlier runs read first, still charged to the cell: reclaimable, so never
//!   the cause of an OOM kill, and reclaimed before reuse once it is over an eighth of the limit
//!   (v1 `memory.force_empty`, v2 `memory.reclaim`), so a run's usage starts near zero.

use std::fs::File;
use std::io::{self, Seek, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{CgroupRoot, RunCgroup};

/// The warm backend's reusable per-run groups of one sandbox, under its cgroup root.
pub(crate) struct CellPool {
    root: CgroupRoot,
    idle: Mutex<Vec<Cell>>,
    made: AtomicU64,
}

/// One run's groups, between runs in [`CellPool`]'s idle list.
struct Cell {
    group: RunCgroup,
    /// The files a process writes `0` to, to move itself in (opened once, by this process: the
    /// kernel checks the opener's credentials).
    entry: Vec<OwnedFd>,
    /// v2: `memory.peak`, opened once: a reset applies to reads through the same open file.
    peak: Option<File>,
    /// The limits written last: (memory bytes, processes).
    limits: Option<(u64, u32)>,
    /// At the start of this cell's current run: the usage (its peak counts from there) and the
    /// OOM-kill count (a higher one at its end means the run was OOM-killed).
    usage_base: u64,
    oom_base: u64,
    /// The peak was reset for this run (v2 before 6.12 cannot: no peak is reported then).
    peak_reset: bool,
}

impl CellPool {
    pub fn new(root: CgroupRoot) -> CellPool {
        CellPool {
            root,
            idle: Mutex::new(Vec::new()),
            made: AtomicU64::new(0),
        }
    }

    /// Whether the cells bound memory (else runs keep `RLIMIT_AS`).
    pub fn has_memory(&self) -> bool {
        self.root.has_memory()
    }

    /// A cell with these limits for one run: an idle one, else a new one. Blocking (a few cgroup
    /// file writes; a new cell, a few mkdirs). An error means the run cannot have groups of its
    /// own: it must fail, not run in shared ones.
    pub fn lease(self: &Arc<Self>, memory_bytes: u64, max_processes: u32) -> io::Result<Lease> {
        let reused = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let mut cell = match reused {
            Some(cell) => cell,
            None => self.make()?,
        };
        if let Err(e) = cell.set_limits(memory_bytes, max_processes) {
            cell.group.remove_blocking();
            return Err(e);
        }
        Ok(Lease {
            cell: Some(cell),
            pool: self.clone(),
        })
    }

    fn make(&self) -> io::Result<Cell> {
        let n = self.made.fetch_add(1, Ordering::Relaxed);
        let group = RunCgroup::make(&self.root, &format!("warm-{n}"))?;
        let opened = (|| {
            let entry = group
                .entry_files()
                .iter()
                .map(|f| File::options().write(true).open(f).map(OwnedFd::from))
                .collect::<io::Result<Vec<_>>>()?;
            let peak = match (group.is_v2(), group.memory_dir()) {
                (true, Some(d)) => File::options()
                    .read(true)
                    .write(true)
                    .open(d.join("memory.peak"))
                    .ok(),
                _ => None,
            };
            Ok((entry, peak))
        })();
        let (entry, peak) = match opened {
            Ok(files) => files,
            Err(e) => {
                group.remove_blocking();
                return Err(e);
            }
        };
        let mut cell = Cell {
            group,
            entry,
            peak,
            limits: None,
            usage_base: 0,
            oom_base: 0,
            peak_reset: false,
        };
        cell.start_accounting();
        Ok(cell)
    }

    fn give_back(&self, mut cell: Cell) {
        match cell.scrub() {
            Ok(()) => match self.idle.lock() {
                Ok(mut idle) => idle.push(cell),
                Err(_) => cell.group.remove_blocking(),
            },
            Err(e) => {
                tracing::warn!(error = %e, "a warm run's cgroup cannot be reused; removing it");
                cell.group.remove_blocking();
            }
        }
    }
}

impl Drop for CellPool {
    fn drop(&mut self) {
        if let Ok(idle) = self.idle.get_mut() {
            for cell in idle.drain(..) {
                cell.group.remove_blocking();
            }
        }
    }
}

impl Cell {
    fn set_limits(&mut self, memory_bytes: u64, max_processes: u32) -> io::Result<()> {
        let previous = self.limits;
        if previous.map(|l| l.0) != Some(memory_bytes) {
            self.group
                .limit_memory(memory_bytes, previous.map(|l| l.0))?;
        }
        if previous.map(|l| l.1) != Some(max_processes) {
            self.group.limit_pids(max_processes)?;
        }
        self.limits = Some((memory_bytes, max_processes));
        Ok(())
    }

    /// Makes the cell ready for its next run (its last run's tree is gone, its work dir removed).
    fn scrub(&mut self) -> io::Result<()> {
        if !self.group.pids().is_empty() {
            return Err(io::Error::other("processes left in the group"));
        }
        let usage = self.usage().unwrap_or(0);
        let limit = self.limits.map_or(u64::MAX, |l| l.0);
        if usage > limit / 8
            && let Some(d) = self.group.memory_dir()
        {
            // Page cache charged to the cell (files its runs read first): its next run starts
            // near zero. Reclaimable memory only: what cannot be reclaimed stays, counted in the
            // base its next run's peak starts from.
            let _ = match self.group.is_v2() {
                true => std::fs::write(d.join("memory.reclaim"), usage.to_string()),
                false => std::fs::write(d.join("memory.force_empty"), "0"),
            };
        }
        self.start_accounting();
        Ok(())
    }

    /// Resets the peak and takes the bases of the next run's accounting.
    fn start_accounting(&mut self) {
        self.peak_reset = match (&mut self.peak, self.group.memory_dir()) {
            (Some(f), _) => f.write_all(b"reset").is_ok(),
            (None, Some(d)) if !self.group.is_v2() => {
                std::fs::write(d.join("memory.max_usage_in_bytes"), "0").is_ok()
            }
            _ => false,
        };
        self.usage_base = self.usage().unwrap_or(0);
        self.oom_base = self.group.oom_kills().unwrap_or(0);
    }

    fn usage(&self) -> Option<u64> {
        self.group.memory_file(if self.group.is_v2() {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        })
    }
}

/// One run's use of a cell: shared by the run's guard and its fork server's reply; the last of
/// the two to let go gives the cell back (scrubbed), or removes it.
pub(crate) struct Lease {
    cell: Option<Cell>,
    pool: Arc<CellPool>,
}

impl Lease {
    /// The descriptors the run's process writes `0` to, to move itself into its groups.
    pub fn entry_files(&self) -> Vec<RawFd> {
        self.cell
            .iter()
            .flat_map(|c| c.entry.iter().map(|f| f.as_raw_fd()))
            .collect()
    }

    /// The run's own (peak memory bytes above its start, whether the OOM killer fired in its
    /// groups during it).
    pub fn memory_stats(&self) -> (Option<u64>, bool) {
        let Some(cell) = &self.cell else {
            return (None, false);
        };
        let peak = match (&cell.peak, cell.peak_reset) {
            (_, false) => None,
            (Some(f), true) => read_number(f),
            (None, true) => cell.group.memory_file("memory.max_usage_in_bytes"),
        };
        let oom = cell.group.oom_kills().is_some_and(|n| n > cell.oom_base);
        (peak.map(|p| p.saturating_sub(cell.usage_base)), oom)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(cell) = self.cell.take() {
            self.pool.give_back(cell);
        }
    }
}

/// A number read from the start of an open cgroup file.
fn read_number(mut f: &File) -> Option<u64> {
    use std::io::Read;
    f.rewind().ok()?;
    let mut text = String::new();
    f.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}
