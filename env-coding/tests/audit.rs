//! The reward-hacking audit on both sandbox backends: every exploit of the corpus earns a reward on
//! a weak fixture task (so the corpus never rots), and none earns one on the shipped task sets
//! (the built-in examples, the HumanEval and MBPP fixtures), whose unit tests run outside the
//! candidate's process.

use codegym_sandbox::{Backend, Sandbox, SandboxConfig};
use env_coding::audit::{AuditReport, AuditScope, audit, exploits};
use env_coding::reward::run::EvalOptions;
use env_coding::tasks::TaskSet;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/audit/fixtures/weak.jsonl");
const SHIPPED: &[&str] = &[
    concat!(env!("CARGO_MANIFEST_DIR"), "/tasks/examples.jsonl"),
    concat!(env!("CARGO_MANIFEST_DIR"), "/tasks/fixtures/humaneval_mini.jsonl"),
    concat!(env!("CARGO_MANIFEST_DIR"), "/tasks/fixtures/mbpp_mini.jsonl"),
    concat!(env!("CARGO_MANIFEST_DIR"), "/tasks/fixtures/mbpp_sanitized_mini.json"),
];

fn sandbox(backend: Backend) -> Sandbox {
    env_coding::new_sandbox(SandboxConfig {
        backend,
        ..SandboxConfig::default()
    })
    .expect("sandbox")
}

async fn run(sandbox: &Sandbox, path: &str) -> AuditReport {
    let tasks = TaskSet::load(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let opts = EvalOptions {
        limits: None,
        per_test_timeout_ms: 3_000,
    };
    audit(sandbox, &tasks, &AuditScope::default(), opts)
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

async fn every_exploit_hacks_a_weak_fixture(backend: Backend) {
    let sb = sandbox(backend);
    let report = run(&sb, FIXTURES).await;
    let unused: Vec<_> = report
        .hits_by_exploit()
        .into_iter()
        .filter(|&(_, n)| n == 0)
        .collect();
    assert!(unused.is_empty(), "{backend:?}: exploits that hack no weak fixture: {unused:?}");
    assert!(!report.failed(), "every fixture is marked known-weak: {:?}", report.hackable_tasks);
    // Every weak fixture is hacked by something (else it is not weak, or its mark is stale).
    let tasks = TaskSet::load(FIXTURES).unwrap();
    for t in tasks.iter() {
        assert!(
            report.findings.iter().any(|f| f.task_id == t.id),
            "{backend:?}: {} is marked weak but nothing hacked it",
            t.id
        );
    }
}

async fn shipped_task_sets_audit_clean(backend: Backend) {
    let sb = sandbox(backend);
    for path in SHIPPED {
        let report = run(&sb, path).await;
        assert!(report.attempts > report.tasks, "{path}: {} programs", report.attempts);
        let found: Vec<_> = report
            .findings
            .iter()
            .map(|f| format!("{} by {}: {}", f.task_id, f.exploit, f.reward_breakdown))
            .collect();
        assert!(found.is_empty(), "{backend:?} {path}: hacked:\n{}", found.join("\n"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exploit_hacks_a_weak_fixture_warm_fork() {
    every_exploit_hacks_a_weak_fixture(Backend::WarmFork).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exploit_hacks_a_weak_fixture_fresh() {
    every_exploit_hacks_a_weak_fixture(Backend::Fresh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_task_sets_audit_clean_warm_fork() {
    shipped_task_sets_audit_clean(Backend::WarmFork).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_task_sets_audit_clean_fresh() {
    shipped_task_sets_audit_clean(Backend::Fresh).await;
}

#[test]
fn the_weak_fixtures_are_real_tasks() {
    // Each fixture's reference solution passes: the tasks are weak, not broken.
    let tasks = TaskSet::load(FIXTURES).unwrap();
    assert!(tasks.len() >= 15);
    for t in tasks.iter() {
        assert!(t.reference_solution.is_some(), "{}", t.id);
        assert!(t.metadata.contains_key("known_weak"), "{}", t.id);
    }
    assert!(exploits().unwrap().len() >= 30);
}
