//! The warm-fork backend against the fresh one: same observable behaviour for programs, and the
//! server's own failure modes (it dies, a run is abandoned) lose nothing and leave nothing.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use codegym_sandbox::{Backend, ExecRequest, Limits, Sandbox, SandboxConfig};
use env_core::ExecutionResult;

/// A sandbox with its own work root and uid range (tests run in parallel).
struct Fixture {
    sandbox: Sandbox,
    root: PathBuf,
    uid_base: u32,
}

const UIDS: u32 = 16;

impl Fixture {
    fn new(backend: Backend, n: u32) -> Fixture {
        let root = PathBuf::from(format!(
            "/dev/shm/codegym-forkserver-test-{}-{n}",
            std::process::id()
        ));
        std::fs::create_dir_all(&root).expect("work root");
        let uid_base = 2_900_000 + (std::process::id() % 1000) * 1000 + n * UIDS;
        let config = SandboxConfig {
            work_root: Some(root.clone()),
            uid_base,
            uid_count: UIDS,
            backend,
            limits: Limits {
                wall_ms: 20_000,
                ..Limits::default()
            },
            ..SandboxConfig::default()
        };
        let sandbox = Sandbox::new(config).unwrap_or_else(|e| panic!("sandbox: {e}"));
        Fixture {
            sandbox,
            root,
            uid_base,
        }
    }

    async fn run(&self, req: ExecRequest) -> ExecutionResult {
        self.sandbox
            .run(req)
            .await
            .unwrap_or_else(|e| panic!("infrastructure error: {e}"))
    }

