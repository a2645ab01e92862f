//! The seccomp filter installed last in the child: one classic-BPF program, generated here (on the
//! warm backend the same filter in two stacked parts, the fork server's and each child's: see
//! [`build_for_fork_server`]).
//!
//! What it does: the deny list (`EPERM`), `clone` with any `CLONE_NEW*` flag (`EPERM`), sockets
//! other than `AF_UNIX` (`EPERM`), the terminal-injection ioctls (`EPERM`), and `clone3 -> ENOSYS`
//! (`clone3` passes its flags in memory that seccomp cannot inspect, so libc is made to fall back
//! to `clone`, whose flags are checked). Any other architecture's syscalls kill the process.
//!
//! Why not `seccompiler` (what this file used until issue 17): its programs test the syscall
//! number linearly, one comparison per listed syscall. Attaching a filter makes the kernel emulate
//! it once per syscall number to build its allow cache (under the signal lock, ~460 numbers), and
//! every run attaches it: with the linear programs that was ~8% of a trivial run's CPU on the warm
//! backend. Here the number is found by binary search (about 7 comparisons instead of up to 55),
//! in one program instead of two. `seccompiler` stays as the reference in the tests: both
//! programs give the same verdict for every syscall and argument the tests try.

use std::sync::Arc;

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

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

/// `struct seccomp_data` offsets: the number, the architecture, and each argument's halves.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
fn off_arg(i: u32, high: bool) -> u32 {
    let (lo, hi) = if cfg!(target_endian = "little") {
        (0, 4)
    } else {
        (4, 0)
    };
    16 + 8 * i + if high { hi } else { lo }
}

/// The `AUDIT_ARCH_*` of this build's target; syscalls of any other ABI are killed.
fn audit_arch() -> Result<u32, String> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(0xC000_003E),
        "aarch64" => Ok(0xC000_00B7),
        "riscv64" => Ok(0xC000_00F3),
        other => Err(format!("no seccomp filter for architecture {other}")),
    }
}

/// Where a jump goes: a fixed verdict, or the argument check of one syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Allow,
    Deny,
    NoSys,
    Kill,
    Clone,
    Socket,
    Ioctl,
}

/// An instruction whose jumps name targets; resolved to offsets once the layout is known.
#[derive(Debug, Clone, Copy)]
enum Insn {
    Load(u32),
    /// `op k`: to `then` when true, else to the next instruction or `otherwise`.
    Jump {
        op: u16,
        k: u32,
        then: Label,
        otherwise: Label,
    },
    Ret(u32),
}

/// A jump destination: the next instruction, a verdict or argument block, or a tree node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    Next,
    To(Target),
    Node(usize),
}

struct Builder {
    code: Vec<Insn>,
    /// Start of each tree node, by node id.
    nodes: Vec<usize>,
}

impl Builder {
    /// Emits the search over `keys` (sorted by number) and returns its label. Nodes are emitted
    /// before their subtrees: classic BPF only jumps forward.
    fn tree(&mut self, keys: &[(u32, Target)]) -> Label {
        let id = self.nodes.len();
        self.nodes.push(self.code.len());
        match keys {
            [] => self.code.push(Insn::Ret(RET_ALLOW)),
            [(nr, target)] => self.code.push(Insn::Jump {
                op: JEQ_K,
                k: *nr,
                then: Label::To(*target),
                otherwise: Label::To(Target::Allow),
            }),
            _ => {
                let mid = keys.len() / 2;
                let at = self.code.len();
                self.code.push(Insn::Ret(0)); // placeholder for the split
                let left = self.tree(&keys[..mid]);
                let right = self.tree(&keys[mid..]);
                debug_assert_eq!(left, Label::Node(id + 1));
                self.code[at] = Insn::Jump {
                    op: JGE_K,
                    k: keys[mid].0,
                    then: right,
                    otherwise: Label::Next,
                };
            }
        }
        Label::Node(id)
    }
}

/// The argument checks, each ending in a verdict.
fn argument_block(target: Target) -> Vec<Insn> {
    let deny = Label::To(Target::Deny);
    let allow = Label::To(Target::Allow);
    match target {
        // Any namespace flag: the flags are all in the low half.
        Target::Clone => vec![
            Insn::Load(off_arg(0, false)),
            Insn::Jump {
                op: JSET_K,
                k: CLONE_NEW_FLAGS.iter().fold(0u64, |a, f| a | f) as u32,
                then: deny,
                otherwise: allow,
            },
        ],
        // Only `AF_UNIX` (the whole 64-bit value, as `seccompiler`'s `Ne` compared it).
        Target::Socket => vec![
            Insn::Load(off_arg(0, true)),
            Insn::Jump {
                op: JEQ_K,
                k: 0,
                then: Label::Next,
                otherwise: deny,
            },
            Insn::Load(off_arg(0, false)),
            Insn::Jump {
                op: JEQ_K,
                k: libc::AF_UNIX as u32,
                then: allow,
                otherwise: deny,
            },
        ],
        // The request is an `unsigned int`: the low half.
        Target::Ioctl => vec![
            Insn::Load(off_arg(1, false)),
            Insn::Jump {
                op: JEQ_K,
                k: libc::TIOCSTI as u32,
                then: deny,
                otherwise: Label::Next,
            },
            Insn::Jump {
                op: JEQ_K,
                k: libc::TIOCLINUX as u32,
                then: deny,
                otherwise: allow,
            },
        ],
        Target::Allow => vec![Insn::Ret(RET_ALLOW)],
        Target::Deny => vec![Insn::Ret(RET_ERRNO | libc::EPERM as u32)],
        Target::NoSys => vec![Insn::Ret(RET_ERRNO | libc::ENOSYS as u32)],
        Target::Kill => vec![Insn::Ret(RET_KILL_PROCESS)],
    }
}

