//! The seccomp filters installed last in the child, compiled once with `seccompiler`.
//!
//! Two stacked programs: the deny list (`EPERM`) and `clone3 -> ENOSYS`. `clone3` passes its flags
//! in memory that seccomp cannot inspect, so libc is made to fall back to `clone`, whose flags the
//! deny list checks for `CLONE_NEW*`.

use std::collections::BTreeMap;
use std::sync::Arc;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Syscalls no sandboxed program needs: debugging other processes, changing mounts or
/// namespaces, kernel keyrings, BPF, perf, userfaultfd, io_uring, modules, clocks, reboot.
const DENIED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_syslog,
    libc::SYS_vhangup,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_iopl,
    libc::SYS_ioperm,
    libc::SYS_personality,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
];

const CLONE_NEW_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWTIME as u64,
];

/// A compiled program, in the kernel's `sock_filter` layout.
pub(crate) type Program = Arc<Vec<libc::sock_filter>>;

fn arch() -> Result<TargetArch, String> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|e| format!("{e:?}"))
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value).map_err(|e| e.to_string())
}

fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conds).map_err(|e| e.to_string())
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    action: SeccompAction,
) -> Result<Program, String> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, arch()?)
        .map_err(|e| e.to_string())?;
    let prog: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    Ok(Arc::new(
        prog.into_iter()
            .map(|f| libc::sock_filter {
                code: f.code,
                jt: f.jt,
                jf: f.jf,
                k: f.k,
            })
            .collect(),
    ))
}

/// Builds the filters. `allow_inet`: keep IP sockets (only when nothing else blocks the network
/// would this be needed; by default only `AF_UNIX` sockets are allowed).
pub(crate) fn build() -> Result<Vec<Program>, String> {
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &nr in DENIED {
        deny.insert(nr, vec![]);
    }
    let mut clone_rules = Vec::new();
    for &flag in CLONE_NEW_FLAGS {
        clone_rules.push(rule(vec![cond(0, SeccompCmpOp::MaskedEq(flag), flag)?])?);
    }
    deny.insert(libc::SYS_clone, clone_rules);
    deny.insert(
        libc::SYS_socket,
        vec![rule(vec![cond(
            0,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )?])?],
    );
    deny.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![cond(
                1,
                SeccompCmpOp::MaskedEq(0xffff_ffff),
                libc::TIOCSTI,
            )?])?,
            rule(vec![cond(
                1,
                SeccompCmpOp::MaskedEq(0xffff_ffff),
                libc::TIOCLINUX,
            )?])?,
        ],
    );
    let deny = compile(deny, SeccompAction::Errno(libc::EPERM as u32))?;
    let mut nosys: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    nosys.insert(libc::SYS_clone3, vec![]);
    let nosys = compile(nosys, SeccompAction::Errno(libc::ENOSYS as u32))?;
    Ok(vec![deny, nosys])
}
