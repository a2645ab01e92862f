//! Escape attempts: secrets, host files, /proc, the network, other processes, privileges.

use std::time::Duration;

use codegym_sandbox::ExecRequest;

use super::fixture::{Fixture, SECRET};

#[tokio::test]
async fn host_secrets_are_unreadable() {
    let f = Fixture::new();
    let src = r#"
import os
for p in ['/etc/shadow', '/proc/1/environ', f'/proc/{os.getppid()}/environ', '/proc/self/environ',
          '/work/main/Cargo.toml', '/root/.bashrc', '/root/.cargo/credentials.toml']:
    try:
        data = open(p, 'rb').read()
        print(p, 'READ', len(data), data.replace(b'\0', b' ')[:2000])
    except OSError as e:
        print(p, 'denied', type(e).__name__)
print(sorted(os.environ))
"#;
    let o = f.run(src).await;
    let out = o.stdout.as_str();
    assert!(out.contains("/etc/shadow denied"), "{out}");
    assert!(out.contains("/work/main/Cargo.toml denied"), "{out}");
    assert!(out.contains("/root/.bashrc denied"), "{out}");
    assert!(!out.contains(SECRET));
    assert!(!out.contains("CODEGYM_TEST_SECRET"), "{out}");
    let env_line = out.lines().last().unwrap_or_default();
    for key in ["HOME", "PATH", "TMPDIR", "LANG"] {
        assert!(env_line.contains(key), "{env_line}");
    }
}

#[tokio::test]
async fn proc_shows_only_the_sandbox() {
    let f = Fixture::new();
    let src = "import os\npids = [p for p in os.listdir('/proc') if p.isdigit()]\nprint(len(pids), os.getpid())\nfor p in pids:\n    try: print(open(f'/proc/{p}/cmdline','rb').read())\n    except OSError: pass";
    let o = f.run(src).await;
    let out = o.stdout.as_str();
    let first = out.lines().next().unwrap_or_default();
    assert_eq!(first, "1 1", "{out}"); // a private PID namespace: the program is PID 1, alone
    assert!(!out.contains("cargo") && !out.contains(SECRET));
}

#[tokio::test]
async fn writes_outside_the_work_dir_fail() {
    let f = Fixture::new();
    let tag = format!("codegym-hostile-{}", std::process::id());
    // The interpreter's own site-packages (prefix/lib/python3.X/site-packages).
    let lib = f
        .sandbox
        .python()
        .parent()
        .and_then(|b| b.parent())
        .map(|p| p.join("lib"))
        .unwrap_or_default();
    let site = std::fs::read_dir(&lib)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("site-packages"))
        .find(|p| p.is_dir())
        .unwrap_or(lib);
    let targets = [
        format!("{}/{tag}.py", site.display()),
        format!("/tmp/{tag}"),
        format!("/dev/shm/{tag}"),
        format!("/etc/{tag}"),
        format!("{}/{tag}", f.root.display()),
        format!("/var/tmp/{tag}"),
    ];
    let src = format!(
        "for p in {targets:?}:\n    try:\n        open(p, 'w').write('pwned'); print(p, 'WROTE')\n    except OSError as e:\n        print(p, 'denied')"
    );
    let o = f.run(&src).await;
    let out = o.stdout.as_str();
    assert!(!out.contains("WROTE"), "{out}");
    for t in &targets {
        assert!(!std::path::Path::new(t).exists(), "{t} created on the host");
    }
}

