//! Legitimate programs under the sandbox: they must work, with all isolation layers on.

use std::sync::OnceLock;

use codegym_sandbox::{ExecRequest, Limits, Sandbox, SandboxConfig};
use env_core::ExecutionResult;

fn sandbox() -> &'static Sandbox {
    static SB: OnceLock<Sandbox> = OnceLock::new();
    SB.get_or_init(|| match Sandbox::new(SandboxConfig::default()) {
        Ok(sb) => sb,
        Err(e) => panic!("sandbox setup failed: {e}"),
    })
}

async fn run(src: &str) -> ExecutionResult {
    run_req(ExecRequest::new(src)).await
}

async fn run_req(req: ExecRequest) -> ExecutionResult {
    match sandbox().run(req).await {
        Ok(o) => o,
        Err(e) => panic!("infrastructure error: {e}"),
    }
}

#[tokio::test]
async fn prints_and_exits_zero() {
    let o = run("print('hello')").await;
    assert_eq!(o.exit_code, Some(0), "stderr: {}", o.stderr.as_str());
    assert_eq!(o.stdout, "hello\n");
    assert!(o.success());
    assert!(!o.timed_out && !o.memory_exceeded);
}

#[tokio::test]
async fn exit_codes_and_exceptions() {
    let o = run("import sys; sys.exit(3)").await;
    assert_eq!(o.exit_code, Some(3));
    assert!(!o.success());
    let o = run("raise ValueError('boom')").await;
    assert_eq!(o.exit_code, Some(1));
    assert!(o.stderr.as_str().contains("ValueError: boom"));
    let o = run("import os; os._exit(7)").await;
    assert_eq!(o.exit_code, Some(7));
}

#[tokio::test]
async fn stdin_is_fed_and_closed() {
    let mut req =
        ExecRequest::new("import sys\ndata = sys.stdin.read()\nprint(len(data), data.upper())");
    req.stdin = Some(b"abc".to_vec());
    let o = run_req(req).await;
    assert_eq!(
        o.stdout.as_str(),
        "3 ABC\n",
        "stderr: {}",
        o.stderr.as_str()
    );
    // No stdin: reads see EOF immediately.
    let o = run("import sys; print(repr(sys.stdin.read()))").await;
    assert_eq!(o.stdout.as_str(), "''\n");
}

#[tokio::test]
async fn large_stdin_larger_than_a_pipe_buffer() {
    let mut req = ExecRequest::new("import sys; print(len(sys.stdin.buffer.read()))");
    req.stdin = Some(vec![b'x'; 1 << 20]);
    let o = run_req(req).await;
    assert_eq!(o.stdout.as_str(), format!("{}\n", 1 << 20));
}

