//! Hostile programs: each must end in its expected safe outcome, and nothing may survive it
//! (no process of the sandbox's uids, no work dir; see `hostile/mod.rs`).

#[path = "hostile/fixture.rs"]
mod fixture;

use std::time::Duration;

use env_coding::sandbox::{ExecRequest, Limits};
use fixture::{Fixture, SECRET, limits, text};

const SIGKILL: i32 = 9;
const SIGXCPU: i32 = 24;
const SIGSEGV: i32 = 11;

fn ended_by_limit(o: &env_coding::sandbox::ExecOutcome) -> bool {
    o.timed_out && matches!(o.signal, Some(SIGKILL) | Some(SIGXCPU))
}

#[tokio::test]
async fn infinite_loop_hits_the_cpu_limit() {
    let f = Fixture::new();
    let o = f.run("while True: pass").await;
    assert!(ended_by_limit(&o), "{o:?}");
    assert!(o.cpu_ms >= 900, "{o:?}");
}

#[tokio::test]
async fn sleep_past_the_wall_clock() {
    let f = Fixture::new();
    let mut req = ExecRequest::new("import time; time.sleep(600)");
    req.limits = Some(Limits {
        wall_ms: 1500,
        ..limits()
    });
    let o = f.run_req(req).await;
    assert!(o.timed_out && o.signal == Some(SIGKILL), "{o:?}");
}

#[tokio::test]
async fn ignoring_sigxcpu_and_sigterm_does_not_help() {
    let f = Fixture::new();
    let o = f
        .run("import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: pass")
        .await;
    assert!(o.timed_out && o.signal == Some(SIGKILL), "{o:?}");
}

#[tokio::test]
async fn memory_bomb() {
    let f = Fixture::new();
    let o = f
        .run("x = []\nwhile True: x.append(bytearray(8 << 20))")
        .await;
    assert!(o.memory_exceeded, "{o:?}");
    assert_ne!(o.exit_code, Some(0));
}

#[tokio::test]
async fn mmap_and_touch() {
    let f = Fixture::new();
    let o = f.run("import mmap\nm = mmap.mmap(-1, 1 << 30)\nfor i in range(0, 1 << 30, 4096): m[i] = 1\nprint('survived')").await;
    assert!(o.memory_exceeded, "{o:?}");
    assert!(!text(&o.stdout).contains("survived"));
}

#[tokio::test]
async fn fork_bomb() {
    let f = Fixture::new();
    let o = f
        .run("import os\nwhile True:\n    try: os.fork()\n    except OSError: pass")
        .await;
    assert!(
        o.timed_out || o.exit_code.is_some() || o.signal.is_some(),
        "{o:?}"
    );
    assert_ne!(o.exit_code, Some(0));
}

#[tokio::test]
async fn thread_bomb_is_bounded() {
    let f = Fixture::new();
    let src = "import threading, time\nn = 0\ntry:\n    while True:\n        threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); n += 1\nexcept Exception as e:\n    print(n, type(e).__name__)\n";
    let o = f.run(src).await;
    let out = text(&o.stdout);
    let n: u32 = out
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{o:?}"));
    assert!(n < 32, "{n} threads with max_processes 32");
}

#[tokio::test]
async fn subprocess_reexec_loop() {
    let f = Fixture::new();
    let o = f
        .run("import subprocess, sys\nsubprocess.run([sys.executable, __file__])\nprint('x')")
        .await;
    assert!(!o.success() || o.stdout.len() < 1000, "{o:?}");
}

#[tokio::test]
async fn stdout_flood_with_newlines() {
    let f = Fixture::new();
    let o = f.run("while True: print('x' * 100)").await;
    assert!(
        o.stdout_truncated && o.stdout.len() == limits().stdout_cap,
        "{}",
        o.stdout.len()
    );
    assert!(ended_by_limit(&o), "{o:?}");
}

#[tokio::test]
async fn stdout_flood_without_newlines() {
    let f = Fixture::new();
    let o = f
        .run("import sys\nwhile True: sys.stdout.write('y' * 65536)")
        .await;
    assert!(o.stdout_truncated && o.stdout.len() == limits().stdout_cap);
    assert!(o.stdout.iter().all(|&b| b == b'y'));
    assert!(o.timed_out, "{o:?}");
}

