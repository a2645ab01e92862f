//! Mutation testing on a real sandbox: the fixtures (`audit/fixtures/mutation.jsonl`) in every
//! task shape get a score, a one-case test scores low and a thorough one high, an equivalent
//! mutant is called so, a task without a reference says so, and the inputs a survivor is compared
//! on are recovered from the task's own tests.

use std::sync::Arc;

use env_coding::audit::mutants::{
    MutationReport, MutationStatus, TaskMutation, mutation_audit, python,
};
use env_coding::inputs;
use env_coding::tasks::{Task, TaskSet};
use env_coding::{CodingConfig, Scorer};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/audit/fixtures/mutation.jsonl");

fn scorer() -> Scorer {
    Scorer::new(&CodingConfig::default()).expect("scorer")
}

async fn mutation(scorer: &Scorer, tasks: &TaskSet, gate: Option<f64>) -> MutationReport {
    let all: Vec<&Arc<Task>> = tasks.iter().collect();
    mutation_audit(scorer, &all, 10, gate, scorer.options())
        .await
        .expect("mutation audit")
}

fn task<'a>(report: &'a MutationReport, id: &str) -> &'a TaskMutation {
    report
        .tasks
        .iter()
        .find(|t| t.task_id == id)
        .unwrap_or_else(|| panic!("no {id} in {report:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shape_is_scored_weak_tests_low_and_equivalents_named() {
    let scorer = scorer();
    let tasks = TaskSet::load(FIXTURES).expect("fixtures");
    let report = mutation(&scorer, &tasks, Some(0.8)).await;
    let score = |id: &str| task(&report, id).mutation_score;

    // One case (`f(2) == 4`) lets `x + x` and `x ** x` through; the derived inputs show both
    // differ from `x * x`, so they are weaknesses, not equivalents.
    let weak = task(&report, "square-one-test");
    assert_eq!(weak.status, MutationStatus::Scored);
    assert!(score("square-one-test").unwrap() <= 0.5, "{weak:#?}");
    assert_eq!(weak.equivalent, 0, "{weak:#?}");
    let plus = weak
        .surviving
        .iter()
        .find(|m| m.what == "* -> +")
        .expect("x + x survives one case");
    let why = plus.disagreement.as_ref().expect("a disagreement");
    assert_ne!(why.reference, why.candidate);
    assert_eq!(plus.diff, ["-    return x * x", "+    return x + x"]);
    assert_eq!(score("square-thorough"), Some(1.0));

    // `x >= 0` -> `x > 0` only changes `absolute(0)`, where `-x` is `x`: no test can kill it.
    let abs = task(&report, "absolute");
    let ge = abs
        .surviving
        .iter()
        .find(|m| m.what == ">= -> >")
        .expect("survives");
    assert!(ge.probably_equivalent, "{abs:#?}");
    assert!(
        abs.equivalence_inputs > 4,
        "seeds and their mutations: {abs:#?}"
    );
    assert_eq!(abs.mutation_score, Some(1.0), "{abs:#?}");

    // The judge (C++): one case lets `n + n` through; a derived stdin tells it apart.
    let cpp = task(&report, "square-cpp-one-test");
    assert!(cpp.mutation_score.unwrap() < 1.0, "{cpp:#?}");
    let plus = cpp
        .surviving
        .iter()
        .find(|m| m.what == "* -> +")
        .expect("survives");
    assert!(
        !plus.probably_equivalent && plus.disagreement.is_some(),
        "{cpp:#?}"
    );

    for id in ["sum-to", "sum-cpp", "triangle-io", "total-output"] {
        let t = task(&report, id);
        assert_eq!(t.status, MutationStatus::Scored, "{t:#?}");
        assert!(t.mutants >= 3 && t.mutation_score.unwrap() >= 0.8, "{t:#?}");
    }
    let none = task(&report, "no-reference");
    assert_eq!(
        (none.status, none.mutation_score, none.mutants),
        (MutationStatus::NoReference, None, 0)
    );
    assert_eq!(report.no_reference, ["no-reference"]);
    assert_eq!(
        report.below_gate,
        ["square-one-test", "square-cpp-one-test"]
    );
    let d = report.distribution.as_ref().expect("a distribution");
    assert_eq!(d.tasks, 8);
    assert!(d.min <= 0.5 && d.max == 1.0 && d.mean < 1.0, "{d:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_that_fails_is_not_scored_and_mutants_are_deterministic() {
    let scorer = scorer();
    let line = serde_json::json!({"schema_version": 1, "id": "broken", "prompt": "Print 2.",
        "reward": {"version": 1, "components": [{"type": "stdout", "expected": "2\n"}]},
        "reference_solution": "print(3)\n"});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.jsonl");
    std::fs::write(&path, line.to_string()).unwrap();
    let tasks = TaskSet::load(&path).unwrap();
    let report = mutation(&scorer, &tasks, Some(0.5)).await;
    let t = task(&report, "broken");
    assert_eq!(t.status, MutationStatus::ReferenceFails, "{t:#?}");
    assert_eq!(t.mutation_score, None);
    assert!(report.below_gate.is_empty() && report.distribution.is_none());

    // The same source, n and seed give the same mutants; another seed another order.
    let source =
        "def f(a, b):\n    if a < b and a > 0:\n        return a * 2 + b\n    return b - 1\n";
    let run = |seed: &'static str| {
        let sandbox = scorer.sandbox();
        async move {
            python::mutants(sandbox, source, 1, 6, seed)
                .await
                .unwrap()
                .unwrap()
                .into_iter()
                .map(|m| m.source)
                .collect::<Vec<_>>()
        }
    };
    let (a, b, c) = (run("t1").await, run("t1").await, run("t2").await);
    assert_eq!(a.len(), 6);
    assert_eq!(a, b);
    assert_ne!(a, c);
    let mut unique = a.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 6, "deduplicated");
}

