//! Probing the isolation layers once ([`Layers`], [`IsolationReport`]): namespaces, uid drop,
//! seccomp, Landlock, cgroups, and the mount plan that hides host dirs. (The start-up self-test,
//! which runs a program through the chosen backend, is `Sandbox::new`'s.)

use std::path::{Path, PathBuf};

use super::cgroup::{self, CgroupRoot};
use super::child::{MountOp, cstr};
use super::config::SandboxConfig;
use super::isolation::{self, IsolationReport, Layer};
use super::python::PythonInfo;
use super::seccomp;
use super::uids;

/// Host dirs hidden behind an empty tmpfs in the child's mount namespace.
const HIDDEN: &[&str] = &[
    "/root", "/home", "/tmp", "/var/tmp", "/dev/shm", "/run", "/work", "/mnt", "/srv", "/media",
    "/opt",
];

/// The layers this machine supports, probed once.
#[derive(Clone)]
pub(crate) struct Layers {
    pub clone_flags: u64,
    pub mounts: Vec<MountOp>,
    pub drop_uid: bool,
    pub seccomp: Vec<seccomp::Program>,
    pub landlock: bool,
    pub cgroup: Option<CgroupRoot>,
}

/// Mount steps: private propagation, a fresh /proc, hidden host dirs with the Python install bound
/// back read-only and the work root (which may lie in a hidden dir, e.g. `/dev/shm`) bound back
/// writable: a run sees nothing else of a hidden dir, such as the host's POSIX shared memory or
/// other sandboxes' work roots.
fn mount_plan(python: &PythonInfo, work_root: &Path, pid_ns: bool) -> Option<Vec<MountOp>> {
    let mut ops = vec![MountOp::MakePrivate];
    if pid_ns {
        ops.push(MountOp::Proc);
    }
    // (tree, read-only)
    let mut trees: Vec<(PathBuf, bool)> =
        python.prefixes.iter().map(|p| (p.clone(), true)).collect();
    if let Some(bin) = python.exe.parent()
        && !trees.iter().any(|(t, _)| bin.starts_with(t))
    {
        trees.push((bin.to_path_buf(), true));
    }
    trees.push((work_root.to_path_buf(), false));
    for hidden in HIDDEN {
        let h = Path::new(hidden);
        let Ok(real) = h.canonicalize() else { continue };
        if real != h || !real.is_dir() {
            continue; // a symlink (e.g. /run -> /var/run)
        }
        let inside: Vec<&(PathBuf, bool)> =
            trees.iter().filter(|(t, _)| t.starts_with(h)).collect();
        let first = ops.iter().filter(|o| matches!(o, MountOp::Hold(_))).count();
        for (t, _) in &inside {
            ops.push(MountOp::Hold(cstr(t)?));
        }
        ops.push(MountOp::Tmpfs(cstr(h)?));
        let mut made: Vec<PathBuf> = Vec::new();
        for (i, (t, read_only)) in inside.iter().enumerate() {
            let mut cur = h.to_path_buf();
            for c in t.strip_prefix(h).ok()?.components() {
                cur.push(c);
                if !made.contains(&cur) {
                    made.push(cur.clone());
                    ops.push(MountOp::Mkdir(cstr(&cur)?));
                }
            }
            ops.push(MountOp::Bind {
                held: first + i,
                dst: cstr(t)?,
                read_only: *read_only,
            });
        }
    }
    Some(ops)
}