    /// Host processes running as one of this sandbox's uids.
    fn survivors(&self) -> Vec<i32> {
        let mut out = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let uid = std::fs::read_to_string(e.path().join("status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("Uid:"))
                        .and_then(|l| l.split_whitespace().next())
                        .and_then(|u| u.parse::<u32>().ok())
                });
            if uid.is_some_and(|u| u >= self.uid_base && u < self.uid_base + UIDS) {
                out.push(pid);
            }
        }
        out
    }

    /// Work dirs of executions still on disk.
    fn run_dirs(&self) -> usize {
        std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|e| std::fs::read_dir(e.path()).into_iter().flatten())
            .count()
    }

    /// Pids of this sandbox's fork server (its cwd is the sandbox's work root).
    fn fork_servers(&self) -> Vec<i32> {
        self.server_processes().0
    }

    /// The fork servers, and the children they forked ahead, which wait for a run.
    fn server_processes(&self) -> (Vec<i32>, Vec<i32>) {
        support::forkserver::server_processes(&self.root)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// What a program can observe about how it was started must not depend on the backend, nor, on
/// the warm backend, on whether its child was forked ahead (an idle server's) or on demand (a
/// busy server's, or one whose children forked ahead died).
#[tokio::test]
async fn warm_forks_behave_like_fresh_interpreters() {
    let warm = Fixture::new(Backend::WarmFork, 0);
    let fresh = Fixture::new(Backend::Fresh, 1);
    let on_demand = Fixture::new(Backend::WarmFork, 7);
    assert_eq!(warm.sandbox.backend(), "warm fork");
    assert_eq!(fresh.sandbox.backend(), "fresh");
    // Without children forked ahead, the server forks every run on demand.
    on_demand.run(ExecRequest::new("pass")).await;
    assert!(support::forkserver::kill_forked_ahead(&on_demand.root).await > 0);
    let programs: &[(&str, Option<&str>)] = &[
        ("print('hi')", None),
        (
            "import os, sys\nprint(__name__, __file__, sys.argv, os.getpid(), os.getppid())\nprint(sorted(k for k in globals() if not k.startswith('__')))",
            None,
        ),
        (
            "import os, sys\nprint(os.getcwd() == os.environ['HOME'] == os.environ['TMPDIR'], sorted(os.environ))\nprint(sys.path[0] == '', sys.flags.no_site, sys.flags.dont_write_bytecode)",
            None,
        ),
        ("import sys\nsys.exit(3)", None),
        ("import sys\nsys.exit('bye')", None),
        ("exit(4)", None),
        ("raise KeyError('k')", None),
        ("def f(:\n", None),
        (
            "import sys\nprint(sys.stdin.read().upper())",
            Some("some input\n"),
        ),
        (
            "import sys\nsys.stdout.write('no newline'); sys.stderr.write('err')",
            None,
        ),
        (
            "import atexit, threading, time\natexit.register(lambda: print('atexit ran'))\nthreading.Thread(target=lambda: (time.sleep(0.2), print('thread done'))).start()",
            None,
        ),
        (
            "import os\nprint(len([p for p in os.listdir('/proc') if p.isdigit()]))",
            None,
        ),
        // Its own IPC namespace and a /dev/shm with nothing of the host's or other runs'.
        (
            "import os\nprint([open('/proc/sysvipc/' + k).read().count('\\n') for k in ('shm', 'msg', 'sem')])\nprint([n for n in os.listdir('/dev/shm') if not os.getcwd().startswith('/dev/shm/' + n + '/')])",
            None,
        ),
        ("import sys\nsys.stdout.close()", None),
        // Issue 17: the warm backend's setup is native code now; what it leaves must not differ.
        (
            "import os, resource, signal\nst = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\nprint({k: st[k].strip() for k in ('SigBlk', 'SigIgn', 'NoNewPrivs', 'Seccomp', 'Groups')})\nprint(signal.getsignal(signal.SIGCHLD), signal.set_wakeup_fd(-1), os.getsid(0) == os.getpid() == 1, os.getuid() == os.geteuid() != 0, os.getgid() == os.getegid() != 0)\nprint([resource.getrlimit(getattr(resource, 'RLIMIT_' + r)) for r in ('CPU', 'FSIZE', 'NOFILE', 'NPROC', 'CORE', 'MEMLOCK', 'MSGQUEUE')])\nprint(sorted(os.listdir('/proc/self/fd')), os.listdir('/proc/1/fd') == os.listdir('/proc/self/fd'))",
            None,
        ),
        ("import os\nos._exit(7)", None),
        // The server is started with LD_BIND_NOW (fewer copy-on-write faults per run); no program
        // sees it, in `os.environ` or in the C environment.
        (
            "import ctypes, os\nprint('LD_BIND_NOW' in os.environ, ctypes.CDLL(None).getenv(b'LD_BIND_NOW'))",
            None,
        ),
    ];
    for (src, stdin) in programs {
        let req = || {
            let mut r = ExecRequest::new(*src);
            if let Some(input) = stdin {
                r.stdin = Some(input.as_bytes().to_vec());
            }
            r
        };
        let (w, f) = (warm.run(req()).await, fresh.run(req()).await);
        let d = on_demand.run(req()).await;
        let same = (&w.exit_code, &w.signal, &w.stdout, &w.stderr)
            == (&f.exit_code, &f.signal, &f.stdout, &f.stderr);
        assert!(same, "{src}\nwarm:  {w:?}\nfresh: {f:?}");
        let same = (&w.exit_code, &w.signal, &w.stdout, &w.stderr)
            == (&d.exit_code, &d.signal, &d.stdout, &d.stderr);
        assert!(same, "{src}\nforked ahead: {w:?}\non demand:    {d:?}");
        if src.contains("sysvipc") {
            assert_eq!(w.stdout, "[1, 1, 1]\n[]\n", "{w:?}");
        }
        if src.contains("LD_BIND_NOW") {
            assert_eq!(w.stdout, "False 0\n", "{w:?}");
        }
        if src.contains("NoNewPrivs") {
            // The comparison above is only worth something if the probe itself ran.
            let out = &w.stdout;
            assert!(
                w.exit_code == Some(0)
                    && out.contains("'NoNewPrivs': '1'")
                    && out.contains("'Seccomp': '2'")
                    && out.contains("\n0 -1 True True True\n"),
                "{w:?}"
            );
        }
    }
}

#[tokio::test]
async fn runs_do_not_share_random_state() {
    let warm = Fixture::new(Backend::WarmFork, 2);
    let src = "import random, uuid\nprint(random.random(), uuid.uuid4())";
    let a = warm.run(ExecRequest::new(src)).await;
    let b = warm.run(ExecRequest::new(src)).await;
    assert_eq!(a.exit_code, Some(0), "{a:?}");
    assert_ne!(a.stdout, b.stdout);
}

#[tokio::test]
async fn a_dead_fork_server_is_replaced_without_failing_a_run() {
    let f = Fixture::new(Backend::WarmFork, 3);
    let servers = f.fork_servers();
    assert_eq!(servers.len(), 1, "{servers:?}");
    // SAFETY: kill(2) on a pid we just found; at worst ESRCH.
    unsafe { libc::kill(servers[0], libc::SIGKILL) };
    for _ in 0..3 {
        let o = f.run(ExecRequest::new("print('still fine')")).await;
        assert_eq!(o.stdout, "still fine\n", "{o:?}");
    }
    let now = f.fork_servers();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now, servers);
}

/// A run whose fork server is killed under it (its tree dies with the server) runs again on the
/// new server: its caller gets the program's own result, not an infrastructure error.
#[tokio::test]
async fn a_run_whose_fork_server_dies_under_it_runs_again() {
    let f = Fixture::new(Backend::WarmFork, 8);
    let servers = f.fork_servers();
    assert_eq!(servers.len(), 1, "{servers:?}");
    let killer = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        // SAFETY: kill(2) on a pid we found; at worst ESRCH.
        unsafe { libc::kill(servers[0], libc::SIGKILL) };
    };
    let src = "import time\ntime.sleep(1.5)\nprint('done')";
    let (o, ()) = tokio::join!(f.run(ExecRequest::new(src)), killer);
    assert_eq!(o.stdout, "done\n", "{o:?}");
    assert_ne!(f.fork_servers(), servers);
}

