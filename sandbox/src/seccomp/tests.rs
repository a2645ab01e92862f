//! The generated program against `seccompiler`'s (the reference this file replaced), both run
//! through a classic-BPF interpreter on every syscall number and the interesting arguments.

use super::*;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

fn reference() -> Vec<Vec<libc::sock_filter>> {
    let cond = |arg, op, value| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value).expect("condition")
    };
    let compile = |rules: BTreeMap<i64, Vec<SeccompRule>>, action| {
        let arch = TargetArch::try_from(std::env::consts::ARCH).expect("arch");
        let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, arch).expect("filter");
        let prog: BpfProgram = filter.try_into().expect("program");
        prog.into_iter()
            .map(|f| libc::sock_filter {
                code: f.code,
                jt: f.jt,
                jf: f.jf,
                k: f.k,
            })
            .collect::<Vec<_>>()
    };
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &nr in DENIED {
        deny.insert(nr, vec![]);
    }
    let clone = CLONE_NEW_FLAGS
        .iter()
        .map(|&f| SeccompRule::new(vec![cond(0, SeccompCmpOp::MaskedEq(f), f)]).expect("rule"))
        .collect();
    deny.insert(libc::SYS_clone, clone);
    let unix = cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64);
    deny.insert(
        libc::SYS_socket,
        vec![SeccompRule::new(vec![unix]).expect("rule")],
    );
    let tty = |req| SeccompRule::new(vec![cond(1, SeccompCmpOp::MaskedEq(0xffff_ffff), req)]);
    deny.insert(
        libc::SYS_ioctl,
        vec![
            tty(libc::TIOCSTI).expect("rule"),
            tty(libc::TIOCLINUX).expect("rule"),
        ],
    );
    let mut nosys: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    nosys.insert(libc::SYS_clone3, vec![]);
    vec![
        compile(deny, SeccompAction::Errno(libc::EPERM as u32)),
        compile(nosys, SeccompAction::Errno(libc::ENOSYS as u32)),
    ]
}

/// A classic-BPF interpreter for the instructions seccomp programs use.
fn run(prog: &[libc::sock_filter], data: &[u8; 64]) -> u32 {
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    let word = |off: u32| {
        let o = off as usize;
        u32::from_ne_bytes(data[o..o + 4].try_into().expect("4 bytes"))
    };
    loop {
        let f = prog[pc];
        let src = if f.code & 0x08 != 0 { x } else { f.k };
        pc += 1;
        match f.code & 0x07 {
            0x00 => a = word(f.k), // ld
            0x01 => x = word(f.k), // ldx (unused)
            0x06 => return f.k,    // ret
            0x04 => match f.code & 0xf0 {
                // alu
                0x50 => a &= src,
                0x40 => a |= src,
                0x00 => a = a.wrapping_add(src),
                0x10 => a = a.wrapping_sub(src),
                op => panic!("alu op {op:#x}"),
            },
            0x05 => {
                let taken = match f.code & 0xf0 {
                    0x00 => {
                        pc += f.k as usize;
                        continue;
                    }
                    0x10 => a == src,
                    0x20 => a > src,
                    0x30 => a >= src,
                    0x40 => a & src != 0,
                    op => panic!("jump op {op:#x}"),
                };
                pc += usize::from(if taken { f.jt } else { f.jf });
            }
            0x07 => a = x, // misc: tax/txa (unused)
            class => panic!("class {class:#x}"),
        }
    }
}

/// The kernel's verdict for a stack of filters: the most restrictive action wins.
fn verdict(progs: &[Vec<libc::sock_filter>], data: &[u8; 64]) -> u32 {
    let rank = |v: u32| match v & 0xffff_0000 {
        0x8000_0000 => 0,
        0x0000_0000 => 1,
        0x0003_0000 => 2,
        0x0005_0000 => 3,
        _ => 9,
    };
    progs
        .iter()
        .map(|p| run(p, data))
        .min_by_key(|&v| rank(v))
        .expect("a program")
}

fn data(arch: u32, nr: u32, args: [u64; 6]) -> [u8; 64] {
    let mut d = [0u8; 64];
    d[0..4].copy_from_slice(&nr.to_ne_bytes());
    d[4..8].copy_from_slice(&arch.to_ne_bytes());
    for (i, a) in args.iter().enumerate() {
        d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
    }
    d
}