#[tokio::test]
async fn the_uid_lease_file_is_out_of_reach() {
    // Every codegym process on the host locks its runs' uids in this file: a run that could lock a
    // byte would deny that uid to every server, and one that could replace the file would let two
    // processes hand out the same uid.
    let f = Fixture::new();
    let src = r#"
import fcntl, os, struct
for p in ['/run/codegym/uids.lock', '/dev/shm/codegym-uids.lock', '/run/codegym']:
    for flags in (os.O_RDONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC):
        try:
            fd = os.open(p, flags)
        except OSError as e:
            print(p, flags, 'denied', e.errno)
            continue
        try:
            fcntl.fcntl(fd, 37, struct.pack('hhqqi', fcntl.F_WRLCK, 0, 1_500_000, 1, 0))  # F_OFD_SETLK
            print(p, flags, 'LOCKED')
        except OSError as e:
            print(p, flags, 'OPENED', e.errno)
    try:
        os.rename(p, p + '.x'); print(p, 'RENAMED')
    except OSError as e:
        print(p, 'rename denied', e.errno)
"#;
    let o = f.run(src).await;
    let out = o.stdout.as_str();
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    assert_eq!(
        out.lines().filter(|l| l.contains("denied")).count(),
        12,
        "{out}"
    );
    for word in ["LOCKED", "OPENED", "RENAMED"] {
        assert!(!out.contains(word), "{out}");
    }
    assert!(
        std::path::Path::new("/run/codegym/uids.lock").is_file(),
        "the host's lease file (the fixture's runs lease there) is gone"
    );
}

#[tokio::test]
async fn planted_symlinks_are_never_followed_by_the_supervisor() {
    let f = Fixture::new();
    let victim_dir = f.root.join("victim");
    std::fs::create_dir_all(&victim_dir).expect("victim dir");
    std::fs::write(victim_dir.join("precious"), "keep me").expect("victim file");
    let src = format!(
        "import os\nos.symlink('{d}', 'dirlink')\nos.symlink('{d}/precious', 'out.txt')\nos.symlink('/etc/passwd', 'stdout')\nos.makedirs('sub')\nos.symlink('{d}', 'sub/deeper')\nprint('planted')",
        d = victim_dir.display()
    );
    let o = f.sandbox.run(ExecRequest::new(src)).await.expect("run");
    assert_eq!(o.stdout.as_str(), "planted\n", "{}", o.stderr.as_str());
    assert_eq!(
        std::fs::read_to_string(victim_dir.join("precious"))
            .ok()
            .as_deref(),
        Some("keep me")
    );
    std::fs::remove_dir_all(&victim_dir).expect("cleanup");
    f.assert_clean();
}

#[tokio::test]
async fn no_network_at_all() {
    let f = Fixture::new();
    let src = r#"
import socket
def attempt(name, fn):
    try:
        fn(); print(name, 'OPEN')
    except Exception as e:
        print(name, 'blocked', type(e).__name__)
def tcp():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM); s.settimeout(2); s.connect(('1.1.1.1', 53))
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('8.8.8.8', 53))
def tcp6():
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM); s.settimeout(2); s.connect(('::1', 80))
def dns():
    socket.getaddrinfo('example.com', 80)
def raw():
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
for n, fn in [('tcp', tcp), ('udp', udp), ('tcp6', tcp6), ('dns', dns), ('raw', raw)]:
    attempt(n, fn)
"#;
    let o = f.run(src).await;
    let out = o.stdout.as_str();
    assert_eq!(
        out.matches("blocked").count(),
        5,
        "{out}{}",
        o.stderr.as_str()
    );
}

#[tokio::test]
async fn host_loopback_port_is_unreachable() {
    let f = Fixture::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let src = format!(
        "import socket\ntry:\n    s = socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\nexcept Exception as e:\n    print('blocked', type(e).__name__)"
    );
    let o = f.run(&src).await;
    assert!(
        o.stdout.as_str().starts_with("blocked"),
        "{}",
        o.stdout.as_str()
    );
    let accepted = tokio::time::timeout(Duration::from_millis(300), listener.accept()).await;
    assert!(accepted.is_err(), "the sandbox reached a host port");
}

#[tokio::test]
async fn killing_the_parent_and_everyone() {
    let f = Fixture::new();
    let o = f
        .run("import os, signal\nfor p in (os.getppid(), 1, -1):\n    try: os.kill(p, signal.SIGKILL)\n    except OSError as e: print(p, type(e).__name__)\nprint('alive')")
        .await;
    // The test process is still here; the program only reached its own namespace.
    assert!(
        o.stdout.as_str().contains("alive") || o.signal.is_some(),
        "{o:?}"
    );
}

