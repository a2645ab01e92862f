//! How many sandboxed runs a sample costs where nothing reads its observation, counted by the
//! sandbox's own `codegym_sandbox_executions_total` through a recorder installed for this test
//! binary alone (its own process: no other test's runs; one test runs programs, so the counts are
//! exact): `codegym evaluate`'s engine, `Evaluate` / a step with `observe: false` over a real
//! gRPC server on TCP and SandboxFusion's `/submit` over HTTP run a unit-test sample once (under
//! its tests), for the same reward and breakdown as with the observation's run.

#[path = "support/http_server.rs"]
mod http_server;
mod support;

use std::collections::BTreeMap;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use codegym::http::datasets::Datasets;
use codegym::server::ServerConfig;
use codegym_sandbox::metrics::EXECUTIONS;
use env_coding::completions::{Sample, evaluate_samples};
use env_coding::tasks::TaskSet;
use env_coding::{CodingConfig, Scorer};
use env_core::Value;
use http_server::HttpServer;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use proto::convert::{value_from_proto, value_to_proto};
use proto::v1;
use serde_json::json;
use support::TestServer;
use tonic::Code;

/// Counts every increment of the sandbox's executions counter, whatever its labels.
struct Executions(Arc<AtomicU64>);

impl Recorder for Executions {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if key.name() == EXECUTIONS {
            Counter::from_arc(self.0.clone())
        } else {
            Counter::noop()
        }
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// A unit-test task, inline; its programs print at top level, so an observation shows.
fn item(src: &str) -> v1::EvaluateItem {
    let task = serde_json::json!({"task": {"schema_version": 1, "id": "f-is-1", "prompt": "p",
        "reward": {"version": 1, "components": [{"type": "asserts", "asserts": ["assert f() == 1"]}]}}});
    v1::EvaluateItem {
        seed: None,
        options_json: task.to_string(),
        action: Some(value_to_proto(&Value::Text(src.into()))),
    }
}

fn programs() -> Vec<v1::EvaluateItem> {
    [
        "def f():\n    return 1\nprint('loaded')\n",
        "def f():\n    return 2\nprint('loaded')\n",
    ]
    .into_iter()
    .map(item)
    .collect()
}

/// Each result's reward, breakdown and program stdout (the observation's).
fn outcomes(results: &[v1::EvaluateResult]) -> Vec<(f64, serde_json::Value, String)> {
    results
        .iter()
        .map(|r| {
            let (step, info) = support::evaluated(r);
            let stdout = match value_from_proto(step.observation.clone().unwrap()).unwrap() {
                Value::Execution(run) => run.stdout,
                other => panic!("observation {other:?}"),
            };
            (step.reward, info["reward_breakdown"].clone(), stdout)
        })
        .collect()
}

const TASKS: &str = r#"{"schema_version": 1, "id": "tests", "prompt": "p", "reward": {"version": 1, "components": [{"type": "asserts", "asserts": ["assert f() == 1"]}]}}
{"schema_version": 1, "id": "stdout", "prompt": "p", "reward": {"version": 1, "components": [{"type": "stdout", "expected": "1"}]}}
{"schema_version": 1, "id": "tests-with-a-penalty", "prompt": "p", "reward": {"version": 1, "components": [{"type": "asserts", "asserts": ["assert f() == 1"]}], "penalties": {"timeout": 0.25}}}"#;

fn sample(task_id: &str, completion: &str, line: usize) -> Sample {
    Sample {
        task_id: task_id.into(),
        completion: completion.into(),
        line,
    }
}

/// `codegym evaluate`'s (and `tasks check`'s) engine: one run per unit-test sample, the plain run
/// only where the reward reads it (an output component, a penalty).
async fn the_evaluate_command(runs: &AtomicU64) {
    let scorer = tokio::task::spawn_blocking(|| Scorer::new(&CodingConfig::default()))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("scorer setup failed: {e}"));
    let tasks = TaskSet::parse(TASKS, std::path::Path::new("inline.jsonl")).unwrap();
    // Distinct programs: identical ones would share one verdict.
    let samples = vec![
        sample("tests", "def f():\n    return 1\n", 1),
        sample("tests", "def f():\n    return 1  # again\n", 2),
        sample("tests", "def f():\n    return 2\n", 3),
        sample("stdout", "print(1)\n", 4),
        sample("tests-with-a-penalty", "def f():\n    return 1\n", 5),
    ];
    let before = runs.load(Ordering::SeqCst);
    let results = evaluate_samples(&scorer, &tasks, samples, scorer.options())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let passed: Vec<bool> = results.iter().map(|r| r.passed).collect();
    assert_eq!(passed, [true, true, false, true, true]);
    // A harness run per unit-test sample, the stdout task's plain run, and for the task whose
    // penalty reads the plain run, both.
    assert_eq!(runs.load(Ordering::SeqCst) - before, 3 + 1 + 2);
}

const HUMANEVAL: &str = r#"{"task_id": "HumanEval/0", "prompt": "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n", "canonical_solution": "    return a + b\n", "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n", "entry_point": "add"}"#;

/// One `/submit`: the answer and the runs it cost.
async fn submit(
    server: &HttpServer,
    runs: &AtomicU64,
    dataset: &str,
    id: &str,
    completion: &str,
) -> (serde_json::Value, u64) {
    let before = runs.load(Ordering::SeqCst);
    let body: serde_json::Value = reqwest::Client::new()
        .post(format!("http://{}/submit", server.http))
        .json(&json!({"dataset": dataset, "id": id, "completion": completion, "config": {}}))
        .send()
        .await
        .expect("POST /submit")
        .json()
        .await
        .expect("a JSON answer");
    (body, runs.load(Ordering::SeqCst) - before)
}

