//! Every sandboxed process is born in its run's cgroups (v1 here: the spawning thread clones from
//! inside them), never in the host's, and the spawning thread goes back to the host's groups.
//! Seen from inside the programs: fresh Python runs, compiled C programs (their compile steps
//! are spawned the same way), and the warm backend's runs (forked by their server, each moved
//! into groups of its own before its program starts). And the run's own uid, which its process
//! limit counts, across two sandboxes of one process.

use std::sync::OnceLock;

use codegym_sandbox::lang::Language;
use codegym_sandbox::{Backend, ExecRequest, Limits, Sandbox, SandboxConfig};
use env_core::ExecutionResult;

fn sandbox(backend: Backend) -> &'static Sandbox {
    static FRESH: OnceLock<Sandbox> = OnceLock::new();
    static WARM: OnceLock<Sandbox> = OnceLock::new();
    let cell = match backend {
        Backend::WarmFork => &WARM,
        _ => &FRESH,
    };
    cell.get_or_init(|| {
        let config = SandboxConfig {
            backend,
            ..SandboxConfig::default()
        };
        Sandbox::new(config).unwrap_or_else(|e| panic!("sandbox setup failed: {e}"))
    })
}

/// One test at a time: a test that looks at the spawning thread must not see it in the middle of
/// another test's spawn.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn run(backend: Backend, req: ExecRequest) -> ExecutionResult {
    match sandbox(backend).run(req).await {
        Ok(o) => o,
        Err(e) => panic!("infrastructure error: {e}"),
    }
}

/// The (memory, pids) group paths of a `/proc/<pid>/cgroup` listing.
fn groups(listing: &str) -> (String, String) {
    let find = |ctrl: &str| {
        listing
            .lines()
            .find_map(|l| {
                let mut p = l.splitn(3, ':');
                let (_, c, path) = (p.next()?, p.next()?, p.next()?);
                c.split(',')
                    .any(|c| c == ctrl)
                    .then(|| path.trim().to_string())
            })
            .unwrap_or_else(|| panic!("no {ctrl} group in {listing:?}"))
    };
    (find("memory"), find("pids"))
}

fn host_groups() -> (String, String) {
    groups(&std::fs::read_to_string("/proc/self/cgroup").expect("/proc/self/cgroup"))
}

/// The groups of this process's thread named `name`.
fn thread_groups(name: &str) -> (String, String) {
    for task in std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() == name {
            return groups(&std::fs::read_to_string(task.path().join("cgroup")).expect("cgroup"));
        }
    }
    panic!("no thread named {name}");
}

const PYTHON: &str = "print(open('/proc/self/cgroup').read())";
const C: &str = "#include <stdio.h>\nint main(void){FILE*f=fopen(\"/proc/self/cgroup\",\"r\");int c;if(!f)return 3;while((c=fgetc(f))!=EOF)putchar(c);return 0;}\n";

/// Asserts each listing's groups are one run's own (`<kind>-N`, the same in both hierarchies: a
/// fresh execution's `run-N`, a warm run's `warm-N`) and that no two listings share a group.
fn assert_own_groups(listings: &[String], kind: &str) {
    let host = host_groups();
    let mut seen = std::collections::HashSet::new();
    for listing in listings {
        let (memory, pids) = groups(listing);
        assert_ne!(
            (memory.clone(), pids.clone()),
            host,
            "a run in the host's groups"
        );
        let run = memory.rsplit('/').next().unwrap_or_default().to_string();
        assert!(
            run.starts_with(&format!("{kind}-")),
            "memory group {memory} is not a run's"
        );
        assert!(
            pids.ends_with(&format!("/{run}")),
            "pids group {pids} is not {run}'s"
        );
        assert!(
            seen.insert(memory.clone()),
            "two runs in one group {memory}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fresh_processes_are_born_in_their_own_groups_and_the_spawner_goes_home() {
    let _serial = SERIAL.lock().await;
    // Several at once (the spawner serves them one after another, moving in and out each time),
    // then alone (each spawn after a pause: the path that used to wait on the kernel).
    let mut at_once = Vec::new();
    for i in 0..8 {
        let mut req = ExecRequest::new(PYTHON);
        if i % 4 == 3 {
            req = ExecRequest::new(C);
            req.language = Language::C;
        }
        at_once.push(run(Backend::Fresh, req));
    }
    let mut listings = Vec::new();
    for o in futures::future::join_all(at_once).await {
        assert_eq!(o.exit_code, Some(0), "{o:?}");
        listings.push(o.stdout.as_str().to_string());
    }
    for source in [PYTHON, C] {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let mut req = ExecRequest::new(source);
        if source == C {
            req.language = Language::C;
        }
        let o = run(Backend::Fresh, req).await;
        assert_eq!(o.exit_code, Some(0), "{o:?}");
        listings.push(o.stdout.as_str().to_string());
    }
    assert_own_groups(&listings, "run");
    assert_eq!(
        thread_groups("codegym-spawner"),
        host_groups(),
        "the spawning thread stayed in a run's groups"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn warm_runs_are_in_groups_of_their_own() {
    let _serial = SERIAL.lock().await;
    // At once (each reads its groups, then waits for the others to have read theirs), in waves:
    // children forked ahead and on demand, groups new and reused.
    let source = format!(
        "{PYTHON}
import time
time.sleep(0.3)"
    );
    for _ in 0..3 {
        let at_once = (0..8).map(|_| run(Backend::WarmFork, ExecRequest::new(source.as_str())));
        let mut listings = Vec::new();
        for o in futures::future::join_all(at_once).await {
            assert_eq!(o.exit_code, Some(0), "{o:?}");
            listings.push(o.stdout.as_str().to_string());
        }
        assert_own_groups(&listings, "warm");
    }
    assert_eq!(thread_groups("codegym-spawner"), host_groups());
}

#[tokio::test]
async fn a_run_limited_to_one_process_starts_and_cannot_fork() {
    let _serial = SERIAL.lock().await;
    // The pids limit is written once the child is in its group (the spawning thread, there during
    // the fork, must not count against it).
    let mut req = ExecRequest::new(
        "import os\ntry:\n    os.fork()\n    print('forked')\nexcept OSError as e:\n    print('refused')",
    );
    req.limits = Some(Limits {
        max_processes: 1,
        ..Limits::default()
    });
    let o = run(Backend::Fresh, req).await;
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    assert_eq!(o.stdout.as_str().trim(), "refused", "{o:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_sandboxes_of_one_process_never_share_a_uid() {
    // Each run's own uid, across sandboxes too: two servers in one process (or a test binary's
    // fixtures) used to count their runs from zero, and gave one uid to two live runs.
    let _serial = SERIAL.lock().await;
    let other = Sandbox::new(SandboxConfig {
        backend: Backend::Fresh,
        ..SandboxConfig::default()
    })
    .unwrap_or_else(|e| panic!("sandbox setup failed: {e}"));
    let source = "import os, time\nprint(os.getuid())\ntime.sleep(0.3)";
    let mut runs = Vec::new();
    for _ in 0..6 {
        runs.push(sandbox(Backend::Fresh).run(ExecRequest::new(source)));
        runs.push(other.run(ExecRequest::new(source)));
    }
    let mut uids = std::collections::HashSet::new();
    for o in futures::future::join_all(runs).await {
        let o = o.unwrap_or_else(|e| panic!("infrastructure error: {e}"));
        assert_eq!(o.exit_code, Some(0), "{o:?}");
        let uid = o.stdout.as_str().trim().to_string();
        assert!(uids.insert(uid.clone()), "two runs at once as uid {uid}");
    }
}
