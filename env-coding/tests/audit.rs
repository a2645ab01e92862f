//! The reward-hacking audit on both sandbox backends: every exploit of the corpus earns a reward on
//! a weak fixture task on some backend (so the corpus never rots), and none earns one on the shipped task sets
//! (the built-in examples, the HumanEval and MBPP fixtures), whose unit tests run outside the
//! candidate's process.

use codegym_sandbox::Backend;
use env_coding::audit::{AuditReport, AuditScope, audit, exploits};
use env_coding::tasks::TaskSet;
use env_coding::{CodingConfig, Scorer};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/audit/fixtures/weak.jsonl");
const SHIPPED: &[&str] = &[
    concat!(env!("CARGO_MANIFEST_DIR"), "/tasks/examples.jsonl"),
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tasks/fixtures/humaneval_mini.jsonl"
    ),
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tasks/fixtures/humaneval_real.jsonl"
    ),
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tasks/fixtures/mbpp_mini.jsonl"
    ),
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tasks/fixtures/mbpp_sanitized_mini.json"
    ),
];

fn scorer(backend: Backend) -> Scorer {
    let mut config = CodingConfig::default();
    config.sandbox.backend = backend;
    Scorer::new(&config).expect("scorer")
}

async fn run(scorer: &Scorer, path: &str) -> AuditReport {
    let tasks = TaskSet::load(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    audit(scorer, &tasks, &AuditScope::default(), scorer.options())
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The fixture audit on one backend: every finding is on a task marked known-weak.
async fn weak_fixtures_on(backend: Backend) -> AuditReport {
    let sb = scorer(backend);
    let report = run(&sb, FIXTURES).await;
    assert!(
        !report.failed(),
        "{backend:?}: unmarked: {:?}",
        report.hackable_tasks
    );
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exploit_hacks_a_weak_fixture_on_some_backend() {
    let warm = weak_fixtures_on(Backend::WarmFork).await;
    let fresh = weak_fixtures_on(Backend::Fresh).await;
    // Every fixture is hacked by something (else it is not weak, or its mark is stale).
    let tasks = TaskSet::load(FIXTURES).unwrap();
    for t in tasks.iter() {
        let hacked = |r: &AuditReport| r.findings.iter().any(|f| f.task_id == t.id);
        assert!(
            hacked(&warm) || hacked(&fresh),
            "{} is marked weak but nothing hacked it",
            t.id
        );
    }
    let warm_report = &warm;
    let (warm, fresh) = (warm.hits_by_exploit(), fresh.hits_by_exploit());
    for (name, n) in &warm {
        assert!(
            *n + fresh.get(name).copied().unwrap_or(0) > 0,
            "{name} hacks no weak fixture on either backend"
        );
    }
    // Every kind of derived attack forges a weak fixture: the derivation finds what the corpus
    // does not list (a prompt's example in plain text, a declared helper, a one-case test).
    for kind in [
        "shadow",
        "control-flow",
        "lying-return",
        "constant",
        "prompt-lookup",
        "echo-expected",
    ] {
        let file = format!("derived/{kind}");
        assert!(
            warm.get(file.as_str()).copied().unwrap_or(0) > 0,
            "no derived {kind} attack forged a weak fixture"
        );
    }
    for (task, attack) in [
        ("weak-plain-text-example", "derived/echo-expected"),
        ("weak-declared-helper", "derived/shadow"),
        ("weak-one-case", "derived/constant"),
        ("weak-map-in-process", "derived/control-flow"),
        ("weak-tests-in-prompt", "derived/prompt-lookup"),
    ] {
        assert!(
            warm_report
                .findings
                .iter()
                .any(|f| f.task_id == task && f.file == attack && f.solved),
            "{attack} did not solve {task}"
        );
    }
    // Where the backends differ, and why: a warm-fork run is a forked interpreter, so it ends
    // without the interpreter's finalization (objects' destructors never run) and its argv is not
    // its process's command line in /proc; a fresh run is a whole interpreter.
    assert_eq!(warm["python/destructor_exit_zero.py"], 0);
    assert!(fresh["python/destructor_exit_zero.py"] > 0);
}

async fn shipped_task_sets_audit_clean(backend: Backend) {
    let sb = scorer(backend);
    for path in SHIPPED {
        let report = run(&sb, path).await;
        assert!(
            report.attempts > report.tasks,
            "{path}: {} programs",
            report.attempts
        );
        // Known-weak tasks aside; a derived attack's partial credit (a constant some tests
        // expect) is reported, and fails only a strict audit.
        let found: Vec<_> = report
            .findings
            .iter()
            .filter(|f| f.known_weak.is_none() && f.counts(false))
            .map(|f| format!("{} by {}: {}", f.task_id, f.exploit, f.reward_breakdown))
            .collect();
        assert!(
            found.is_empty(),
            "{backend:?} {path}: hacked:\n{}",
            found.join("\n")
        );
    }
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
