//! Probing which isolation layers this machine offers, the [`IsolationReport`], and the
//! per-execution Landlock ruleset.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope,
};

use super::config::IsolationLevel;

/// The newest Landlock ABI we know how to use; older kernels get a best-effort subset.
const LANDLOCK_ABI: ABI = ABI::V6;

/// One isolation layer and whether it is active.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Layer {
    pub name: &'static str,
    pub active: bool,
    /// What the layer does, or why it is missing.
    pub detail: String,
}

/// Which isolation layers a sandbox applies, and the resulting level.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IsolationReport {
    pub level: IsolationLevel,
    pub layers: Vec<Layer>,
}

impl IsolationReport {
    pub(crate) fn new(layers: Vec<Layer>) -> Self {
        let on = |n: &str| layers.iter().any(|l| l.name == n && l.active);
        let basic = on("process") && on("rlimits") && on("environment") && on("wall-clock kill");
        let strict = basic
            && on("network namespace")
            && on("seccomp")
            && (on("landlock") || on("mount namespace"))
            && (on("pid namespace") || on("cgroup"));
        let level = if strict {
            IsolationLevel::Strict
        } else if basic {
            IsolationLevel::Basic
        } else {
            IsolationLevel::None
        };
        IsolationReport { level, layers }
    }

    /// True when the named layer is active.
    pub fn is_active(&self, name: &str) -> bool {
        self.layers.iter().any(|l| l.name == name && l.active)
    }

    /// The layers that are not active.
    pub fn missing(&self) -> impl Iterator<Item = &Layer> {
        self.layers.iter().filter(|l| !l.active)
    }
}

/// What a sandbox offers, as clients and operators see it (`ListEnvs` metadata, the HTTP
/// facade's `/v1/sandbox`, `codegym doctor --json`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SandboxInfo {
    pub isolation_level: IsolationLevel,
    /// The level below which the sandbox refused to start.
    pub required_level: IsolationLevel,
    /// `warm fork` or `fresh`: how Python scripts start.
    pub backend: &'static str,
    pub layers: Vec<Layer>,
    /// The languages whose toolchains this machine has.
    pub languages: Vec<&'static str>,
}

impl std::fmt::Display for IsolationReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "isolation level: {}", self.level)?;
        for l in &self.layers {
            writeln!(
                f,
                "  [{}] {:<18} {}",
                if l.active { "x" } else { " " },
                l.name,
                l.detail
            )?;
        }
        Ok(())
    }
}

/// Tries a `clone3` with `flags` whose child exits at once.
pub(crate) fn can_clone(flags: u64) -> Result<(), std::io::Error> {
    let mut pidfd: libc::c_int = -1;
    // SAFETY: the child calls only _exit.
    let ret = unsafe { super::spawn::raw_fork(flags, &mut pidfd) };
    if ret == 0 {
        // SAFETY: in the child: leave immediately.
        unsafe { libc::_exit(0) };
    }
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: reaping our own child and closing the pidfd raw_fork gave us.
    unsafe {
        libc::waitpid(ret as i32, std::ptr::null_mut(), 0);
        libc::close(pidfd);
    }
    Ok(())
}

/// The kernel's Landlock ABI version, 0 when unavailable.
pub(crate) fn landlock_abi() -> i64 {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION query: no pointers are dereferenced.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0,
            1u32,
        )
    };
    v.max(0)
}

pub(crate) fn seccomp_available() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
}

/// Read-only system trees every Python needs.
const SYSTEM_READ: &[&str] = &[
    "/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/dev",
];
/// Device files programs may write.
const DEV_WRITE: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// Read access granted on the fresh `/proc` (added in the child, after it is mounted).
pub(crate) fn proc_access() -> u64 {
    (AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir).bits()
}

/// Landlock access on an image root's paths (`image/root.rs`): read (the image), all (`/tmp`),
/// read and write a file (the device files).
pub(crate) struct ImageRootAccess {
    pub read: u64,
    pub all: u64,
    pub device: u64,
}

/// The rights are those of the kernel's Landlock ABI (at most [`LANDLOCK_ABI`]): the child adds
/// these rules with raw syscalls to a ruleset made best-effort, and a right the kernel does not
/// know would fail the run (`EINVAL`).
pub(crate) fn image_root_access() -> ImageRootAccess {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION (1) with no attributes only returns the ABI version.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    let abi = match version {
        ..=1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        _ => LANDLOCK_ABI,
    };
    let read = AccessFs::from_read(abi);
    ImageRootAccess {
        read: read.bits(),
        all: AccessFs::from_all(abi).bits(),
        device: ((read | AccessFs::WriteFile) & AccessFs::from_file(abi)).bits(),
    }
}

/// The read-only part of every run's Landlock rules (system dirs, the interpreter's trees, the
/// writable device files), opened once per sandbox: each run then opens only its work dir, instead
/// of opening and checking ~15 paths (~60 syscalls) on its critical path (issue 17). An `O_PATH`
/// descriptor pins the directory it was opened on; these dirs are not replaced under a server.
pub(crate) struct LandlockBase {
    rules: Vec<(PathFd, landlock::BitFlags<AccessFs>)>,
}

impl LandlockBase {
    pub(crate) fn new(python_trees: &[PathBuf]) -> LandlockBase {
        let read = AccessFs::from_read(LANDLOCK_ABI);
        let mut rules = Vec::new();
        let mut add = |path: &Path, access: landlock::BitFlags<AccessFs>| {
            // A missing system dir (e.g. /lib32) is fine.
            if let Ok(fd) = PathFd::new(path) {
                let access = if path.is_dir() {
                    access
                } else {
                    access & AccessFs::from_file(LANDLOCK_ABI)
                };
                rules.push((fd, access));
            }
        };
        for p in SYSTEM_READ {
            add(Path::new(p), read);
        }
        for p in python_trees {
            add(p, read);
        }
        for p in DEV_WRITE {
            add(Path::new(p), read | AccessFs::WriteFile);
        }
        LandlockBase { rules }
    }
}

/// A run's Landlock ruleset: read the system and the Python install (`base`), write only
/// `workdir`, no TCP, no signals or abstract sockets outside the sandbox. Returns the ruleset fd.
pub(crate) fn landlock_ruleset(
    workdir: &Path,
    base: &LandlockBase,
) -> Result<Option<OwnedFd>, String> {
    let abi = LANDLOCK_ABI;
    let all = AccessFs::from_all(abi);
    let err = |e: landlock::RulesetError| e.to_string();
    let own = PathFd::new(workdir).map_err(|e| e.to_string())?;
    let rules = base
        .rules
        .iter()
        .map(|(fd, access)| PathBeneath::new(fd, *access))
        .chain(std::iter::once(PathBeneath::new(&own, all)));
    let ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(err)?
        .handle_access(AccessNet::from_all(abi))
        .map_err(err)?
        .scope(Scope::from_all(abi))
        .map_err(err)?
        .create()
        .map_err(err)?
        .add_rules(rules.map(Ok::<_, landlock::RulesetError>))
        .map_err(err)?;
    Ok(ruleset.into())
}
