//! Batch scoring as trainers use it, through a real gRPC server with real sandboxed Python: identical
//! submissions share one verdict (a GRPO group's duplicates run once, within and across batches, and
//! never across tasks, limits or non-deterministic tasks), and `EvaluateStream` delivers each item's
//! result as it finishes with the same verdicts as `Evaluate`.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use env_core::Value;
use proto::convert::value_to_proto;
use proto::v1;
use support::TestServer;
use tonic::Code;

const HELLO: &str = "print('Hello, world!')";

fn registry(verdict_cache_mib: u64) -> env_core::Registry {
    let config = env_coding::CodingConfig {
        verdict_cache_mib,
        ..Default::default()
    };
    codegym::registry(config).expect("registry with the coding env")
}

fn item(options: &str, src: &str) -> v1::EvaluateItem {
    v1::EvaluateItem {
        seed: None,
        options_json: options.into(),
        action: Some(value_to_proto(&Value::Text(src.into()))),
    }
}

fn hello(src: &str) -> v1::EvaluateItem {
    item(r#"{"task_id": "hello-world"}"#, src)
}

fn request(kwargs: &str, items: Vec<v1::EvaluateItem>) -> v1::EvaluateRequest {
    v1::EvaluateRequest {
        env_id: "codegym/Code-v0".into(),
        kwargs_json: kwargs.into(),
        items,
    }
}

/// (reward, cache_hit) of each result; panics on an item error.
fn verdicts(results: &[v1::EvaluateResult]) -> Vec<(f64, bool)> {
    results
        .iter()
        .map(|r| {
            let (step, info) = support::evaluated(r);
            let hit = info["cache_hit"]
                .as_bool()
                .unwrap_or_else(|| panic!("no cache_hit in {info}"));
            (step.reward, hit)
        })
        .collect()
}

#[tokio::test]
async fn identical_submissions_run_once_and_share_the_verdict() {
    let server = TestServer::start(registry(64), Default::default()).await;
    let mut c = server.client().await;
    let group = || {
        let mut items: Vec<_> = (0..6).map(|_| hello(HELLO)).collect();
        items.extend((0..3).map(|_| hello("print('hello')")));
        items
    };
    let first = c.evaluate(request("", group())).await.unwrap().into_inner();
    let v = verdicts(&first.results);
    let (right, wrong) = v.split_at(6);
    assert!(right.iter().all(|&(r, _)| r == 1.0), "{v:?}");
    assert!(wrong.iter().all(|&(r, _)| r < 1.0), "{v:?}");
    // Exactly one item of each distinct program ran; the others waited for its verdict.
    assert_eq!(right.iter().filter(|(_, hit)| !hit).count(), 1, "{v:?}");
    assert_eq!(wrong.iter().filter(|(_, hit)| !hit).count(), 1, "{v:?}");
    // A hit is the same verdict, output included.
    let outputs: BTreeSet<_> = first.results[..6]
        .iter()
        .map(|r| format!("{:?}", r.step.as_ref().unwrap().observation))
        .collect();
    assert_eq!(outputs.len(), 1, "{outputs:?}");

    // The next batch (a later training step re-scoring the same programs) runs nothing.
    let again = c.evaluate(request("", group())).await.unwrap().into_inner();
    let v2 = verdicts(&again.results);
    assert!(v2.iter().all(|&(_, hit)| hit), "{v2:?}");
    assert_eq!(
        v.iter().map(|p| p.0).collect::<Vec<_>>(),
        v2.iter().map(|p| p.0).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn different_tasks_limits_or_programs_never_share() {
    let server = TestServer::start(registry(64), Default::default()).await;
    let mut c = server.client().await;
    let same_program_other_task = item(r#"{"task_id": "sum-of-squares"}"#, HELLO);
    let first = c
        .evaluate(request(
            "",
            vec![
                hello(HELLO),
                same_program_other_task,
                hello("print('Hello, world!') "),
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(verdicts(&first.results).iter().all(|&(_, hit)| !hit));
    // Same task and program under other limits: a different verdict may follow, so it runs again.
    let tighter = c
        .evaluate(request(
            r#"{"limits": {"wall_ms": 2999}}"#,
            vec![hello(HELLO)],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(verdicts(&tighter.results), vec![(1.0, false)]);
    // An inline task with the same id but other expectations is another task.
    let inline = r#"{"task": {"id": "hello-world", "prompt": "p", "reward": {"version": 1,
        "components": [{"type": "contains", "text": "Bye"}]}}}"#;
    let other = c
        .evaluate(request("", vec![item(inline, HELLO)]))
        .await
        .unwrap()
        .into_inner();
    let v = verdicts(&other.results);
    assert_eq!(v.len(), 1);
    assert!(!v[0].1 && v[0].0 < 1.0, "{v:?}");
}

#[tokio::test]
async fn non_deterministic_tasks_and_a_disabled_cache_always_run() {
    let server = TestServer::start(registry(64), Default::default()).await;
    let mut c = server.client().await;
    let inline = r#"{"task": {"id": "dice", "prompt": "p", "deterministic": false,
        "reward": {"version": 1, "components": [{"type": "exit_code"}]}}}"#;
    let roll = "import random; print(random.random())";
    for _ in 0..2 {
        let items = (0..3).map(|_| item(inline, roll)).collect();
        let out = c.evaluate(request("", items)).await.unwrap().into_inner();
        assert!(verdicts(&out.results).iter().all(|&(_, hit)| !hit));
    }

    let off = TestServer::start(registry(0), Default::default()).await;
    let mut c = off.client().await;
    let items = (0..3).map(|_| hello(HELLO)).collect();
    let out = c.evaluate(request("", items)).await.unwrap().into_inner();
    assert_eq!(verdicts(&out.results), vec![(1.0, false); 3]);
}

#[tokio::test]
async fn evaluate_stream_sends_results_as_they_finish() {
    let server = TestServer::start(registry(0), Default::default()).await;
    let mut c = server.client().await;
    let slow = "import time; time.sleep(1.5); print('Hello, world!')";
    let items = || {
        let mut malformed = hello(HELLO);
        malformed.action = None;
        vec![hello(slow), hello(HELLO), malformed, hello("print('nope')")]
    };
    let mut stream = c
        .evaluate_stream(request("", items()))
        .await
        .unwrap()
        .into_inner();
    let mut order = Vec::new();
    let mut by_index = std::collections::BTreeMap::new();
    while let Some(msg) = stream.message().await.unwrap() {
        order.push(msg.index);
        by_index.insert(msg.index, msg.result.unwrap());
    }
    assert_eq!(order.len(), 4, "each item exactly once: {order:?}");
    assert_eq!(
        by_index.keys().copied().collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert_eq!(
        order.last(),
        Some(&0),
        "the slow item comes last: {order:?}"
    );
    assert_eq!(
        by_index[&2].error.as_ref().map(|e| e.code),
        Some(Code::InvalidArgument as i32)
    );

    // The same verdicts as the unary call.
    let unary = c.evaluate(request("", items())).await.unwrap().into_inner();
    for (i, r) in unary.results.iter().enumerate() {
        let streamed = &by_index[&(i as u32)];
        assert_eq!(
            r.step.as_ref().map(|s| s.reward),
            streamed.step.as_ref().map(|s| s.reward),
            "item {i}"
        );
        assert_eq!(r.error.is_some(), streamed.error.is_some(), "item {i}");
    }
}

#[tokio::test]
async fn evaluate_stream_reports_whole_call_failures_as_statuses() {
    let server = TestServer::start(registry(0), Default::default()).await;
    let mut c = server.client().await;
    let mut unknown = request("", vec![hello(HELLO)]);
    unknown.env_id = "codegym/Nope-v0".into();
    assert_eq!(
        c.evaluate_stream(unknown).await.unwrap_err().code(),
        Code::NotFound
    );

    // Bad kwargs are found by the env once the stream is open: the stream ends with the status.
    let mut stream = c
        .evaluate_stream(request(r#"{"mode": 3}"#, vec![hello(HELLO)]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        stream.message().await.unwrap_err().code(),
        Code::InvalidArgument
    );

    // A deadline ends the stream with DEADLINE_EXCEEDED after the fast results were delivered.
    let mut req = tonic::Request::new(request(
        "",
        vec![hello(HELLO), hello("import time; time.sleep(30)")],
    ));
    req.set_timeout(Duration::from_millis(1500));
    let mut stream = c.evaluate_stream(req).await.unwrap().into_inner();
    let first = stream.message().await.unwrap().expect("the fast result");
    assert_eq!(first.index, 0);
    let end = stream.message().await.unwrap_err();
    assert!(
        matches!(end.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{end:?}"
    );

    // The server is unharmed.
    let out = c.evaluate(request("", vec![hello(HELLO)])).await.unwrap();
    assert_eq!(out.into_inner().results.len(), 1);
}

/// One engine, one verdict cache: a program an episode has just stepped is answered from the cache
/// by `Evaluate` (and the other way round), with the same reward and breakdown.
#[tokio::test]
async fn episode_steps_and_evaluate_share_one_verdict_cache() {
    let server = TestServer::start(registry(64), Default::default()).await;
    let mut c = server.client().await;
    let make = v1::MakeRequest {
        env_id: "codegym/Python-v0".into(),
        kwargs_json: String::new(),
    };
    let session_id = c.make(make).await.unwrap().into_inner().session_id;
    let mut step = async |program: &str| {
        let reset = v1::ResetRequest {
            session_id: session_id.clone(),
            seed: None,
            options_json: r#"{"task_id": "hello-world"}"#.into(),
        };
        c.reset(reset).await.unwrap();
        let step = v1::StepRequest {
            session_id: session_id.clone(),
            action: Some(value_to_proto(&Value::Text(program.into()))),
        };
        let step = c.step(step).await.unwrap().into_inner();
        let info: serde_json::Value = serde_json::from_str(&step.info_json).unwrap();
        (step.reward, info)
    };
    let (reward, info) = step(HELLO).await;
    assert_eq!(
        (reward, &info["cache_hit"]),
        (1.0, &serde_json::json!(false))
    );
    let (again, again_info) = step(HELLO).await;
    assert_eq!(again, reward);
    assert_eq!(again_info["cache_hit"], true, "{again_info}");
    assert_eq!(again_info["reward_breakdown"], info["reward_breakdown"]);
    // A shared verdict carries the provenance of the run that produced it.
    assert!(info["provenance"]["task_hash"].is_string(), "{info}");
    assert_eq!(again_info["provenance"], info["provenance"]);

    let mut c = server.client().await;
    let out = c
        .evaluate(request("", vec![hello(HELLO), hello("print('bye')")]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(verdicts(&out.results), vec![(1.0, true), (0.0, false)]);
    let evaluated: serde_json::Value =
        serde_json::from_str(&out.results[0].step.as_ref().unwrap().info_json).unwrap();
    assert_eq!(evaluated["reward_breakdown"], info["reward_breakdown"]);
    // `Evaluate` reports the same provenance as the step it shares a verdict with.
    assert_eq!(evaluated["provenance"], info["provenance"]);
}
