//! The one checker behind `--cross-check` (`env_coding::cross_check::Checker`), in the real
//! sandbox: a gamed program disagrees (input and both outputs), the reference's own program
//! agrees, and what cannot be compared is `unavailable` with why: a task without a reference, a
//! program in another language, a task whose tests pass no plain arguments.

use std::path::Path;
use std::sync::Arc;

use env_coding::cross_check::Checker;
use env_coding::tasks::TaskSet;
use env_coding::{CodingConfig, Scorer};
use serde_json::json;
use trajectory::record::CrossCheckOutcome;

fn task(id: &str, check: &str, reference: Option<&str>) -> serde_json::Value {
    let mut t = json!({
        "schema_version": 1, "id": id, "prompt": format!("Write square(x) ({id})."),
        "reward": {"version": 1, "components": [
            {"type": "check_function", "entry_point": "square", "code": check}]},
    });
    if let Some(r) = reference {
        t["reference_solution"] = json!(r);
    }
    t
}

fn checker() -> Checker {
    let reference = "def square(x):\n    return x * x\n";
    let weak = "def check(candidate):\n    assert candidate(2) == 4\n";
    // The tests call the function with an object, not plain data: nothing to derive from.
    let opaque = "def check(candidate):\n    assert candidate(object()) is not None\n";
    let lines: Vec<String> = [
        task("weak", weak, Some(reference)),
        task("noref", weak, None),
        task("opaque", opaque, Some("def square(x):\n    return x\n")),
    ]
    .iter()
    .map(|t| t.to_string())
    .collect();
    let tasks = TaskSet::parse(&lines.join("\n"), Path::new("tasks.jsonl")).unwrap();
    let scorer = Scorer::new(&CodingConfig::default()).expect("the sandbox starts");
    Checker::new(Arc::new(scorer), tasks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gamed_programs_disagree_and_what_cannot_be_compared_says_why() {
    let c = checker();
    assert!(c.covers("weak") && c.covers("opaque"));
    assert!(!c.covers("noref") && !c.covers("missing"));

    let gamed = c
        .check("weak", "def square(x):\n    return 4\n", "python")
        .await
        .unwrap();
    assert_eq!(gamed.outcome, CrossCheckOutcome::Disagree, "{gamed:?}");
    // The test's input 2 and its mutations; the program is right only where x * x is 4.
    assert!(
        gamed.inputs > 5 && gamed.disagreeing > 0 && gamed.disagreeing < gamed.inputs,
        "{gamed:?}"
    );
    let d = &gamed.disagreements[0];
    let x: i64 = serde_json::from_str::<Vec<i64>>(&d.input).unwrap()[0];
    assert_eq!(
        (d.reference.clone(), d.candidate.as_str()),
        ((x * x).to_string(), "4")
    );

    let honest = c
        .check("weak", "def square(x):\n    return x ** 2\n", "py")
        .await
        .unwrap();
    assert_eq!(
        (honest.outcome, honest.inputs),
        (CrossCheckOutcome::Agree, gamed.inputs)
    );
    assert!(honest.disagreements.is_empty());

    for (task, program, language, why) in [
        (
            "noref",
            "def square(x):\n    return 4\n",
            "python",
            "no reference",
        ),
        (
            "weak",
            "int square(int x) { return 4; }",
            "cpp",
            "the program is in cpp",
        ),
        (
            "opaque",
            "def square(x):\n    return x\n",
            "python",
            "no plain-data arguments",
        ),
    ] {
        let r = c.check(task, program, language).await.unwrap();
        assert_eq!(r.outcome, CrossCheckOutcome::Unavailable, "{task}: {r:?}");
        let got = r.why.unwrap_or_default();
        assert!(got.contains(why), "{task}: {got}");
    }
}