#[tokio::test]
async fn stderr_flood() {
    let f = Fixture::new();
    let o = f
        .run("import sys\nwhile True: sys.stderr.write('e' * 1000 + '\\n')")
        .await;
    assert!(o.stderr_truncated && o.stderr.len() == limits().stderr_cap);
    assert!(o.timed_out, "{o:?}");
}

#[tokio::test]
async fn raw_fd_write_flood() {
    let f = Fixture::new();
    let o = f
        .run("import os\nb = b'z' * 1000000\nwhile True: os.write(1, b); os.write(2, b)")
        .await;
    assert!(o.stdout_truncated && o.stderr_truncated);
    assert!(o.timed_out, "{o:?}");
}

#[tokio::test]
async fn huge_file_is_cut_at_the_file_size_limit() {
    let f = Fixture::new();
    let src = "import os\ntry:\n    with open('big', 'wb') as fh:\n        for _ in range(100): fh.write(b'0' * (1 << 20))\nexcept OSError as e:\n    print('refused', e.errno)\nprint(os.path.getsize('big'))";
    let o = f.run(src).await;
    let out = text(&o.stdout);
    assert!(out.starts_with("refused 27"), "{out} {}", text(&o.stderr)); // EFBIG
    let size: u64 = out
        .lines()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(u64::MAX);
    assert!(size <= limits().max_file_bytes);
}

#[tokio::test]
async fn many_files_are_cleaned_up() {
    let f = Fixture::new();
    let o = f.run("import os\nos.makedirs('d/e/f')\nfor i in range(5000): open(f'd/e/f/{i}', 'w').write('x')\nprint(len(os.listdir('d/e/f')))").await;
    assert_eq!(text(&o.stdout), "5000\n", "{}", text(&o.stderr));
}

#[tokio::test]
async fn open_files_until_emfile() {
    let f = Fixture::new();
    let o = f.run("fs = []\ntry:\n    while True: fs.append(open('/dev/null'))\nexcept OSError as e:\n    print(len(fs), e.errno)").await;
    let out = text(&o.stdout);
    let mut it = out.split_whitespace();
    let n: u32 = it.next().and_then(|s| s.parse().ok()).unwrap_or(u32::MAX);
    assert!(n < limits().max_open_files, "{out}");
    assert_eq!(it.next(), Some("24")); // EMFILE
}

#[tokio::test]
async fn deep_recursion() {
    let f = Fixture::new();
    let o = f
        .run("import sys\nsys.setrecursionlimit(10**8)\ndef r(n): return r(n + 1) + 1\nr(0)")
        .await;
    assert!(
        o.signal == Some(SIGSEGV) || o.exit_code == Some(1) || o.timed_out || o.memory_exceeded,
        "{o:?}"
    );
}

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
    let out = text(&o.stdout);
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
    let out = text(&o.stdout);
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
    let out = text(&o.stdout);
    assert!(!out.contains("WROTE"), "{out}");
    for t in &targets {
        assert!(!std::path::Path::new(t).exists(), "{t} created on the host");
    }
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
    assert_eq!(text(&o.stdout), "planted\n", "{}", text(&o.stderr));
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
    let out = text(&o.stdout);
    assert_eq!(
        out.matches("blocked").count(),
        5,
        "{out}{}",
        text(&o.stderr)
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
        text(&o.stdout).starts_with("blocked"),
        "{}",
        text(&o.stdout)
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
        text(&o.stdout).contains("alive") || o.signal.is_some(),
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
    let out = text(&o.stdout);
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
            .unwrap_or_else(|| panic!("{out}{}", text(&o.stderr)));
        assert_eq!(line.split_whitespace().nth(1), Some("-1"), "{line}");
    }
}

#[tokio::test]
async fn raising_hard_rlimits_is_refused() {
    let f = Fixture::new();
    let src = "import resource\nfor r in (resource.RLIMIT_CPU, resource.RLIMIT_NPROC, resource.RLIMIT_NOFILE, resource.RLIMIT_FSIZE):\n    try:\n        resource.setrlimit(r, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)); print('RAISED')\n    except (ValueError, OSError): print('refused')";
    let o = f.run(src).await;
    assert_eq!(
        text(&o.stdout),
        "refused\n".repeat(4),
        "{}",
        text(&o.stderr)
    );
}

