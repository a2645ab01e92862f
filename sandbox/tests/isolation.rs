//! Every run isolated from every other, under concurrency, on every path: warm-fork runs forked
//! ahead and on demand, fresh runs, compiled runs and session-mode interpreters. Many probes run at
//! once (tests/probes) and report from inside what they can see of each other; the checks are in
//! `support/isolation.rs`. Each scenario also proves it reached the concurrency it claims.

mod support;

use std::path::PathBuf;
use std::sync::OnceLock;

use codegym_sandbox::lang::Language;
use codegym_sandbox::{Backend, ExecRequest, Limits, Sandbox, SandboxConfig};
use serde_json::Value;
use support::isolation::{self, Expect};

/// Runs in flight at once (the bar is 32).
const IN_FLIGHT: usize = 40;
/// How long each probe stays alive, so that all of them overlap on 2 cores.
const HOLD_MS: u64 = 2_500;

/// The scenarios run one at a time: each loads the machine fully.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The work root of sandbox `n` of this binary.
fn root(n: u32) -> PathBuf {
    PathBuf::from(format!(
        "/dev/shm/codegym-isolation-test-{}-{n}",
        std::process::id()
    ))
}

fn sandbox(backend: Backend, n: u32) -> Sandbox {
    let root = root(n);
    std::fs::create_dir_all(&root).expect("work root");
    let config = SandboxConfig {
        work_root: Some(root),
        uid_base: 3_100_000 + (std::process::id() % 1000) * 1000 + n * 100,
        uid_count: 100,
        backend,
        max_concurrent: IN_FLIGHT,
        limits: Limits {
            wall_ms: 60_000,
            ..Limits::default()
        },
        ..SandboxConfig::default()
    };
    Sandbox::new(config).unwrap_or_else(|e| panic!("sandbox: {e}"))
}

fn warm() -> &'static Sandbox {
    static SB: OnceLock<Sandbox> = OnceLock::new();
    SB.get_or_init(|| {
        let sb = sandbox(Backend::WarmFork, 1);
        assert_eq!(sb.backend(), "warm fork");
        sb
    })
}

fn fresh() -> &'static Sandbox {
    static SB: OnceLock<Sandbox> = OnceLock::new();
    SB.get_or_init(|| sandbox(Backend::Fresh, 2))
}

/// `n` probe runs at once in `language`, each report parsed (any infrastructure error fails).
async fn probe_at_once(sb: &Sandbox, language: Language, n: usize) -> Vec<Value> {
    let runs = (0..n).map(|i| {
        let mut req = match language {
            Language::Python => ExecRequest::new(isolation::PYTHON_PROBE),
            _ => ExecRequest::new(isolation::C_PROBE),
        };
        req.language = language;
        req.stdin = Some(match language {
            Language::Python => isolation::python_stdin(i, n, HOLD_MS),
            _ => isolation::c_stdin(i, n, HOLD_MS),
        });
        async move { sb.run(req).await }
    });
    futures::future::join_all(runs)
        .await
        .into_iter()
        .map(|r| {
            let r = r.unwrap_or_else(|e| panic!("infrastructure error: {e}"));
            assert_eq!(r.exit_code, Some(0), "probe failed: {r:?}");
            isolation::parse(r.stdout.as_str()).unwrap_or_else(|e| panic!("{e}"))
        })
        .collect()
}

/// Two waves of concurrent probes: the second also finds anything the first left behind (its
/// IPC objects use the same keys).
async fn two_waves(what: &str, sb: &Sandbox, language: Language, expect: Expect) {
    for wave in 0..2 {
        let reports = probe_at_once(sb, language, IN_FLIGHT).await;
        isolation::assert_isolated(&format!("{what}, wave {wave}"), &reports, expect, 32);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_fork_runs_at_once_are_isolated() {
    let _one = SERIAL.lock().await;
    two_waves(
        "warm fork",
        warm(),
        Language::Python,
        Expect { own_net: false },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_runs_at_once_are_isolated() {
    let _one = SERIAL.lock().await;
    two_waves("fresh", fresh(), Language::Python, Expect { own_net: true }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiled_runs_at_once_are_isolated() {
    let _one = SERIAL.lock().await;
    // A compiled language runs fresh whichever backend runs Python scripts; both sandboxes.
    two_waves(
        "C (warm sandbox)",
        warm(),
        Language::C,
        Expect { own_net: true },
    )
    .await;
    two_waves(
        "C (fresh sandbox)",
        fresh(),
        Language::C,
        Expect { own_net: true },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_at_once_are_isolated() {
    let _one = SERIAL.lock().await;
    let sb = warm();
    for wave in 0..2 {
        let cells = (0..IN_FLIGHT).map(|i| async move {
            let mut session = sb
                .open_session(None)
                .await
                .unwrap_or_else(|e| panic!("session: {e}"));
            let stdin = isolation::python_stdin(i, IN_FLIGHT, HOLD_MS);
            let r = session
                .exec(isolation::PYTHON_PROBE, Some(stdin))
                .await
                .unwrap_or_else(|e| panic!("session exec: {e}"));
            session.close().await;
            assert_eq!(r.exit_code, Some(0), "probe failed: {}", r.stderr.as_str());
            isolation::parse(r.stdout.as_str()).unwrap_or_else(|e| panic!("{e}"))
        });
        let reports = futures::future::join_all(cells).await;
        isolation::assert_isolated(
            &format!("sessions, wave {wave}"),
            &reports,
            Expect { own_net: true },
            32,
        );
    }
}

/// The fork server's children forked ahead are killed: the server then forks every run on
/// demand. One run at a time (the path a nearly idle server takes) and many at once, every run
/// must still get its own namespaces and `/proc`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_fork_runs_on_demand_after_the_forked_ahead_children_die() {
    let _one = SERIAL.lock().await;
    let sb = warm();
    // A run, so that the server is up and idle, with its children forked ahead.
    probe_at_once(sb, Language::Python, 1).await;
    let killed = support::forkserver::kill_forked_ahead(&root(1)).await;
    assert!(killed > 0, "no child forked ahead was found to kill");
    for _ in 0..4 {
        let reports = probe_at_once(sb, Language::Python, 1).await;
        isolation::assert_isolated(
            "one at a time, on demand",
            &reports,
            Expect { own_net: false },
            1,
        );
    }
    assert_eq!(
        support::forkserver::server_processes(&root(1)).1,
        Vec::<i32>::new(),
        "the server forked ahead again: the runs above did not take the on-demand path"
    );
    two_waves(
        "on demand, at once",
        sb,
        Language::Python,
        Expect { own_net: false },
    )
    .await;
}