#[tokio::test]
async fn threads_and_subprocess_of_sys_executable() {
    let src = r#"
import threading, subprocess, sys
out = []
ts = [threading.Thread(target=lambda i=i: out.append(i * i)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
print(sum(out))
r = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True)
print(r.stdout.strip(), r.returncode)
"#;
    let o = run(src).await;
    assert_eq!(
        o.stdout.as_str(),
        "140\n42 0\n",
        "stderr: {}",
        o.stderr.as_str()
    );
}

#[tokio::test]
async fn tempfile_and_work_dir_files() {
    let mut req = ExecRequest::new(
        "import tempfile, os\nfrom helper import double\nwith tempfile.NamedTemporaryFile('w', delete=False) as f: f.write('t')\nprint(double(21), open('data/in.txt').read(), os.path.exists(f.name))\nopen('out.txt', 'w').write('x' * 10)\nprint(os.path.getsize('out.txt'))",
    );
    req.files = vec![
        (
            "helper.py".into(),
            b"def double(x):\n    return 2 * x\n".to_vec(),
        ),
        ("data/in.txt".into(), b"payload".to_vec()),
    ];
    let o = run_req(req).await;
    assert_eq!(
        o.stdout.as_str(),
        "42 payload True\n10\n",
        "stderr: {}",
        o.stderr.as_str()
    );
}

#[tokio::test]
async fn invalid_request_paths_are_errors() {
    for bad in ["../x", "/etc/passwd", "", "a/../../b", "main.py"] {
        let mut req = ExecRequest::new("print(1)");
        req.files = vec![(bad.to_string(), b"x".to_vec())];
        assert!(sandbox().run(req).await.is_err(), "{bad:?} accepted");
    }
}

#[tokio::test]
async fn large_output_is_captured_up_to_the_cap() {
    let o = run("print('a' * 50000)").await;
    assert_eq!(o.stdout.len(), 50001);
    assert!(!o.stdout_truncated);
    let mut req = ExecRequest::new(
        "import sys\nfor _ in range(100): sys.stdout.write('b' * 10000)\nprint('done', file=sys.stderr)",
    );
    req.limits = Some(Limits {
        stdout_cap: 1000,
        ..Limits::default()
    });
    let o = run_req(req).await;
    assert_eq!(o.stdout, "b".repeat(1000));
    assert!(o.stdout_truncated);
    assert_eq!(o.exit_code, Some(0));
    assert_eq!(o.stderr.as_str(), "done\n");
}

/// Output is decoded once, lossily: each invalid byte becomes U+FFFD.
#[tokio::test]
async fn invalid_utf8_becomes_replacement_characters() {
    let o = run("import sys; sys.stdout.buffer.write(b'\\xff\\xfeok\\n')").await;
    assert_eq!(o.stdout, "\u{fffd}\u{fffd}ok\n");
    assert_eq!(o.exit_code, Some(0));
}

#[tokio::test]
async fn imports_much_of_the_stdlib() {
    let src = "import json, re, collections, itertools, functools, math, random, decimal, fractions, heapq, bisect, \
               datetime, statistics, string, textwrap, typing, dataclasses, enum, io, csv, sqlite3, hashlib, base64, \
               struct, array, copy, pickle, zlib, gzip, unittest, asyncio, concurrent.futures, multiprocessing, \
               argparse, logging, pathlib, shutil, glob, time, uuid, secrets, operator, contextlib, abc, numbers, \
               inspect, ast, dis, pprint, difflib, xml.etree.ElementTree, html, email, urllib.parse, socket, ssl, select\n\
               con = sqlite3.connect(':memory:'); con.execute('create table t(x)'); print('ok')";
    let o = run(src).await;
    assert_eq!(o.stdout.as_str(), "ok\n", "stderr: {}", o.stderr.as_str());
}

#[tokio::test]
async fn measures_cpu_wall_and_memory() {
    let o = run("x = bytearray(64 << 20)\ns = 0\nfor i in range(3_000_000): s += i\nprint(s > 0)")
        .await;
    assert_eq!(o.stdout.as_str(), "True\n");
    assert!(o.cpu_ms > 0, "{o:?}");
    assert!(o.wall_ms > 0);
    assert!(o.peak_rss_bytes >= 64 << 20, "peak {}", o.peak_rss_bytes);
}

#[tokio::test]
async fn concurrent_runs_are_independent() {
    let mut tasks = Vec::new();
    for i in 0..6 {
        tasks.push(tokio::spawn(async move {
            let o = sandbox()
                .run(ExecRequest::new(format!(
                    "open('f', 'w').write('{i}'); print(open('f').read())"
                )))
                .await;
            (i, o)
        }));
    }
    for t in tasks {
        let (i, o) = t.await.expect("task");
        let o = o.expect("run");
        assert_eq!(o.stdout.as_str(), format!("{i}\n"));
    }
}

#[tokio::test]
async fn session_keeps_state_and_is_isolated_from_other_sessions() {
    let sb = sandbox();
    let mut a = sb.open_session(None).await.expect("session a");
    let mut b = sb.open_session(None).await.expect("session b");
    let o = a
        .exec(
            "import math\nx = 41\nopen('notes.txt', 'w').write('kept')",
            None,
        )
        .await
        .expect("exec");
    assert_eq!(o.exit_code, Some(0), "stderr: {}", o.stderr.as_str());
    let o = a
        .exec(
            "x += 1\nprint(x, math.pi > 3, open('notes.txt').read())",
            None,
        )
        .await
        .expect("exec");
    assert_eq!(
        o.stdout.as_str(),
        "42 True kept\n",
        "stderr: {}",
        o.stderr.as_str()
    );
    assert!(a.work_dir().join("notes.txt").exists());
    let o = b
        .exec(
            "print('x' in globals())\nimport os\nprint(os.path.exists('notes.txt'))",
            None,
        )
        .await
        .expect("exec");
    assert_eq!(o.stdout.as_str(), "False\nFalse\n");
    // Errors and stdin per cell; the session survives an exception.
    let o = a.exec("raise KeyError('k')", None).await.expect("exec");
    assert_eq!(o.exit_code, Some(1));
    assert!(o.stderr.as_str().contains("KeyError"));
    let o = a
        .exec(
            "import sys; print(sys.stdin.read()[::-1], x)",
            Some(b"abc".to_vec()),
        )
        .await
        .expect("exec");
    assert_eq!(o.stdout.as_str(), "cba 42\n");
    assert!(a.is_alive());
    let dir = a.work_dir().to_path_buf();
    a.close().await;
    assert!(!dir.exists(), "session dir left behind");
    b.close().await;
}

#[tokio::test]
async fn session_dies_on_timeout() {
    let limits = Limits {
        cpu_ms: 1000,
        wall_ms: 5000,
        ..Limits::default()
    };
    let mut s = sandbox().open_session(Some(limits)).await.expect("session");
    let o = s.exec("while True: pass", None).await.expect("exec");
    assert!(o.timed_out, "{o:?}");
    assert!(!s.is_alive());
    assert!(s.exec("print(1)", None).await.is_err());
}

#[test]
fn isolation_report_is_strict_here() {
    let report = sandbox().isolation();
    let shown = report.to_string();
    assert!(shown.contains("isolation level"), "{shown}");
    // This image is root with namespaces, seccomp, Landlock and v1 cgroups (see notes/sandbox.md).
    assert_eq!(
        report.level,
        codegym_sandbox::IsolationLevel::Strict,
        "{shown}"
    );
}

#[test]
fn api_types_are_shareable_and_configs_reject_unknown_fields() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Sandbox>();
    send::<codegym_sandbox::PySession>();
    let ok: SandboxConfig =
        serde_json::from_str(r#"{"limits": {"cpu_ms": 2000}, "max_concurrent": 3}"#)
            .expect("config");
    assert_eq!(ok.limits.cpu_ms, 2000);
    assert_eq!(ok.limits.wall_ms, Limits::default().wall_ms);
    assert!(serde_json::from_str::<SandboxConfig>(r#"{"limitz": {}}"#).is_err());
    assert!(serde_json::from_str::<Limits>(r#"{"cpu": 1}"#).is_err());
}

#[test]
fn setup_failures_are_errors_not_outcomes() {
    let config = SandboxConfig {
        python: Some("/nonexistent/python3".into()),
        ..SandboxConfig::default()
    };
    assert!(Sandbox::new(config).is_err());
}

#[tokio::test]
async fn dropping_the_sandbox_removes_its_work_root() {
    let root =
        std::env::temp_dir().join(format!("codegym-sandbox-drop-test-{}", std::process::id()));
    std::fs::create_dir_all(&root).expect("root");
    let config = SandboxConfig {
        work_root: Some(root.clone()),
        ..SandboxConfig::default()
    };
    let sb = Sandbox::new(config).expect("sandbox");
    let o = sb
        .run(ExecRequest::new("open('x', 'w').write('y'); print('ok')"))
        .await
        .expect("run");
    assert_eq!(o.stdout, "ok\n");
    assert_eq!(
        std::fs::read_dir(&root).expect("read").count(),
        1,
        "one private dir per sandbox"
    );
    drop(sb);
    assert_eq!(
        std::fs::read_dir(&root).expect("read").count(),
        0,
        "work root left behind"
    );
    std::fs::remove_dir(&root).expect("cleanup");
}

/// `pip` ships in site-packages of every CPython install: the default mode must import it without
/// running `site` (whose `.pth` hooks are the slow part), and `SitePackages::None` must not.
#[tokio::test]
async fn site_packages_are_importable_without_running_site() {
    use codegym_sandbox::SitePackages;
    let probe = "import sys, pip\nprint(sys.flags.no_site, pip.__name__)\nexit(3)";
    let o = run(probe).await;
    // `exit` (installed by `site` normally) still works.
    assert_eq!(o.exit_code, Some(3), "stderr: {}", o.stderr.as_str());
    assert_eq!(o.stdout.as_str(), "1 pip\n");

    let bare = SandboxConfig {
        site_packages: SitePackages::None,
        ..SandboxConfig::default()
    };
    let sb = Sandbox::new(bare).unwrap_or_else(|e| panic!("sandbox setup failed: {e}"));
    let o = sb
        .run(ExecRequest::new(probe))
        .await
        .expect("infrastructure");
    assert_eq!(o.exit_code, Some(1));
    assert!(
        o.stderr.as_str().contains("ModuleNotFoundError"),
        "{}",
        o.stderr.as_str()
    );
}

/// Tracebacks are what the model reads as feedback: they must look like a plain script's.
#[tokio::test]
async fn tracebacks_point_at_main_py_only() {
    let o = run("x = 1\nraise ValueError('boom')").await;
    assert_eq!(o.exit_code, Some(1));
    let err = o.stderr.as_str();
    assert!(
        err.contains("File \"main.py\", line 2, in <module>"),
        "{err}"
    );
    assert!(!err.contains("<string>"), "bootstrap frame leaked: {err}");
    assert!(err.trim_end().ends_with("ValueError: boom"), "{err}");
    // `if __name__ == "__main__"` and `__file__` behave as for a script.
    let o = run("import sys\nif __name__ == '__main__':\n    print(__file__, sys.argv[0])").await;
    assert_eq!(
        o.stdout.as_str(),
        "main.py main.py\n",
        "{}",
        o.stderr.as_str()
    );
}