/// In-place mutants (the form a synthesized repository task's broken module takes) keep the
/// module's own text: its comments, layout and non-ASCII text around one changed region.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_place_mutants_change_one_region_and_keep_the_rest_of_the_text() {
    let scorer = scorer();
    let source = "# A module with comments and a layout of its own.\n\
                  GREETING = \"h\u{e9}llo\"  # non-ASCII before the changes: offsets are bytes\n\n\n\
                  def f(a, b):\n    # compare first\n    if a < b and a > 0:\n        \
                  return (a * 2\n                + b)\n    return b - 1  # the rest\n";
    let made = python::mutants_in_place(scorer.sandbox(), source, 1, 40, "in-place")
        .await
        .unwrap()
        .unwrap();
    assert!(made.len() >= 12, "{}", made.len());
    let old: Vec<&str> = source.lines().collect();
    for m in &made {
        assert_ne!(m.source, source);
        let new: Vec<&str> = m.source.lines().collect();
        let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
        let suffix = old[prefix..]
            .iter()
            .rev()
            .zip(new[prefix..].iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        // One region changed, and it is the mutated statement's (at most its 3 lines here).
        assert!(
            old.len() - prefix - suffix <= 3,
            "{}:\n{}",
            m.what,
            m.source
        );
        for comment in ["# A module", "# compare first", "# the rest"] {
            assert!(m.source.contains(comment), "{}:\n{}", m.what, m.source);
        }
        if m.line != 2 {
            assert!(
                m.source.contains("\"h\u{e9}llo\""),
                "{}:\n{}",
                m.what,
                m.source
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_are_recovered_from_the_tests_and_disagreements_found() {
    let scorer = scorer();
    let sandbox = scorer.sandbox();
    // MBPP-shaped: the asserts' arguments, tuples included, are what the tests pass.
    let mbpp = serde_json::json!({"task_id": 7, "text": "Count the elements of a tuple.",
        "code": "def count(t):\n    return len(t)\n",
        "test_list": ["assert count((1, 2)) == 2", "assert count((5,)) == 1", "assert count(()) == 0"]});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mbpp.jsonl");
    std::fs::write(&path, mbpp.to_string()).unwrap();
    let tasks = TaskSet::load(&path).unwrap();
    let t = tasks.iter().next().unwrap();
    let derived = inputs::derive(sandbox, t).await.unwrap();
    assert_eq!(derived.seeds, 3, "{derived:?}");
    assert!(derived.mutated > 0 && derived.len() > 3, "{derived:?}");
    let reference = t.reference_solution.as_deref().unwrap();
    assert!(
        derived
            .disagreements(sandbox, reference)
            .await
            .unwrap()
            .is_empty()
    );
    // A tuple stays a tuple: a function that needs one agrees with the reference.
    let strict = "def count(t):\n    assert type(t) is tuple\n    return len(t)\n";
    assert!(
        derived
            .disagreements(sandbox, strict)
            .await
            .unwrap()
            .is_empty()
    );
    let off = "def count(t):\n    return len(t) if len(t) < 2 else 2\n";
    let found = inputs::cross_check(sandbox, t, off).await.unwrap();
    assert!(!found.is_empty(), "inputs longer than 2 come from mutation");
    assert!(found.iter().all(|d| d.candidate == "2"), "{found:?}");

    // HumanEval+-shaped (differential): the component's own argument lists are the seeds.
    let plus = serde_json::json!({"schema_version": 1, "id": "double", "prompt": "Double x.",
        "reward": {"version": 1, "components": [{"type": "differential", "entry_point": "double",
            "reference": "def double(x):\n    return 2 * x\n", "base_inputs": [[2]]}]},
        "reference_solution": "def double(x):\n    return 2 * x\n"});
    std::fs::write(&path, plus.to_string()).unwrap();
    let tasks = TaskSet::load(&path).unwrap();
    let t = tasks.iter().next().unwrap();
    let found = inputs::cross_check(sandbox, t, "def double(x):\n    return x + 2\n")
        .await
        .unwrap();
    assert!(found.iter().any(|d| d.input != "[2]"), "{found:?}");
    assert!(
        !found.iter().any(|d| d.input == "[2]"),
        "x + 2 agrees at 2: {found:?}"
    );
}
