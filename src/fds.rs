//! File-descriptor setup for the whole process, done once by `main` (of `codegym` and of
//! `codegym-bench`) while it is still the only thread.
//!
//! Linux grows a process's descriptor table by doubling it, and when several threads share the
//! table every growth first waits for an RCU grace period (`expand_files` -> `synchronize_rcu`):
//! 8-20 ms on our 2-core VM, during which every thread that opens a socket, pipe or file sleeps.
//! The rollout engine at concurrency 256 crossed 64, 128 and 256 descriptors in its first round
//! and both CPUs sat idle for ~25 ms of it (the fake model server, same binary, stalled on its
//! `accept`s the same way); a server accepting many clients or running many sandboxes at once
//! grows through the same steps. A single-threaded process grows its table without a grace period,
//! so [`prepare`] does it up front, once.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Descriptors the table is sized for up front when the limit allows: about 0.5 MiB of kernel
/// memory, enough for thousands of connections and sandboxes in flight.
const PRESIZED: u64 = 65_536;

/// The soft limit is raised at most this far: some containers set a hard limit of 2^30, and child
/// processes that loop over every possible descriptor would pay for it.
const SOFT_LIMIT_CAP: u64 = 1 << 20;

/// What [`prepare`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdSetup {
    /// The soft `RLIMIT_NOFILE` before and after (raised towards the hard limit).
    pub soft_limit: (u64, u64),
    /// Descriptors the table holds without growing again.
    pub table: u64,
}

/// Raises the soft descriptor limit to the hard one, up to `SOFT_LIMIT_CAP` (rollouts hold one
/// connection per episode in flight, and the common soft limit of 1024 would end a run at
/// concurrency ~1,000 with EMFILE; sandboxed programs get their own, low limit), and grows the
/// descriptor table to `min(limit, PRESIZED)` entries. Must run before any thread is started.
pub fn prepare() -> std::io::Result<FdSetup> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    let wanted = hard.min(SOFT_LIMIT_CAP);
    let raised = if soft < wanted {
        setrlimit(Resource::RLIMIT_NOFILE, wanted, hard).map_or(soft, |()| wanted)
    } else {
        soft
    };
    let table = raised.min(PRESIZED);
    if table > 0 {
        // Duplicating a descriptor (not stdin: it may be closed) into the table's last slot makes
        // the kernel size the table for it; closing the duplicate keeps the table, which never
        // shrinks.
        let any = std::fs::File::open("/dev/null")?;
        let highest = i32::try_from(table - 1).unwrap_or(i32::MAX);
        let dup = nix::fcntl::fcntl(&any, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(highest))?;
        nix::unistd::close(dup)?;
    }
    Ok(FdSetup {
        soft_limit: (soft, raised),
        table,
    })
}

/// [`prepare`], reported as a tracing event: what it did (debug), or why it could not (a warning:
/// the process still works, it only pays the grace periods).
fn prepare_and_report() {
    match prepare() {
        Ok(setup) => tracing::debug!(?setup, "descriptor limit and table"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the descriptor limit or pre-size the table")
        }
    }
}

/// The multi-thread tokio runtime of a `codegym` process, started after [`prepare_and_report`]:
/// the descriptor table is grown while `main` is still the only thread.
pub fn start_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    prepare_and_report();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raises_the_soft_limit_to_the_hard_one_and_grows_the_table() {
        // The test harness already runs threads, so this checks the effect, not the grace period.
        let setup = prepare().expect("prepare");
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
        assert!(soft >= hard.min(SOFT_LIMIT_CAP), "soft {soft}, hard {hard}");
        assert_eq!(setup.soft_limit.1, soft);
        assert_eq!(setup.table, soft.min(PRESIZED));
        // The table's size is visible as the FDSize line of /proc/self/status.
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let size: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("FDSize:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("FDSize");
        assert!(size >= setup.table, "FDSize {size} < {}", setup.table);
    }
}