#[tokio::test]
async fn ptrace_unshare_mount_setuid_are_refused() {
    let f = Fixture::new();
    let src = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print('ptrace', libc.ptrace(0, 0, 0, 0), ctypes.get_errno())
print('attach', libc.ptrace(16, 1, 0, 0))
print('unshare', libc.unshare(0x10000000))
print('unshare_net', libc.unshare(0x40000000))
print('mount', libc.mount(b'none', b'/mnt', b'tmpfs', 0, None))
print('chroot', libc.chroot(b'/'))
try:
    os.setuid(0); print('setuid OK')
except OSError as e:
    print('setuid', -1)
"#;
    let o = f.run(src).await;
    let out = o.stdout.as_str();
    for name in [
        "ptrace",
        "attach",
        "unshare",
        "unshare_net",
        "mount",
        "chroot",
        "setuid",
    ] {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{out}{}", o.stderr.as_str()));
        assert_eq!(line.split_whitespace().nth(1), Some("-1"), "{line}");
    }
}

/// The seccomp filter answers before the kernel looks at the arguments: EPERM where, without
/// it, these calls would fail with EBADF/EINVAL/EFAULT or (keyctl) succeed. On the warm backend
/// the filter comes in two stacked parts (the fork server's, then each child's): both are checked.
#[tokio::test]
async fn the_seccomp_filter_answers_before_the_kernel_checks_arguments() {
    let f = Fixture::new();
    let src = r#"
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    ctypes.set_errno(0)
    r = getattr(libc, name)(*args)
    return errno.errorcode.get(ctypes.get_errno(), 'ok') if r == -1 else 'ok'
print('setns', call('setns', -1, 0))
print('unshare', call('unshare', 0x80000000))
print('mount', call('mount', None, None, None, 0, None))
print('keyctl', call('syscall', 250, 0, -3, 0))
print('bpf', call('syscall', 321, 0, None, 0))
"#;
    let o = f.run(src).await;
    let mut expected = "setns EPERM\nunshare EPERM\nmount EPERM\n".to_string();
    if cfg!(target_arch = "x86_64") {
        // (The raw numbers above are x86_64's.)
        expected.push_str("keyctl EPERM\nbpf EPERM\n");
        assert_eq!(o.stdout.as_str(), expected, "{}", o.stderr.as_str());
    } else {
        assert!(o.stdout.starts_with(&expected), "{o:?}");
    }
}

#[tokio::test]
async fn raising_hard_rlimits_is_refused() {
    let f = Fixture::new();
    let src = "import resource\nfor r in (resource.RLIMIT_CPU, resource.RLIMIT_NPROC, resource.RLIMIT_NOFILE, resource.RLIMIT_FSIZE):\n    try:\n        resource.setrlimit(r, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)); print('RAISED')\n    except (ValueError, OSError): print('refused')";
    let o = f.run(src).await;
    assert_eq!(
        o.stdout.as_str(),
        "refused\n".repeat(4),
        "{}",
        o.stderr.as_str()
    );
}

#[tokio::test]
async fn tiocsti_is_refused() {
    let f = Fixture::new();
    let src = "import fcntl, termios, os\nfd = os.open('/dev/tty', os.O_RDWR) if os.path.exists('/dev/tty') else 0\nfor d in (0, 1, fd):\n    try:\n        fcntl.ioctl(d, termios.TIOCSTI, b'x'); print('INJECTED')\n    except OSError as e:\n        print('refused')";
    let o = f.run(src).await;
    assert!(
        !o.stdout.as_str().contains("INJECTED"),
        "{}",
        o.stdout.as_str()
    );
}

#[tokio::test]
async fn inet_sockets_are_refused_even_before_connecting() {
    let f = Fixture::new();
    let o = f.run("import socket\ntry:\n    socket.socket(socket.AF_INET, socket.SOCK_STREAM); print('CREATED')\nexcept OSError as e: print('refused', e.errno)\ns = socket.socketpair(); print('unix ok')").await;
    let out = o.stdout.as_str();
    assert!(
        out.contains("refused 1") && out.contains("unix ok"),
        "{out}"
    );
}
