//! Which uid a run runs as (when the supervisor is root): one that no other live run on this host
//! has. Per-uid state is shared by every process of a uid, whatever its namespaces:
//! `RLIMIT_NPROC` counts the uid's processes host-wide (a fork bomb in one run would make another
//! run's `execve` fail), and file ownership and signal permission checks compare uids. So two live
//! runs never share one, whether they belong to one sandbox, two sandboxes of one process, or two
//! codegym processes on one host (two servers, a server and a `codegym evaluate`).
//!
//! Two levels, both exact:
//! - a uid is *leased* by this process host-wide: an open-file-description lock on byte `uid` of
//!   one host file (the first of [`LEASE_FILES`] that can be made: a read-only root file system,
//!   as in the Kubernetes manifest, has no writable `/run`). The kernel drops the lock when the
//!   process is gone, however it ends, so a crashed server never strands its uids. A process
//!   keeps its leases, so runs reuse them without a system call;
//! - a leased uid is *held* by one live run at a time ([`RunUid`]), and goes back when the run's
//!   whole tree is gone (its guard drops after the kill and reap; a warm run's when the fork server
//!   reports its end).
//!
//! When every uid of the range is held or leased elsewhere, the run fails (a setup error: the
//! caller may retry) instead of sharing one.

use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Mutex;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, fcntl};

/// Where every codegym process on the host locks its runs' uids: the first whose directory is
/// writable. Each process of one environment sees the same file systems, so all choose the same.
pub(crate) const LEASE_FILES: [&str; 2] = ["/run/codegym/uids.lock", "/dev/shm/codegym-uids.lock"];

/// A uid held by one live run; dropping it gives the uid back to this process's leased pool.
#[derive(Debug)]
pub(crate) struct RunUid(u32);

impl RunUid {
    pub fn get(&self) -> u32 {
        self.0
    }
}

impl Drop for RunUid {
    fn drop(&mut self) {
        // A poisoned pool still frees the uid: the lock only guards plain sets.
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        pool.held.remove(&self.0);
        pool.free.insert(self.0);
    }
}

/// This process's uids: leased and free, or held by a run (`held` and `free` are disjoint, and
/// together are every uid this process has leased).
struct Pool {
    file: Option<(File, &'static str)>,
    free: BTreeSet<u32>,
    held: BTreeSet<u32>,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    file: None,
    free: BTreeSet::new(),
    held: BTreeSet::new(),
});

/// A uid of `base..base + count` for one run: one this process leased and no run holds, else a
/// new lease.
pub(crate) fn acquire(base: u32, count: u32) -> io::Result<RunUid> {
    let end = base.saturating_add(count.max(1));
    let mut guard = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let Pool { file, free, held } = &mut *guard;
    if let Some(&uid) = free.range(base..end).next() {
        free.remove(&uid);
        held.insert(uid);
        return Ok(RunUid(uid));
    }
    let (file, path) = opened(file)?;
    let span = end - base;
    // A random first candidate: processes leasing at once then rarely try the same uids.
    let start = rand::random_range(0..span);
    for i in 0..span {
        let uid = base + (start + i) % span;
        if held.contains(&uid) || free.contains(&uid) {
            continue;
        }
        if try_lease(file, path, uid)? {
            held.insert(uid);
            tracing::debug!(uid, "uid leased");
            return Ok(RunUid(uid));
        }
    }
    Err(io::Error::other(format!(
        "every uid of {base}..{end} is in use by a live run ({} of this process; the rest leased \
         by other codegym processes on this host, in {path}): raise the sandbox's uid_count or \
         move uid_base",
        held.range(base..end).count()
    )))
}

/// The host's lease file, made if need be (what `codegym doctor` shows of the uid layer).
pub(crate) fn lease_file() -> io::Result<&'static str> {
    let mut guard = POOL.lock().unwrap_or_else(|e| e.into_inner());
    opened(&mut guard.file).map(|(_, path)| *path)
}

