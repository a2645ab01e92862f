//! `codegym rollout --mode autocoder` end to end (issue 13): the real binary against a real
//! `codegym serve --packages` (the remote backend: the model's tests and the final solution reach the
//! server as reset options and steps over gRPC) and the fake model. pytest comes from PyPI through
//! the server's package cache. The binaries run through `support/codegym_bin.rs`.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;

use codegym_bin::{Serve, finish, spawn};
use fake_llm::{FakeLlm, FakeScript, Reply, Rule};
use rollout::dataset::read_latest;
use rollout::dataset::record::{
    ActionRecord, Diagnosis, EpisodeMode, SCHEMA_VERSION, Stage, StopReason,
};
use serde_json::json;

const WRONG: &str = "def greeting():\n    return \"Hello world\"\n\n\nif __name__ == \"__main__\":\n    print(greeting())\n";
const GOOD: &str = "def greeting():\n    return \"Hello, world!\"\n\n\nif __name__ == \"__main__\":\n    print(greeting())\n";
const TESTS: &str = "from program import greeting\n\n\ndef test_greeting():\n    assert greeting() == \"Hello, world!\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autocoder_over_a_remote_server_fixes_the_logic_and_is_rewarded_by_the_task() {
    let replies = [
        json!({"plan": "Return the greeting; print it."}),
        json!({"code": WRONG, "requirements": []}),
        json!({"tests": TESTS}),
        json!({"kind": "logic", "explanation": "the comma is missing"}),
        json!({"code": GOOD, "requirements": []}),
    ];
    let model = FakeLlm::start(FakeScript {
        rules: replies
            .into_iter()
            .enumerate()
            .map(|(turn, v)| Rule {
                prompt_contains: None,
                turn: Some(turn),
                reply: Reply::Json(v),
            })
            .collect(),
        ..FakeScript::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("serve.json");
    let cache = std::env::temp_dir().join("codegym-test-autocoder-packages");
    std::fs::write(
        &config,
        json!({"coding": {"packages": {"cache_dir": cache}}}).to_string(),
    )
    .unwrap();
    let config = config.display().to_string();
    let mut serve =
        Serve::start(["--addr", "127.0.0.1:0", "--packages", "--config", &config]).await;

    let out = dir.path().join("autocoder.jsonl");
    let (code, _, stderr) = finish(spawn([
        "rollout",
        "--mode",
        "autocoder",
        "--model",
        "test-org/test-model",
        "--base-url",
        &model.base_url(),
        "--api-key-env",
        "CODEGYM_TEST_UNSET_KEY",
        "--task-ids",
        "hello-world",
        "--max-turns",
        "3",
        "--progress",
        "off",
        "--env-server",
        &serve.url(),
        "--out",
        &out.display().to_string(),
    ]))
    .await;
    assert_eq!(code, 0, "{stderr}");
    let records = read_latest(&out).unwrap();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(
        (r.schema_version, r.mode),
        (SCHEMA_VERSION, EpisodeMode::Autocoder)
    );
    let stages: Vec<_> = r.turns.iter().filter_map(|t| t.stage.as_ref()).collect();
    assert_eq!(
        stages.iter().map(|s| s.stage).collect::<Vec<_>>(),
        [
            Stage::Plan,
            Stage::Solution,
            Stage::Tests,
            Stage::Diagnose,
            Stage::Fix
        ]
    );
    let pass_rates: Vec<f64> = stages
        .iter()
        .filter_map(|s| s.model_tests.as_ref().map(|m| m.pass_rate))
        .collect();
    assert_eq!(pass_rates, [0.0, 1.0]);
    let ac = r.autocoder.as_ref().expect("the autocoder summary");
    assert_eq!(ac.diagnoses, [Diagnosis::Logic]);
    let last = r.turns.iter().flat_map(|t| &t.env_steps).last().unwrap();
    assert!(matches!(&last.action, ActionRecord::RunPython { code } if code == GOOD));
    assert_eq!(r.stop_reason, StopReason::Solved);
    assert_eq!(r.final_reward, 1.0);
    serve.child.start_kill().expect("stop the server");
}
