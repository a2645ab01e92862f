//! Memory and pids groups of the warm backend's runs: one group (per controller) of its own for
//! each run, so that no run's memory or processes count against another's budget, and each run's
//! OOM verdict and peak are its own.
//!
//! The fork server's children cannot be born in them (the server forks, not this process), so
//! each child moves itself in before anything of the program runs, by writing `0` to files this
//! process opened and passed along ([`Lease::entry_files`]): on v1 to `tasks`, which moves the
//! calling thread alone and skips the kernel's global lock (moving another process waits for an
//! RCU grace period, ~10-20 ms on a VM; see `join.rs`); on v2 to `cgroup.procs` (a child has
//! one thread). Untested on v2 (this project's hosts are v1): there a process move takes that
//! global lock, so a run that comes alone may wait for a grace period (not where the hierarchy is
//! mounted with `favordynmods`, nor while moves follow each other closely).
//!
//! Making and removing groups per run costs ~0.3-0.6 ms (a v1 memory group also lingers in the
//! kernel after its removal), so groups are made once and reused, one run at a time
//! ([`CellPool`]). A cell goes back only once its run's tree is gone *and* its work dir is removed
//! (the files a run wrote on a tmpfs are charged to its memory group until then): both the run's
//! guard and its fork server's reply hold its [`Lease`]. What a reused group keeps, and how each
//! run still gets its own accounting:
//! - its processes: none may be left (a cell still holding one is removed instead);
//! - its limits: each run's own (a request's may differ from the last run's: written then);
//! - the OOM-kill count, cumulative: a run's verdict compares the count with the one at its start;
//! - the peak: reset to the usage at the run's start (v1 `memory.max_usage_in_bytes`; v2
//!   `memory.peak`, reset per open file, read through the same one, Linux >= 6.12, else no peak
//!   is reported); a run's peak is what it adds to the usage its cell started with;
//! - page cache of files earlier runs read first, still charged to the cell: reclaimable, so never
//!   the cause of an OOM kill, and reclaimed before reuse once it is over an eighth of the limit
//!   (v1 `memory.force_empty`, v2 `memory.reclaim`), so a run's usage starts near zero.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{CgroupRoot, RunCgroup, oom_kills};

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
    counters: Counters,
    /// The limits written last: (memory bytes, processes).
    limits: Option<(u64, u32)>,
    /// At the start of this cell's current run: the usage (its peak counts from there) and the
    /// OOM-kill count (a higher one at its end means the run was OOM-killed).
    usage_base: u64,
    oom_base: u64,
    /// The peak was reset for this run (v2 before 6.12 cannot: no peak is reported then).
    peak_reset: bool,
}

/// The files read for every run, kept open: each is read again from its start (`pread`), ~15x
/// cheaper than opening it each time (~0.1 ms of CPU per run with six opens).
struct Counters {
    /// The memory usage now.
    usage: Option<File>,
    /// The peak, opened for writing too (its reset; on v2 it applies to this open file only).
    peak: Option<File>,
    /// Where the OOM-kill count is.
    events: Option<File>,
    /// `pids.current`, else (no pids controller) a `cgroup.procs`: whether a process is left.
    tasks: Option<(File, bool)>,
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
            Ok((entry, Counters::open(&group)?))
        })();
        let (entry, counters) = match opened {
            Ok(files) => files,
            Err(e) => {
                group.remove_blocking();
                return Err(e);
            }
        };
        let mut cell = Cell {
            group,
            entry,
            counters,
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

impl Counters {
    fn open(group: &RunCgroup) -> io::Result<Counters> {
        let files = group.memory_files();
        let (usage, peak, events) = match group.memory_dir() {
            Some(d) => (
                Some(File::open(d.join(files.usage))?),
                // v2 before 6.12: a read-only `memory.peak` (no per-run peak then).
                File::options()
                    .read(true)
                    .write(true)
                    .open(d.join(files.peak))
                    .ok(),
                Some(File::open(d.join(files.events))?),
            ),
            None => (None, None, None),
        };
        let tasks = match (group.pids_dir(), group.first_dir()) {
            (Some(d), _) => Some((File::open(d.join("pids.current"))?, true)),
            (None, Some(d)) => Some((File::open(d.join("cgroup.procs"))?, false)),
            (None, None) => None,
        };
        Ok(Counters {
            usage,
            peak,
            events,
            tasks,
        })
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
        if let Some((file, counted)) = &self.counters.tasks {
            let text = read_text(file).ok_or_else(|| io::Error::other("unreadable group"))?;
            let left = match counted {
                true => text.trim() != "0",
                false => !text.trim().is_empty(),
            };
            if left {
                return Err(io::Error::other("processes left in the group"));
            }
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
        let reset: &[u8] = if self.group.is_v2() { b"reset" } else { b"0" };
        self.peak_reset = self
            .counters
            .peak
            .as_ref()
            .is_some_and(|f| f.write_at(reset, 0).is_ok());
        self.usage_base = self.usage().unwrap_or(0);
        self.oom_base = self.oom_kills().unwrap_or(0);
    }

    fn usage(&self) -> Option<u64> {
        read_number(self.counters.usage.as_ref()?)
    }

    fn oom_kills(&self) -> Option<u64> {
        oom_kills(&read_text(self.counters.events.as_ref()?)?)
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
        let peak = match cell.peak_reset {
            true => cell.counters.peak.as_ref().and_then(read_number),
            false => None,
        };
        let oom = cell.oom_kills().is_some_and(|n| n > cell.oom_base);
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

/// An open cgroup file's text, read again from its start.
fn read_text(f: &File) -> Option<String> {
    let mut buf = [0u8; 512];
    let n = f.read_at(&mut buf, 0).ok()?;
    String::from_utf8(buf[..n].to_vec()).ok()
}

fn read_number(f: &File) -> Option<u64> {
    read_text(f)?.trim().parse().ok()
}