/// What the warm backend's fork server and each child's setup still call (a run's PID namespace
/// is entered with `unshare` + `setns`, its mount namespace made with `unshare`, its `/proc` with
/// `mount`); see [`build_for_fork_server`].
const FORK_SERVER_NEEDS: &[libc::c_long] = &[libc::SYS_unshare, libc::SYS_setns, libc::SYS_mount];

/// Every syscall the filter decides on, with its verdict.
fn keys() -> Vec<(u32, Target)> {
    let mut keys: Vec<(u32, Target)> = DENIED.iter().map(|&nr| (nr as u32, Target::Deny)).collect();
    keys.push((libc::SYS_clone as u32, Target::Clone));
    keys.push((libc::SYS_socket as u32, Target::Socket));
    keys.push((libc::SYS_ioctl as u32, Target::Ioctl));
    keys.push((libc::SYS_clone3 as u32, Target::NoSys));
    keys.sort_unstable_by_key(|k| k.0);
    keys.dedup_by_key(|k| k.0);
    keys
}

/// Builds the filter (one program; a `Vec` so that stacking more stays possible).
pub(crate) fn build() -> Result<Vec<Program>, String> {
    Ok(vec![compile(&keys(), true)?])
}

/// The same filter in two stacked parts for the warm backend: `(server, child)`. The fork server
/// installs `server` on itself once (everything but [`FORK_SERVER_NEEDS`]), so every child
/// inherits it; each child adds `child` (those few syscalls) last, as before. The kernel applies
/// the most restrictive verdict of a stack, so a child ends with exactly [`build`]'s filter
/// (tested), and the server itself runs filtered too. Why (issue 17): attaching a filter makes
/// the kernel translate it to eBPF, JIT it and emulate it for every syscall number, ~2.4% of a
/// trivial run's CPU for the whole program; a three-syscall program costs a fraction of that.
pub(crate) fn build_for_fork_server() -> Result<(Program, Program), String> {
    let (child, server): (Vec<_>, Vec<_>) = keys()
        .into_iter()
        .partition(|(nr, _)| FORK_SERVER_NEEDS.iter().any(|&n| n as u32 == *nr));
    Ok((compile(&server, true)?, compile(&child, false)?))
}

/// One program deciding `keys` (sorted by number), everything else allowed.
/// `abi_checks`: kill other architectures' syscalls and deny x32's first (a part stacked on a
/// filter that does this already leaves it out).
fn compile(keys: &[(u32, Target)], abi_checks: bool) -> Result<Program, String> {
    let mut b = Builder {
        code: Vec::new(),
        nodes: Vec::new(),
    };
    if abi_checks {
        b.code.push(Insn::Load(OFF_ARCH));
        b.code.push(Insn::Jump {
            op: JEQ_K,
            k: audit_arch()?,
            then: Label::Next,
            otherwise: Label::To(Target::Kill),
        });
    }
    b.code.push(Insn::Load(OFF_NR));
    if abi_checks && cfg!(target_arch = "x86_64") {
        // The x32 ABI shares x86_64's audit arch with bit 30 set in the number.
        b.code.push(Insn::Jump {
            op: JGE_K,
            k: 0x4000_0000,
            then: Label::To(Target::Deny),
            otherwise: Label::Next,
        });
    }
    b.tree(keys);
    let mut starts = Vec::new();
    // Argument checks first: they end in verdicts, and jumps only go forward.
    // (Only the blocks something jumps to: every instruction is work when the kernel attaches it.)
    for target in [
        Target::Clone,
        Target::Socket,
        Target::Ioctl,
        Target::Allow,
        Target::Deny,
        Target::NoSys,
        Target::Kill,
    ] {
        let used = match target {
            Target::Allow | Target::Deny => true,
            Target::Kill => abi_checks,
            _ => keys.iter().any(|k| k.1 == target),
        };
        if !used {
            continue;
        }
        starts.push((target, b.code.len()));
        b.code.extend(argument_block(target));
    }
    let at = |label: Label, i: usize| -> Result<u8, String> {
        let dest = match label {
            Label::Next => i + 1,
            Label::Node(n) => b.nodes[n],
            Label::To(t) => starts
                .iter()
                .find(|(s, _)| *s == t)
                .map(|(_, at)| *at)
                .unwrap_or(0),
        };
        dest.checked_sub(i + 1)
            .and_then(|d| u8::try_from(d).ok())
            .ok_or_else(|| format!("seccomp program: jump from {i} to {dest} out of range"))
    };
    let mut out = Vec::with_capacity(b.code.len());
    for (i, insn) in b.code.iter().enumerate() {
        out.push(match *insn {
            Insn::Load(off) => libc::sock_filter {
                code: LD_W_ABS,
                jt: 0,
                jf: 0,
                k: off,
            },
            Insn::Ret(k) => libc::sock_filter {
                code: RET_K,
                jt: 0,
                jf: 0,
                k,
            },
            Insn::Jump {
                op,
                k,
                then,
                otherwise,
            } => libc::sock_filter {
                code: op,
                jt: at(then, i)?,
                jf: at(otherwise, i)?,
                k,
            },
        });
    }
    Ok(Arc::new(out))
}

#[cfg(test)]
mod tests;