#[tokio::test]
async fn double_forked_daemon_dies_with_the_run() {
    let f = Fixture::new();
    let marker = f.root.join("daemon-was-here");
    let src = format!(
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(1.5)\n        open('{m}', 'w').write('x')\n        open('late', 'w').write('x')\n    os._exit(0)\nprint('parent done')",
        m = marker.display()
    );
    let o = f.run(&src).await;
    assert_eq!(text(&o.stdout), "parent done\n");
    assert!(
        !o.timed_out,
        "the run must end with its main process: {o:?}"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!marker.exists(), "the daemon outlived its run");
    f.assert_clean();
}

#[tokio::test]
async fn grandchild_holding_the_pipes_does_not_hang_the_run() {
    let f = Fixture::new();
    let o = f
        .run("import subprocess\nsubprocess.Popen(['sleep', '100'])\nprint('bye')")
        .await;
    assert_eq!(o.exit_code, Some(0), "{}", text(&o.stderr));
    assert!(!o.timed_out);
    assert_eq!(text(&o.stdout), "bye\n");
}

#[tokio::test]
async fn zombies_are_reaped() {
    let f = Fixture::new();
    let o = f.run("import os\nfor _ in range(20):\n    if os.fork() == 0: os._exit(0)\nprint('left zombies')").await;
    assert_eq!(text(&o.stdout), "left zombies\n");
}

#[tokio::test]
async fn closing_stdout_then_spinning() {
    let f = Fixture::new();
    let o = f
        .run("import os\nos.close(1)\nos.close(2)\nwhile True: pass")
        .await;
    assert!(ended_by_limit(&o), "{o:?}");
}

#[tokio::test]
async fn tiocsti_is_refused() {
    let f = Fixture::new();
    let src = "import fcntl, termios, os\nfd = os.open('/dev/tty', os.O_RDWR) if os.path.exists('/dev/tty') else 0\nfor d in (0, 1, fd):\n    try:\n        fcntl.ioctl(d, termios.TIOCSTI, b'x'); print('INJECTED')\n    except OSError as e:\n        print('refused')";
    let o = f.run(src).await;
    assert!(!text(&o.stdout).contains("INJECTED"), "{}", text(&o.stdout));
}

#[tokio::test]
async fn ctypes_segfault_is_a_signal() {
    let f = Fixture::new();
    let o = f.run("import ctypes\nctypes.string_at(0)").await;
    assert_eq!(o.signal, Some(SIGSEGV), "{o:?}");
    assert_eq!(o.exit_code, None);
    assert!(!o.timed_out);
}

#[tokio::test]
async fn sys_exit_variants() {
    let f = Fixture::new();
    for (src, code, err) in [
        (
            "import sys; sys.exit('custom message')",
            1,
            "custom message",
        ),
        ("import sys; sys.exit(None)", 0, ""),
        ("raise SystemExit(256)", 0, ""),
        ("import os; os._exit(255)", 255, ""),
        ("exit(5)", 5, ""),
        ("import sys; sys.stdout.close(); sys.exit(0)", 0, ""),
    ] {
        let o = f.run(src).await;
        assert_eq!(o.exit_code, Some(code), "{src}: {o:?}");
        assert!(text(&o.stderr).contains(err), "{src}");
    }
}

#[tokio::test]
async fn inet_sockets_are_refused_even_before_connecting() {
    let f = Fixture::new();
    let o = f.run("import socket\ntry:\n    socket.socket(socket.AF_INET, socket.SOCK_STREAM); print('CREATED')\nexcept OSError as e: print('refused', e.errno)\ns = socket.socketpair(); print('unix ok')").await;
    let out = text(&o.stdout);
    assert!(
        out.contains("refused 1") && out.contains("unix ok"),
        "{out}"
    );
}

#[tokio::test]
async fn session_timeout_kills_the_whole_tree() {
    let f = Fixture::new();
    let mut s = f
        .sandbox
        .open_session(Some(limits()))
        .await
        .expect("session");
    let o = s
        .exec(
            "import subprocess\np = subprocess.Popen(['sleep', '100'])\nx = 1",
            None,
        )
        .await
        .expect("exec");
    assert_eq!(o.exit_code, Some(0), "{}", text(&o.stderr));
    let o = s.exec("while True: x += 1", None).await.expect("exec");
    assert!(o.timed_out, "{o:?}");
    assert!(!s.is_alive());
    let survivors = fixture::processes_of(f.uid_base, f.uid_count);
    assert!(survivors.is_empty(), "{survivors:?}");
    s.close().await;
    f.assert_clean();
}
