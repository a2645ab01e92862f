//! How a new process gets into its run's groups, without waiting on the kernel.
//!
//! Moving *another* process into a cgroup (its pid written to `cgroup.procs` or `tasks`) takes the
//! kernel's global threadgroup lock for writing, and that lock's writer waits for an RCU grace
//! period whenever no other move happened just before: 10-20 ms on this kind of VM, on the path of
//! every fresh run, compile step and fork server start that comes alone (a busy server moves
//! often enough not to wait; one C step at a time waited twice). Moving the *calling thread* skips
//! that lock. So on v1 the spawning thread moves itself into the run's groups, clones (the child
//! is born there: nothing of it ever runs outside them), and moves back; on v2, where threads cannot
//! be moved one by one outside threaded subtrees, the parent still writes the child's pid (and the
//! child waits for it: a fork, not a `CLONE_VM` spawn, see `spawn/`).
//!
//! The spawning thread is one long-lived thread (`spawn/`); only it calls [`enter`].

use std::io;
use std::path::{Path, PathBuf};

use super::{V1_MOUNT, own_path_in};

/// How a new process gets into its run's groups (part of a spawn's plan).
#[derive(Debug, Default)]
pub(crate) enum Join {
    /// No groups.
    #[default]
    None,
    /// v1: the spawning thread enters `dirs` ([`enter`]) and clones; then each `(file, value)` of
    /// `then` is written (the limits that made room for the thread), and the thread leaves.
    Inherit {
        dirs: Vec<PathBuf>,
        then: Vec<(PathBuf, String)>,
    },
    /// v2: the child's pid is written to each `cgroup.procs` before it is released.
    Attach(Vec<PathBuf>),
}

/// The calling thread inside a run's v1 groups, until [`Entered::leave`].
#[must_use = "the thread must leave the groups again"]
pub(crate) struct Entered {
    /// The `tasks` files of the groups the thread came from.
    homes: Vec<PathBuf>,
}

/// Moves the calling thread, and only it, into each of `dirs` (v1 group dirs). On an error it is
/// back where it was.
pub(crate) fn enter(dirs: &[PathBuf]) -> io::Result<Entered> {
    // One read for every hierarchy (this runs at each spawn).
    let listing = std::fs::read_to_string("/proc/self/cgroup")?;
    let homes = dirs
        .iter()
        .map(|d| home_tasks(d, &listing))
        .collect::<io::Result<Vec<_>>>()?;
    for (i, dir) in dirs.iter().enumerate() {
        // `tasks` and "0": this thread. (`cgroup.procs` would move the whole host process.)
        if let Err(e) = std::fs::write(dir.join("tasks"), "0") {
            let _ = Entered {
                homes: homes[..i].to_vec(),
            }
            .leave();
            return Err(e);
        }
    }
    Ok(Entered { homes })
}

impl Entered {
    /// Moves the thread back to its own groups (every one is tried).
    pub(crate) fn leave(self) -> io::Result<()> {
        let mut first = None;
        for home in &self.homes {
            if let Err(e) = std::fs::write(home, "0") {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// The `tasks` file of the host process's own group (its main thread's) in the hierarchy of `dir`:
/// where the calling thread belongs, read at each spawn (so a thread that could not leave a run's
/// group goes home at the next one, and follows the process if it was moved).
fn home_tasks(dir: &Path, listing: &str) -> io::Result<PathBuf> {
    let controller = dir
        .strip_prefix(V1_MOUNT)
        .ok()
        .and_then(|rest| rest.components().next())
        .and_then(|c| c.as_os_str().to_str())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a v1 cgroup dir"))?;
    let own = own_path_in(listing, controller)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no own group in the hierarchy"))?;
    Ok(Path::new(V1_MOUNT)
        .join(controller)
        .join(own.trim_start_matches('/'))
        .join("tasks"))
}