/// This process's lease file, opened once.
fn opened<'a>(file: &'a mut Option<(File, &'static str)>) -> io::Result<&'a (File, &'static str)> {
    match file {
        Some(opened) => Ok(opened),
        None => Ok(file.insert(open_lease_file()?)),
    }
}

/// The first lease file that can be opened; a location that exists but is not root's own is an
/// error, never a reason to try the next (two processes would then lock different files).
fn open_lease_file() -> io::Result<(File, &'static str)> {
    open_first(&LEASE_FILES)
}

fn open_first(candidates: &[&'static str]) -> io::Result<(File, &'static str)> {
    let mut skipped = Vec::new();
    for &path in candidates {
        match open_one(Path::new(path)) {
            Ok(file) => return Ok((file, path)),
            Err(e) if unwritable(&e) => skipped.push(format!("{path}: {e}")),
            Err(e) => return Err(io::Error::new(e.kind(), format!("{path}: {e}"))),
        }
    }
    Err(io::Error::other(format!(
        "no uid lease file can be made ({})",
        skipped.join("; ")
    )))
}

/// The errors of a location this environment does not offer (read-only, or absent).
fn unwritable(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ReadOnlyFilesystem
            | io::ErrorKind::PermissionDenied
            | io::ErrorKind::NotFound
    )
}

/// Opens (creating) a lease file: root's, mode 0600, never through a symlink. One in a
/// world-writable dir (`/dev/shm`) that someone else made could be replaced by them, and two
/// processes would then lock different files: refused.
fn open_one(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::MetadataExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let meta = file.metadata()?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != me || meta.mode() & 0o077 != 0 || meta.nlink() != 1 {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "not this user's private lease file (owner {}, mode {:o}, {} links): remove it",
                meta.uid(),
                meta.mode() & 0o7777,
                meta.nlink()
            ),
        ));
    }
    Ok(file)
}

/// Takes the host-wide lease on `uid` (a write lock on its byte, owned by the open file
/// description, so by this process while it lives); false when another process holds it.
fn try_lease(file: &File, path: &str, uid: u32) -> io::Result<bool> {
    let lock = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: libc::off_t::from(uid),
        l_len: 1,
        l_pid: 0,
    };
    match fcntl(file, FcntlArg::F_OFD_SETLK(&lock)) {
        Ok(_) => Ok(true),
        Err(Errno::EAGAIN | Errno::EACCES) => Ok(false),
        Err(e) => Err(io::Error::other(format!(
            "lease of uid {uid} in {path}: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Tests of this module share the process's pool (and, as root, the host's lease file): each
    // uses a range of its own.
    #[test]
    fn a_held_uid_is_never_handed_out_again_until_dropped() {
        let base = 3_900_000 + (std::process::id() % 1000) * 100;
        let a = acquire(base, 3).expect("first");
        let b = acquire(base, 3).expect("second");
        let c = acquire(base, 3).expect("third");
        let all: BTreeSet<u32> = [a.get(), b.get(), c.get()].into();
        assert_eq!(all.len(), 3, "three live runs, three uids: {all:?}");
        assert!(all.iter().all(|u| (base..base + 3).contains(u)));
        let full = acquire(base, 3).expect_err("a fourth run while three hold the range");
        assert!(full.to_string().contains("every uid of"), "{full}");
        let freed = b.get();
        drop(b);
        assert_eq!(acquire(base, 3).expect("after a drop").get(), freed);
    }

    #[test]
    fn the_lease_file_is_the_first_location_offered_and_only_a_private_one() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("codegym-uids-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let leak = |p: std::path::PathBuf| -> &'static str {
            Box::leak(p.display().to_string().into_boxed_str())
        };
        // Nothing can be made under /proc: the next location serves.
        let good = leak(dir.join("a/uids.lock"));
        let (_, chosen) = open_first(&["/proc/codegym-none/uids.lock", good]).expect("second");
        assert_eq!(chosen, good);
        let mode = std::fs::metadata(good).expect("made").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // A file anyone may write is refused, and never skipped for the next location.
        let open = leak(dir.join("open.lock"));
        std::fs::write(open, b"").expect("file");
        std::fs::set_permissions(open, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let e = open_first(&[open, good]).expect_err("a world-writable lease file");
        assert!(e.to_string().contains("private lease file"), "{e}");
        // So is a symlink to the good one.
        let link = leak(dir.join("link.lock"));
        std::os::unix::fs::symlink(good, link).expect("symlink");
        assert!(
            open_first(&[link, good]).is_err(),
            "a lease file through a symlink"
        );
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