/// SandboxFusion's `/submit`: a unit-test task's program runs once, under its tests, and its
/// `exec_info` reports the verdict (a failing test's error in `stderr`, a non-zero return code);
/// a task whose reward reads the program's own run reports that run.
async fn the_submit_endpoint(runs: &AtomicU64) {
    let dir = tempfile::tempdir().unwrap();
    let (he, native) = (
        dir.path().join("HumanEval.jsonl"),
        dir.path().join("tasks.jsonl"),
    );
    std::fs::write(&he, HUMANEVAL).unwrap();
    std::fs::write(&native, TASKS.lines().nth(1).unwrap()).unwrap();
    let files = BTreeMap::from([
        ("humaneval_python".to_string(), he),
        ("mine".to_string(), native),
    ]);
    let options = codegym::http::HttpOptions {
        datasets: Datasets::load(&files).expect("the fixture datasets load"),
        ..Default::default()
    };
    let server = HttpServer::start(ServerConfig::default(), options).await;
    for (completion, accepted) in [("    return a + b\n", true), ("    return a - b\n", false)] {
        let (body, n) = submit(&server, runs, "humaneval_python", "HumanEval/0", completion).await;
        assert_eq!((n, &body["accepted"]), (1, &json!(accepted)), "{body}");
        let exec = &body["tests"][0]["exec_info"];
        let run = &exec["run_result"];
        assert_eq!(run["status"], "Finished", "{body}");
        let (status, code) = if accepted {
            ("Success", 0)
        } else {
            ("Failed", 1)
        };
        assert_eq!(
            (&exec["status"], &run["return_code"]),
            (&json!(status), &json!(code))
        );
        assert_eq!(run["stdout"], "", "{body}");
        if !accepted {
            let stderr = run["stderr"].as_str().unwrap();
            assert!(stderr.contains("AssertionError"), "{body}");
        }
    }
    let (body, n) = submit(&server, runs, "mine", "stdout", "print(1)\n").await;
    assert_eq!((n, &body["accepted"]), (1, &json!(true)), "{body}");
    assert_eq!(
        body["tests"][0]["exec_info"]["run_result"]["stdout"], "1\n",
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_test_sample_runs_once_where_nothing_reads_its_observation() {
    let runs = Arc::new(AtomicU64::new(0));
    metrics::set_global_recorder(Executions(runs.clone())).expect("the only recorder");
    the_evaluate_command(&runs).await;

    let registry = codegym::registry(CodingConfig::default()).unwrap();
    let server = TestServer::start(registry, Default::default()).await;
    let mut c = server.client().await;
    let evaluate = |kwargs: &str| v1::EvaluateRequest {
        env_id: "codegym/Code-v0".into(),
        kwargs_json: kwargs.into(),
        items: programs(),
    };

    let before = runs.load(Ordering::SeqCst);
    let observed = c.evaluate(evaluate("")).await.unwrap().into_inner().results;
    let observed_runs = runs.load(Ordering::SeqCst) - before;
    let before = runs.load(Ordering::SeqCst);
    let blind = c
        .evaluate(evaluate(r#"{"observe": false}"#))
        .await
        .unwrap()
        .into_inner()
        .results;
    let blind_runs = runs.load(Ordering::SeqCst) - before;

    let (observed, blind) = (outcomes(&observed), outcomes(&blind));
    assert_eq!((observed[0].0, observed[1].0), (1.0, 0.0), "{observed:?}");
    for (o, b) in observed.iter().zip(&blind) {
        assert_eq!((o.0, &o.1), (b.0, &b.1), "same reward and breakdown");
        assert_eq!(
            (o.2.as_str(), b.2.as_str()),
            ("loaded\n", ""),
            "observation only when asked"
        );
    }
    // Each sample: its plain run and its harness run, or the harness run alone.
    assert_eq!((observed_runs, blind_runs), (4, 2));

    // A script-mode env step the same way (the env and `Evaluate` share the rule).
    let make = v1::MakeRequest {
        env_id: "codegym/Code-v0".into(),
        kwargs_json: r#"{"observe": false}"#.into(),
    };
    let id = c.make(make).await.unwrap().into_inner().session_id;
    let reset = v1::ResetRequest {
        session_id: id.clone(),
        seed: None,
        options_json: programs()[0].options_json.clone(),
    };
    c.reset(reset).await.unwrap();
    let before = runs.load(Ordering::SeqCst);
    let src = "def f():\n    return 1\nprint('stepped')\n";
    let step = c
        .step(v1::StepRequest {
            session_id: id,
            action: Some(value_to_proto(&Value::Text(src.into()))),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(runs.load(Ordering::SeqCst) - before, 1);
    let Value::Execution(run) = value_from_proto(step.observation.unwrap()).unwrap() else {
        panic!("execution")
    };
    assert_eq!(
        (step.reward, step.terminated, run.stdout.as_str()),
        (1.0, true, "")
    );

    the_submit_endpoint(&runs).await;
}

#[tokio::test]
async fn observe_false_is_refused_where_it_means_nothing() {
    let registry = codegym::registry(CodingConfig::default()).unwrap();
    let server = TestServer::start(registry, Default::default()).await;
    let mut c = server.client().await;
    for kwargs in [
        r#"{"mode": "session", "observe": false}"#,
        r#"{"grade": false, "observe": false}"#,
        r#"{"observe": "no"}"#,
    ] {
        let err = c
            .make(v1::MakeRequest {
                env_id: "codegym/Code-v0".into(),
                kwargs_json: kwargs.into(),
            })
            .await
            .expect_err(kwargs);
        assert_eq!(err.code(), Code::InvalidArgument, "{kwargs}: {err:?}");
        assert!(err.message().contains("observe"), "{kwargs}: {err:?}");
    }
}
