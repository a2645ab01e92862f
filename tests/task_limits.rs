//! A task's own limits (a judge's `time_limit_ms` and `memory_limit_mb`) only ever lower the
//! server's (`coding.sandbox.limits`), never raise them, on every surface: an inline task through
//! gRPC `Evaluate`, and a dataset's task through SandboxFusion's `POST /submit`. The server here
//! allows 2 s of CPU and 256 MiB; a task asking for ten minutes or 100 GiB gets those, and a
//! program that needs more fails, while a task asking for less than the server's gets less.

#[path = "support/http_server.rs"]
mod http_server;
mod support;

use std::collections::BTreeMap;

use codegym::http::HttpOptions;
use codegym::http::datasets::Datasets;
use codegym_sandbox::{Limits, SandboxConfig};
use env_core::Value;
use proto::convert::value_to_proto;
use proto::v1;
use serde_json::{Value as Json, json};
use support::TestServer;

/// The server's limits: 2 s of CPU, 256 MiB.
fn coding() -> env_coding::CodingConfig {
    env_coding::CodingConfig {
        sandbox: SandboxConfig {
            limits: Limits {
                cpu_ms: 2_000,
                wall_ms: 10_000,
                memory_bytes: 256 << 20,
                ..Limits::default()
            },
            ..SandboxConfig::default()
        },
        verdict_cache_mib: 0,
        ..Default::default()
    }
}

/// Doubles its input after spending `cpu_s` seconds of CPU.
fn burns(cpu_s: f64) -> String {
    format!(
        "import time\nwhile time.process_time() < {cpu_s}:\n    pass\nprint(int(input()) * 2)\n"
    )
}

/// Doubles its input holding a string of `mib` MiB.
fn holds(mib: u64) -> String {
    format!("s = 'x' * ({mib} << 20)\nprint(int(input()) * 2 + len(s) * 0)\n")
}

/// A judged task (doubling 21) with `limits` merged into its judge component.
fn task(id: &str, limits: Json) -> Json {
    let mut judge = json!({"type": "judge", "tests": [{"input": "21\n", "output": "42\n"}]});
    judge
        .as_object_mut()
        .unwrap()
        .extend(limits.as_object().unwrap().clone());
    json!({"schema_version": 1, "id": id, "prompt": "Print twice the integer read.",
        "reward": {"version": 1, "components": [judge]}})
}

/// The cases: (task limits, program, whether it must pass).
fn cases() -> Vec<(Json, String, bool)> {
    vec![
        // Asking for ten minutes of CPU gets the server's two seconds (the run is killed at
        // RLIMIT_CPU's hard limit, a second later: a run is PID 1 of its namespace, which the
        // soft limit's SIGXCPU does not end).
        (json!({"time_limit_ms": 600_000}), burns(5.0), false),
        // Asking for 100 GiB gets the server's 256 MiB.
        (json!({"memory_limit_mb": 102_400}), holds(400), false),
        // Within the server's limits, the same programs pass...
        (json!({"time_limit_ms": 600_000}), burns(0.3), true),
        (json!({"memory_limit_mb": 102_400}), holds(100), true),
        // ...unless the task asks for less than the server's (CPU limits act in whole seconds).
        (json!({"time_limit_ms": 1_000}), burns(2.5), false),
        (json!({"memory_limit_mb": 64}), holds(100), false),
    ]
}

/// The judge's verdict in a breakdown.
fn verdict(breakdown: &Json) -> &str {
    breakdown["components"][0]["detail"]["verdicts"][0]
        .as_str()
        .unwrap_or_else(|| panic!("no verdict in {breakdown}"))
}

fn check(i: usize, passed: bool, want: bool, breakdown: &Json) {
    let v = verdict(breakdown);
    assert_eq!(passed, want, "case {i}: {v}: {breakdown}");
    if !want {
        assert!(["TLE", "MLE", "RE"].contains(&v), "case {i}: {breakdown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_tasks_through_evaluate_get_at_most_the_servers_limits() {
    let registry = tokio::task::spawn_blocking(|| codegym::registry(coding()))
        .await
        .unwrap()
        .expect("registry");
    let server = TestServer::start(registry, Default::default()).await;
    let mut c = server.client().await;
    let cases = cases();
    let items = cases
        .iter()
        .enumerate()
        .map(|(i, (limits, program, _))| v1::EvaluateItem {
            seed: None,
            options_json: json!({"task": task(&format!("t{i}"), limits.clone())}).to_string(),
            action: Some(value_to_proto(&Value::Text(program.clone()))),
        })
        .collect();
    let request = v1::EvaluateRequest {
        env_id: "codegym/Code-v0".into(),
        kwargs_json: json!({"extract": "raw"}).to_string(),
        items,
    };
    let out = c.evaluate(request).await.expect("Evaluate").into_inner();
    for (i, ((_, _, want), r)) in cases.iter().zip(&out.results).enumerate() {
        let (step, info) = support::evaluated(r);
        check(i, step.reward == 1.0, *want, &info["reward_breakdown"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dataset_tasks_through_submit_get_at_most_the_servers_limits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.jsonl");
    let cases = cases();
    let lines: Vec<String> = cases
        .iter()
        .enumerate()
        .map(|(i, (limits, _, _))| task(&format!("t{i}"), limits.clone()).to_string())
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    let datasets = Datasets::load(&BTreeMap::from([("limits".to_string(), path)])).unwrap();
    let options = HttpOptions {
        datasets,
        ..Default::default()
    };
    let server = http_server::HttpServer::start_with(coding(), Default::default(), options).await;
    let client = reqwest::Client::new();
    for (i, (_, program, want)) in cases.iter().enumerate() {
        let body = json!({"dataset": "limits", "id": format!("t{i}"), "config": {},
            "completion": format!("```python\n{program}```")});
        let response = client
            .post(format!("http://{}/submit", server.http))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let answer: Json = response.json().await.unwrap();
        let passed = answer["accepted"].as_bool().expect("accepted");
        check(i, passed, *want, &answer["extra"]["reward_breakdown"]);
    }
}
