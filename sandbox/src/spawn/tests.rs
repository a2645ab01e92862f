//! Both ways a child starts (sharing the host's address space until its exec; a fork, for a child
//! that waits to be attached to its cgroups by pid), with nothing else of the sandbox around them:
//! what the program gets (exit status, a signal mask as the host's), and how a failed setup is
//! reported.

use std::ffi::CString;
use std::os::fd::OwnedFd;

use super::*;

fn devnull() -> OwnedFd {
    std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .expect("/dev/null")
        .into()
}

fn plan(argv: &[&str], stdout: OwnedFd, cgroup: Join) -> ChildPlan {
    let argv: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(*a).expect("arg"))
        .collect();
    ChildPlan {
        program: argv[0].clone(),
        argv,
        envp: vec![c"PATH=/usr/bin:/bin".to_owned()],
        workdir: c"/".to_owned(),
        rlimits: Vec::new(),
        ids: None,
        mounts: Vec::new(),
        clone_flags: 0,
        landlock: None,
        seccomp: Vec::new(),
        stdin: devnull(),
        stdout,
        stderr: devnull(),
        extra_fds: Vec::new(),
        cgroup,
        landlock_paths: Vec::new(),
    }
}

fn wait(s: &Spawned) -> i32 {
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(s.pid, &mut status, 0) };
    status
}

/// The two kinds of child: `Join::None` shares the address space, `Join::Attach` (no groups to
/// attach to here) forks and waits on the sync pipe.
type Kind = (&'static str, fn() -> Join);

fn both() -> [Kind; 2] {
    [
        ("shared address space", || Join::None),
        ("fork", || Join::Attach(Vec::new())),
    ]
}

fn oom_score_adj() -> String {
    std::fs::read_to_string("/proc/self/oom_score_adj").expect("oom_score_adj")
}

#[test]
fn the_program_runs_with_its_exit_status_and_the_hosts_signal_mask() {
    let host_oom = oom_score_adj();
    for (kind, join) in both() {
        let spawned = spawn_now(plan(&["/bin/sh", "-c", "exit 3"], devnull(), join())).expect(kind);
        let status = wait(&spawned);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 3,
            "{kind}: {status}"
        );
        // (`grep`, not a shell: shells clear their signal mask at start-up.)
        let (r, w) = pipe_cloexec().expect("pipe");
        let argv = ["/bin/grep", "SigBlk", "/proc/self/status"];
        let spawned = spawn_now(plan(&argv, w, join())).expect(kind);
        assert_eq!(wait(&spawned), 0, "{kind}");
        let out = std::io::read_to_string(std::fs::File::from(r)).expect("output");
        // This test thread blocks nothing; the shared-address-space child starts with every
        // signal blocked and must put the mask back before its exec.
        assert_eq!(out.trim(), "SigBlk:\t0000000000000000", "{kind}");
        // Each child makes itself the OOM killer's first choice: only itself, though it shared
        // the host's memory when it did (the kernel spreads the setting over processes sharing
        // an address space, except to a vfork child's parent).
        assert_eq!(
            oom_score_adj(),
            host_oom,
            "{kind}: the host's oom_score_adj changed"
        );
    }
}

#[test]
fn a_failed_exec_is_reported_with_its_stage() {
    for (kind, join) in both() {
        let err = spawn_now(plan(&["/nonexistent/program"], devnull(), join()))
            .err()
            .unwrap_or_else(|| panic!("{kind}: a missing program started"));
        match err {
            SandboxError::Child { stage, source } => {
                assert_eq!(stage, "execve", "{kind}");
                assert_eq!(source.raw_os_error(), Some(libc::ENOENT), "{kind}");
            }
            other => panic!("{kind}: {other}"),
        }
    }
}

/// A fresh Landlock ruleset handling only file creation (so the child can still exec).
fn ruleset() -> OwnedFd {
    #[repr(C)]
    struct Attr {
        handled_access_fs: u64,
    }
    let attr = Attr {
        handled_access_fs: 1 << 8, // LANDLOCK_ACCESS_FS_MAKE_REG
    };
    // SAFETY: a valid attribute struct of the size given; the result is a new fd we own.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const Attr,
            std::mem::size_of::<Attr>(),
            0,
        )
    };
    assert!(fd >= 0, "landlock: {}", std::io::Error::last_os_error());
    // SAFETY: fresh fd from the kernel.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// Where a descriptor the child still needs sits at a number it `dup2()`s a session's control
/// pipe into (it happens when a host has few descriptors open), the run must not lose it.
#[test]
fn a_landlock_ruleset_at_a_target_fd_number_survives_the_childs_dup2s() {
    for (kind, join) in both() {
        let ruleset = ruleset();
        let target = ruleset.as_raw_fd();
        let mut p = plan(&["/bin/true"], devnull(), join());
        p.landlock = Some((ruleset, 0));
        p.extra_fds = vec![(devnull(), target)];
        let spawned = spawn_now(p).unwrap_or_else(|e| panic!("{kind}: {e}"));
        let status = wait(&spawned);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{kind}: {status}"
        );
    }
}