#[tokio::test]
async fn an_abandoned_run_leaves_no_process_and_no_dir() {
    let f = Fixture::new(Backend::WarmFork, 4);
    let src =
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\ntime.sleep(60)";
    let gave_up =
        tokio::time::timeout(Duration::from_millis(500), f.run(ExecRequest::new(src))).await;
    assert!(gave_up.is_err(), "the program sleeps for a minute");
    eventually("the abandoned run's processes to die", || {
        f.survivors().is_empty()
    })
    .await;
    eventually("the abandoned run's work dir to go", || f.run_dirs() == 0).await;
    // The server itself is unaffected.
    let o = f.run(ExecRequest::new("print(1)")).await;
    assert_eq!(o.stdout, "1\n");
}

/// Runs of one fork server share its (empty) network namespace when Landlock scopes abstract unix
/// sockets; a socket one run listens on must still be unreachable from another.
#[tokio::test]
async fn concurrent_runs_cannot_talk_over_abstract_sockets() {
    let f = Fixture::new(Backend::WarmFork, 5);
    let name = format!("codegym-test-{}", std::process::id());
    let listener = format!(
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.bind('\\0{name}')\ns.listen(1)\ns.settimeout(3)\nprint('listening', flush=True)\ntry:\n    s.accept()\n    print('accepted')\nexcept OSError as e:\n    print('nobody came')"
    );
    let connector = format!(
        "import socket, time\ntime.sleep(1)\nc = socket.socket(socket.AF_UNIX)\ntry:\n    c.connect('\\0{name}')\n    print('connected')\nexcept OSError as e:\n    print('refused', e.errno)"
    );
    let (a, b) = tokio::join!(
        f.run(ExecRequest::new(listener)),
        f.run(ExecRequest::new(connector))
    );
    let (a, b) = (a.stdout, b.stdout);
    assert_eq!(a, "listening\nnobody came\n", "{a} / {b}");
    assert!(b.starts_with("refused"), "{b}");
}

#[tokio::test]
async fn runs_survive_the_death_of_children_forked_ahead() {
    let f = Fixture::new(Backend::WarmFork, 6);
    // Sequential runs leave the server idle: it forks children ahead, each waiting for a run.
    for _ in 0..2 {
        let o = f.run(ExecRequest::new("print('warm')")).await;
        assert_eq!(o.stdout, "warm\n", "{o:?}");
    }
    let mut waiting = Vec::new();
    eventually("children forked ahead", || {
        waiting = f.server_processes().1;
        !waiting.is_empty()
    })
    .await;
    for pid in &waiting {
        // SAFETY: kill(2) on a pid we just found; at worst ESRCH.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    // A run handed to a dead child is not lost: it forks on demand (or takes a live one).
    for _ in 0..4 {
        let o = f
            .run(ExecRequest::new(
                "import os\nprint(os.getpid(), len(os.listdir('/proc/self/fd')))",
            ))
            .await;
        assert_eq!(o.exit_code, Some(0), "{o:?}");
        assert_eq!(
            o.stdout.split_whitespace().collect::<Vec<_>>(),
            ["1", "4"],
            "{o:?}"
        );
    }
    assert_eq!(
        f.fork_servers().len(),
        1,
        "the server itself was not replaced"
    );
}

/// A run whose request exceeds what the fork server reads (64 KiB: here a data task's 90 KB input
/// argument) fails at once with the reason, and the server goes on serving (issue 17: its loop is
/// native now; a truncated request must neither hang the run nor take the server down).
#[tokio::test]
async fn an_oversized_request_fails_with_why_and_the_server_goes_on() {
    let warm = Fixture::new(Backend::WarmFork, 6);
    let mut req = ExecRequest::new("import sys\nprint(len(sys.argv))");
    req.data.argv = vec!["--text".into(), "x".repeat(90_000)];
    let outcome = tokio::time::timeout(Duration::from_secs(30), warm.sandbox.run(req))
        .await
        .expect("an oversized request must not hang its run");
    let err = outcome.expect_err("a 90 KB argument cannot reach the fork server");
    assert!(err.to_string().contains("Message too long"), "{err}");
    let after = warm.run(ExecRequest::new("print('still serving')")).await;
    assert_eq!(after.stdout, "still serving\n", "{after:?}");
    assert_eq!(warm.fork_servers().len(), 1, "the same server serves on");
}