/// Probes every layer; never fails (missing layers are reported).
pub(crate) fn probe(
    config: &SandboxConfig,
    python: &PythonInfo,
    work_root: &Path,
    tag: &str,
) -> (Layers, IsolationReport) {
    let mut report = vec![
        Layer {
            name: "process",
            active: true,
            detail: "one fresh interpreter per execution".into(),
        },
        Layer {
            name: "rlimits",
            active: true,
            detail: "CPU, FSIZE, NOFILE, NPROC, CORE=0 (AS without memory cgroup)".into(),
        },
        Layer {
            name: "environment",
            active: true,
            detail: "cleared: PATH HOME TMPDIR LANG only".into(),
        },
        Layer {
            name: "wall-clock kill",
            active: true,
            detail: "SIGKILL of the whole tree at the deadline".into(),
        },
    ];
    let mut layer = |name: &'static str, r: Result<String, String>| {
        let active = r.is_ok();
        report.push(Layer {
            name,
            active,
            detail: r.unwrap_or_else(|e| e),
        });
        active
    };
    let ns = |flag: libc::c_int| {
        // `raw_fork` falls back to `clone` where `clone3` is ENOSYS (Docker's default seccomp
        // profile): the error is whichever call refused the namespace.
        isolation::can_clone(flag as u64).map_err(|e| format!("clone3/clone refused: {e}"))
    };
    let mut flags = 0u64;
    let pid_ns = layer(
        "pid namespace",
        ns(libc::CLONE_NEWPID).map(|()| "tree dies with the main process".into()),
    );
    if pid_ns {
        flags |= libc::CLONE_NEWPID as u64;
    }
    if layer(
        "network namespace",
        ns(libc::CLONE_NEWNET).map(|()| "no interfaces but a down loopback".into()),
    ) {
        flags |= libc::CLONE_NEWNET as u64;
    }
    if layer(
        "ipc/uts namespace",
        ns(libc::CLONE_NEWIPC | libc::CLONE_NEWUTS)
            .map(|()| "private SysV IPC and hostname".into()),
    ) {
        flags |= (libc::CLONE_NEWIPC | libc::CLONE_NEWUTS) as u64;
    }
    let mounts = ns(libc::CLONE_NEWNS).and_then(|()| {
        mount_plan(python, work_root, pid_ns).ok_or_else(|| "unrepresentable path".to_string())
    });
    let mounts = match mounts {
        Ok(ops) => {
            layer(
                "mount namespace",
                Ok(format!("host dirs hidden: {}", HIDDEN.join(" "))),
            );
            flags |= libc::CLONE_NEWNS as u64;
            ops
        }
        Err(e) => {
            layer("mount namespace", Err(e));
            Vec::new()
        }
    };
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let drop_uid = layer(
        "uid drop",
        if root {
            // Where the leases are; a lease file that cannot be made fails every run (never a
            // run as root), which this says before the first one does. Host-wide only where the
            // file is the host's (a container must mount it), so it says who shares it.
            let leases = match uids::lease_file() {
                Ok(path) => format!("leased in {path}, with every codegym process that sees it"),
                Err(e) => format!("NO LEASE FILE, every run fails: {e}"),
            };
            Ok(format!(
                "uids {}..{}, one per live run ({leases})",
                config.uid_base,
                config.uid_base as u64 + config.uid_count as u64
            ))
        } else {
            Err("not root: runs as the server's uid".into())
        },
    );
    let seccomp = if isolation::seccomp_available() {
        seccomp::build()
    } else {
        Err("kernel without seccomp".into())
    };
    let seccomp = match seccomp {
        Ok(p) => {
            layer(
                "seccomp",
                Ok("deny list + AF_UNIX-only sockets + clone3 -> ENOSYS".into()),
            );
            p
        }
        Err(e) => {
            layer("seccomp", Err(e));
            Vec::new()
        }
    };
    let abi = isolation::landlock_abi();
    let landlock = layer(
        "landlock",
        if abi > 0 {
            Ok(format!(
                "ABI {abi}: read system + Python, write the work dir only, no TCP"
            ))
        } else {
            Err("not supported by the kernel".into())
        },
    );
    let cgroup = cgroup::probe(tag);
    let cg_detail = match &cgroup {
        Some(c) if c.has_memory() || c.has_pids() => Ok(c.describe()),
        Some(c) => Err(format!("no memory/pids controller: {}", c.describe())),
        None => Err("no writable memory/pids cgroup".into()),
    };
    layer("cgroup", cg_detail);
    let layers = Layers {
        clone_flags: flags,
        mounts,
        drop_uid,
        seccomp,
        landlock,
        cgroup,
    };
    (layers, IsolationReport::new(report))
}
