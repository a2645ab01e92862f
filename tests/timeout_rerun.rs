//! False timeouts through `Evaluate` on a real `codegym serve` over TCP: a judged program whose
//! first run is stalled past its wall-clock backstop (without using its CPU) passes on its re-run,
//! with the re-run in the breakdown; with `coding.timeout_rerun.enabled: false` in the server's
//! `--config` the same program keeps its timeout, listed without a re-run; a busy loop is never
//! re-run. The stall is real: the program sleeps while the clock is before an instant the test
//! picks, a few seconds ahead (see `env-coding/tests/timeouts.rs`).

#[path = "support/codegym_bin.rs"]
mod codegym_bin;
mod support;

use std::time::{SystemTime, UNIX_EPOCH};

use codegym_bin::Serve;
use env_core::Value;
use proto::convert::value_to_proto;
use proto::v1;
use proto::v1::env_service_client::EnvServiceClient;
use serde_json::json;

const SUM: &str = "a, b = map(int, input().split())\nprint(a + b)\n";

/// A task file (one judged task, CPU limit 1 s, wall backstop 3 s) and a config per policy.
fn fixture(dir: &std::path::Path) {
    let task = json!({"schema_version": 1, "id": "sum", "prompt": "Print the sum of two integers.",
        "reward": {"version": 1, "components": [{"type": "judge", "time_limit_ms": 1000,
            "tests": [{"input": "1 2\n", "output": "3\n"}]}]}});
    std::fs::write(dir.join("tasks.jsonl"), format!("{task}\n")).unwrap();
    for (name, enabled) in [("on.json", true), ("off.json", false)] {
        let config = json!({"coding": {"task_dirs": [dir], "verdict_cache_mib": 0,
            "timeout_rerun": {"enabled": enabled}}});
        std::fs::write(dir.join(name), config.to_string()).unwrap();
    }
}

/// `SUM`, sleeping while the clock is before `ahead_s` seconds from now.
fn slow_until(ahead_s: f64) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let until = now.as_secs_f64() + ahead_s;
    format!("import time\nif time.time() < {until:.3}:\n    time.sleep(600)\n{SUM}")
}

/// `Evaluate` of `programs` on the task: each item's (reward, breakdown).
async fn evaluate(
    server: &Serve,
    dir: &std::path::Path,
    programs: &[String],
) -> Vec<(f64, serde_json::Value)> {
    let mut c = EnvServiceClient::connect(server.url())
        .await
        .expect("connect");
    // The plain run (the observation) gets the judge's limits too, so no run waits 15 s.
    let kwargs = json!({"tasks": dir.join("tasks.jsonl"), "extract": "raw",
        "limits": {"cpu_ms": 1000, "wall_ms": 3000}});
    let request = v1::EvaluateRequest {
        env_id: "codegym/Code-v0".into(),
        kwargs_json: kwargs.to_string(),
        items: programs
            .iter()
            .map(|p| v1::EvaluateItem {
                seed: None,
                options_json: json!({"task_id": "sum"}).to_string(),
                action: Some(value_to_proto(&Value::Text(p.clone()))),
            })
            .collect(),
    };
    let results = c.evaluate(request).await.expect("Evaluate").into_inner();
    results
        .results
        .iter()
        .map(|r| {
            let (step, info) = support::evaluated(r);
            (step.reward, info["reward_breakdown"].clone())
        })
        .collect()
}

/// The breakdown's re-run record of the judge's test.
fn judge_rerun(breakdown: &serde_json::Value) -> serde_json::Value {
    breakdown["timeout_reruns"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["run"] == "component 0 test 0"))
        .cloned()
        .unwrap_or_else(|| panic!("no re-run of the judge's test in {breakdown}"))
}

#[tokio::test]
async fn evaluate_reruns_false_timeouts_unless_configured_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    fixture(dir.path());
    let config = |name: &str| dir.path().join(name).display().to_string();
    let busy = "while True:\n    pass\n".to_string();

    let on = Serve::start(["--addr", "127.0.0.1:0", "--config", &config("on.json")]).await;
    // The first runs start well before the instant (2 s ahead) and are killed after it (3 s).
    let v = evaluate(&on, dir.path(), &[slow_until(2.0), busy.clone()]).await;
    let (reward, breakdown) = &v[0];
    assert_eq!(*reward, 1.0, "{breakdown}");
    assert_eq!(
        breakdown["components"][0]["detail"]["verdicts"],
        json!(["AC"])
    );
    // The plain run (no input) stalled too, but no component reads it: it is not re-run.
    assert_eq!(
        breakdown["timeout_reruns"].as_array().map(Vec::len),
        Some(1)
    );
    let r = judge_rerun(breakdown);
    assert!(r["first_wall_ms"].as_u64().unwrap() >= 3_000, "{r}");
    assert!(r["first_cpu_ms"].as_u64().unwrap() < 900, "{r}");
    assert_eq!(r["rerun"]["timed_out"], false, "{r}");
    let (reward, breakdown) = &v[1];
    assert_eq!(*reward, 0.0, "{breakdown}");
    assert_eq!(
        breakdown["components"][0]["detail"]["verdicts"],
        json!(["TLE"])
    );
    assert!(breakdown.get("timeout_reruns").is_none(), "{breakdown}");

    let off = Serve::start(["--addr", "127.0.0.1:0", "--config", &config("off.json")]).await;
    let v = evaluate(&off, dir.path(), &[slow_until(2.0)]).await;
    let (reward, breakdown) = &v[0];
    assert_eq!(*reward, 0.0, "{breakdown}");
    assert_eq!(
        breakdown["components"][0]["detail"]["verdicts"],
        json!(["TLE"])
    );
    assert_eq!(judge_rerun(breakdown)["rerun"], serde_json::Value::Null);
}