#[test]
fn same_verdicts_as_seccompiler_for_every_syscall() {
    let ours: Vec<Vec<libc::sock_filter>> =
        build().expect("build").iter().map(|p| p.to_vec()).collect();
    let theirs = reference();
    assert_eq!(ours.len(), 1, "one program");
    let arch = audit_arch().expect("arch");
    let flags: Vec<u64> = CLONE_NEW_FLAGS.to_vec();
    let mut argsets: Vec<u64> = vec![0, 1, 2, 10, libc::AF_UNIX as u64 | 1 << 32, u64::MAX];
    argsets.extend(&flags);
    argsets.push(flags.iter().fold(0, |a, f| a | f));
    argsets.push(libc::SIGCHLD as u64 | libc::CLONE_VM as u64 | libc::CLONE_THREAD as u64);
    argsets.extend([
        libc::TIOCSTI,
        libc::TIOCLINUX,
        libc::TIOCSTI | 1 << 32,
        libc::TCGETS,
    ]);
    let mut checked = 0;
    for nr in 0..1024u32 {
        for &a0 in &argsets {
            for &a1 in &argsets {
                let d = data(arch, nr, [a0, a1, 0, 0, 0, 0]);
                let (o, t) = (verdict(&ours, &d), verdict(&theirs, &d));
                assert_eq!(
                    o, t,
                    "nr {nr} args {a0:#x} {a1:#x}: ours {o:#x}, seccompiler {t:#x}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 100_000);
    // Another architecture's syscalls are killed by both.
    let other = data(0x4000_0003, libc::SYS_getpid as u32, [0; 6]);
    assert_eq!(verdict(&ours, &other), RET_KILL_PROCESS);
    assert_eq!(verdict(&theirs, &other), RET_KILL_PROCESS);
}

#[test]
fn the_fork_servers_two_parts_stack_to_the_whole_filter() {
    let whole: Vec<Vec<libc::sock_filter>> =
        build().expect("build").iter().map(|p| p.to_vec()).collect();
    let (server, child) = build_for_fork_server().expect("split");
    // The kernel runs the most recently attached filter first: the child's part.
    let stack = vec![child.to_vec(), server.to_vec()];
    let arch = audit_arch().expect("arch");
    let mut argsets: Vec<u64> = vec![0, 1, libc::AF_UNIX as u64, libc::AF_INET as u64, u64::MAX];
    argsets.extend(CLONE_NEW_FLAGS);
    argsets.extend([libc::TIOCSTI, libc::TCGETS]);
    for nr in 0..1024u32 {
        for &a0 in &argsets {
            for &a1 in &argsets {
                let d = data(arch, nr, [a0, a1, 0, 0, 0, 0]);
                assert_eq!(
                    verdict(&stack, &d),
                    verdict(&whole, &d),
                    "nr {nr} {a0:#x} {a1:#x}"
                );
            }
        }
    }
    let other = data(0x4000_0003, libc::SYS_getpid as u32, [0; 6]);
    assert_eq!(verdict(&stack, &other), RET_KILL_PROCESS);
    for nr in [0x4000_0000u32 | 39, 0x4000_0000 | libc::SYS_mount as u32] {
        let d = data(arch, nr, [0; 6]);
        assert_eq!(verdict(&stack, &d), verdict(&whole, &d), "x32 {nr:#x}");
    }
    // The server may do what it needs and nothing else of the deny list; the child's part is
    // those syscalls only.
    let deny = RET_ERRNO | libc::EPERM as u32;
    for &nr in FORK_SERVER_NEEDS {
        assert_eq!(run(&server, &data(arch, nr as u32, [0; 6])), RET_ALLOW);
        assert_eq!(run(&child, &data(arch, nr as u32, [0; 6])), deny);
    }
    for &nr in DENIED.iter().filter(|nr| !FORK_SERVER_NEEDS.contains(nr)) {
        assert_eq!(run(&server, &data(arch, nr as u32, [0; 6])), deny, "{nr}");
        assert_eq!(
            run(&child, &data(arch, nr as u32, [0; 6])),
            RET_ALLOW,
            "{nr}"
        );
    }
    assert!(child.len() < 12, "{} instructions", child.len());
}

#[test]
fn the_program_is_short_and_denies_what_it_lists() {
    let ours = build().expect("build");
    let prog = &ours[0];
    // ~2 instructions per listed syscall, against ~5 per syscall linearly.
    assert!(prog.len() < 160, "{} instructions", prog.len());
    let arch = audit_arch().expect("arch");
    let deny = RET_ERRNO | libc::EPERM as u32;
    for &nr in DENIED {
        assert_eq!(
            run(prog, &data(arch, nr as u32, [0; 6])),
            deny,
            "syscall {nr}"
        );
    }
    let nosys = RET_ERRNO | libc::ENOSYS as u32;
    assert_eq!(
        run(prog, &data(arch, libc::SYS_clone3 as u32, [0; 6])),
        nosys
    );
    assert_eq!(
        run(prog, &data(arch, libc::SYS_read as u32, [0; 6])),
        RET_ALLOW
    );
    if cfg!(target_arch = "x86_64") {
        assert_eq!(
            run(prog, &data(arch, 0x4000_0000 | 39, [0; 6])),
            deny,
            "x32 getpid"
        );
    }
}
