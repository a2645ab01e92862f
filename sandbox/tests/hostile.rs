//! Hostile programs: each must end in its expected safe outcome, and nothing may survive it
//! (no process of the sandbox's uids, no work dir; see `hostile/fixture.rs`; escape attempts are in
//! `hostile/escape.rs`, reading what other runs left in memory in `hostile/residue.rs`, taking
//! other runs' memory or processes in `hostile/neighbours.rs`).
//! This binary runs them on the warm-fork backend (the default here); `hostile_fresh.rs` runs the
//! same suite with a fresh interpreter per execution.

/// The backend every fixture of this binary uses (`hostile_fresh.rs` has its own).
#[allow(dead_code)]
const BACKEND: codegym_sandbox::Backend = codegym_sandbox::Backend::WarmFork;

#[path = "hostile/escape.rs"]
mod escape;
#[path = "hostile/fixture.rs"]
mod fixture;
#[path = "hostile/neighbours.rs"]
mod neighbours;
#[path = "hostile/residue.rs"]
mod residue;

use std::time::Duration;

use codegym_sandbox::{ExecRequest, Limits};
use fixture::{Fixture, limits};

const SIGKILL: i32 = 9;
const SIGXCPU: i32 = 24;
const SIGSEGV: i32 = 11;

fn ended_by_limit(o: &env_core::ExecutionResult) -> bool {
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
    assert!(!o.stdout.as_str().contains("survived"));
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
    let out = o.stdout.as_str();
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
    assert!(o.stdout.bytes().all(|b| b == b'y'));
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
    let out = o.stdout.as_str();
    assert!(out.starts_with("refused 27"), "{out} {}", o.stderr.as_str()); // EFBIG
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
    assert_eq!(o.stdout.as_str(), "5000\n", "{}", o.stderr.as_str());
}

#[tokio::test]
async fn open_files_until_emfile() {
    let f = Fixture::new();
    let o = f.run("fs = []\ntry:\n    while True: fs.append(open('/dev/null'))\nexcept OSError as e:\n    print(len(fs), e.errno)").await;
    let out = o.stdout.as_str();
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
async fn double_forked_daemon_dies_with_the_run() {
    let f = Fixture::new();
    let marker = f.root.join("daemon-was-here");
    let src = format!(
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(1.5)\n        open('{m}', 'w').write('x')\n        open('late', 'w').write('x')\n    os._exit(0)\nprint('parent done')",
        m = marker.display()
    );
    let o = f.run(&src).await;
    assert_eq!(o.stdout.as_str(), "parent done\n");
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
    assert_eq!(o.exit_code, Some(0), "{}", o.stderr.as_str());
    assert!(!o.timed_out);
    assert_eq!(o.stdout.as_str(), "bye\n");
}

#[tokio::test]
async fn zombies_are_reaped() {
    let f = Fixture::new();
    let o = f.run("import os\nfor _ in range(20):\n    if os.fork() == 0: os._exit(0)\nprint('left zombies')").await;
    assert_eq!(o.stdout.as_str(), "left zombies\n");
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
        assert!(o.stderr.as_str().contains(err), "{src}");
    }
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
    assert_eq!(o.exit_code, Some(0), "{}", o.stderr.as_str());
    let o = s.exec("while True: x += 1", None).await.expect("exec");
    assert!(o.timed_out, "{o:?}");
    assert!(!s.is_alive());
    let survivors = fixture::processes_of(f.uid_base, f.uid_count);
    assert!(survivors.is_empty(), "{survivors:?}");
    s.close().await;
    f.assert_clean();
}
