//! AutoCoder mode (issue 13) against the fake model and the real coding env (sandboxed Python,
//! pytest and packages from the real package cache): each diagnosis branch, the fenced-JSON fallback
//! for an endpoint without `response_format`, and the reward coming only from the task's hidden
//! checks, whatever the model's own tests say.
//!
//! pytest and `tabulate` come from PyPI through the package cache (as in env-coding's package tests);
//! the cache dir is shared by the tests of this binary and reused across runs (content-addressed,
//! safe under concurrent builders).

use std::sync::Arc;

use codegym_sandbox::packages::PackagesConfig;
use codegym_sandbox::{Backend, SandboxConfig};
use env_coding::{CodingConfig, register};
use fake_llm::{FakeLlm, FakeScript, Reply, Rule};
use rollout::dataset::read_latest;
use rollout::dataset::record::{
    ActionRecord, Diagnosis, EpisodeMode, ErrorKind, Stage, StopReason, TrajectoryRecord,
};
use rollout::{EnvBackend, run};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const TASK: &str = "hello-world"; // hidden check: stdout is exactly "Hello, world!\n"

const GOOD: &str = "def greeting():\n    return \"Hello, world!\"\n\n\nif __name__ == \"__main__\":\n    print(greeting())\n";
const WRONG: &str = "def greeting():\n    return \"Hello world\"\n\n\nif __name__ == \"__main__\":\n    print(greeting())\n";
const NEEDS_TABULATE: &str = "import tabulate\n\n\ndef greeting():\n    return \"Hello, world!\"\n\n\nif __name__ == \"__main__\":\n    print(greeting())\n";
const TESTS_OK: &str = "from program import greeting\n\n\ndef test_greeting():\n    assert greeting() == \"Hello, world!\"\n\n\ndef test_type():\n    assert isinstance(greeting(), str)\n";
const TESTS_WRONG: &str = "from program import greeting\n\n\ndef test_greeting():\n    assert greeting() == \"Hello, World\"\n\n\ndef test_type():\n    assert isinstance(greeting(), str)\n";
/// Consistent with [`WRONG`]: they pass, yet the task's check fails.
const TESTS_OF_WRONG: &str = "from program import greeting\n\n\ndef test_greeting():\n    assert greeting() == \"Hello world\"\n";

fn registry(n: u32) -> Arc<env_core::Registry> {
    let mut reg = env_core::Registry::new();
    let config = CodingConfig {
        sandbox: SandboxConfig {
            backend: Backend::Fresh,
            uid_base: 3_100_000 + (std::process::id() % 1000) * 100 + n * 16,
            uid_count: 16,
            ..SandboxConfig::default()
        },
        packages: PackagesConfig {
            enabled: true,
            cache_dir: std::env::temp_dir().join("codegym-test-autocoder-packages"),
            ..PackagesConfig::default()
        },
        ..CodingConfig::default()
    };
    register(&mut reg, config).unwrap_or_else(|e| panic!("register: {e}"));
    Arc::new(reg)
}

/// Replies by turn (the number of assistant messages in the request): one per stage.
fn script(replies: Vec<serde_json::Value>) -> FakeScript {
    FakeScript {
        rules: replies
            .into_iter()
            .enumerate()
            .map(|(turn, v)| Rule {
                prompt_contains: None,
                turn: Some(turn),
                reply: Reply::Json(v),
            })
            .collect(),
        default_reply: Reply::Text("I have nothing more.".into()),
        record_requests: true,
        ..FakeScript::default()
    }
}

fn plan() -> serde_json::Value {
    json!({"plan": "A function returning the greeting; main prints it."})
}

fn code(c: &str, requirements: &[&str]) -> serde_json::Value {
    json!({"code": c, "requirements": requirements})
}

fn tests(t: &str) -> serde_json::Value {
    json!({"tests": t})
}

fn diagnose(kind: &str) -> serde_json::Value {
    json!({"kind": kind, "explanation": "because"})
}

async fn episode(n: u32, server: &FakeLlm, max_turns: u32) -> TrajectoryRecord {
    episode_with(n, server, max_turns, serde_json::Map::new()).await
}

async fn episode_with(
    n: u32,
    server: &FakeLlm,
    max_turns: u32,
    env_kwargs: serde_json::Map<String, serde_json::Value>,
) -> TrajectoryRecord {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.jsonl");
    let mut c = rollout::RolloutConfig::default();
    c.model.model = "test-org/test-model".into();
    c.model.base_urls = vec![server.base_url()];
    c.model.api_key_env = Some(Vec::new());
    c.model.backoff_initial_ms = 1;
    c.model.backoff_max_ms = 50;
    c.tasks = vec![TASK.into()];
    c.env_kwargs = env_kwargs;
    c.episode.mode = EpisodeMode::Autocoder;
    c.episode.max_turns = max_turns;
    // The first build of pytest into the package cache downloads it.
    c.episode_timeout_secs = 600.0;
    c.output.out = out.clone();
    c.output.progress = rollout::config::ProgressMode::Off;
    run(
        c,
        EnvBackend::in_process(registry(n)),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let mut records = read_latest(&out).unwrap();
    assert_eq!(records.len(), 1);
    records.remove(0)
}

fn stages(r: &TrajectoryRecord) -> Vec<Stage> {
    r.turns
        .iter()
        .filter_map(|t| t.stage.as_ref().map(|s| s.stage))
        .collect()
}

/// Pass rates of the model's test runs, in order.
fn runs(r: &TrajectoryRecord) -> Vec<f64> {
    r.turns
        .iter()
        .filter_map(|t| t.stage.as_ref()?.model_tests.as_ref())
        .map(|m| m.pass_rate)
        .collect()
}

/// The final step: the solution's code under the task's hidden check.
fn final_code(r: &TrajectoryRecord) -> String {
    let step = r
        .turns
        .iter()
        .flat_map(|t| &t.env_steps)
        .last()
        .expect("a final step");
    match &step.action {
        ActionRecord::RunPython { code } => code.clone(),
        other => panic!("the last step is not the final solution: {other:?}"),
    }
}

fn assert_common(r: &TrajectoryRecord) {
    assert_eq!(r.schema_version, rollout::dataset::record::SCHEMA_VERSION);
    assert_eq!(r.mode, EpisodeMode::Autocoder);
    // The model's test runs never carry reward: only the final step does.
    let steps: Vec<_> = r.turns.iter().flat_map(|t| &t.env_steps).collect();
    for s in &steps[..steps.len() - 1] {
        assert!(matches!(s.action, ActionRecord::ModelTests { .. }));
        assert_eq!(s.reward, 0.0);
        assert!(s.reward_breakdown.is_none() && !s.info.contains_key("solved"));
    }
    assert_eq!(r.total_reward, r.final_reward);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logic_diagnosis_patches_the_code_until_it_passes() {
    let server = FakeLlm::start(script(vec![
        plan(),
        code(WRONG, &[]),
        tests(TESTS_OK),
        diagnose("logic"),
        code(GOOD, &[]),
    ]))
    .await
    .unwrap();
    let r = episode(0, &server, 3).await;
    assert_common(&r);
    assert_eq!(
        stages(&r),
        [
            Stage::Plan,
            Stage::Solution,
            Stage::Tests,
            Stage::Diagnose,
            Stage::Fix
        ]
    );
    assert_eq!(runs(&r), [0.5, 1.0]);
    let ac = r.autocoder.as_ref().unwrap();
    assert_eq!(ac.diagnoses, [Diagnosis::Logic]);
    assert_eq!(ac.code, GOOD);
    assert_eq!(final_code(&r), GOOD);
    assert!(r.solved && r.final_reward == 1.0, "{:?}", r.stop_reason);
    assert_eq!(r.stop_reason, StopReason::Solved);
    // The diagnosis request showed the model the failing assertion.
    let requests = server.recorded_requests();
    let diag_prompt = requests[3]["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(diag_prompt.contains("Hello world"), "{diag_prompt}");
    assert!(
        requests
            .iter()
            .all(|q| q["response_format"]["type"] == "json_schema")
    );
    assert_eq!(
        requests[3]["response_format"]["json_schema"]["name"],
        "diagnosis"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_diagnosis_adds_the_missing_package() {
    let server = FakeLlm::start(script(vec![
        plan(),
        code(NEEDS_TABULATE, &[]),
        tests(TESTS_OK),
        diagnose("environment"),
        json!({"requirements": ["tabulate==0.9.0"]}),
    ]))
    .await
    .unwrap();
    let r = episode(1, &server, 3).await;
    assert_common(&r);
    let ac = r.autocoder.as_ref().unwrap();
    assert_eq!(ac.diagnoses, [Diagnosis::Environment]);
    assert_eq!(ac.requirements, ["tabulate==0.9.0"]);
    // Without the package the tests could not even import the solution; with it they pass.
    assert_eq!(runs(&r), [0.0, 1.0]);
    let fix = r.turns[4].stage.as_ref().unwrap();
    assert_eq!(fix.diagnosis, Some(Diagnosis::Environment));
    let last_run = &r.turns[4].env_steps[0];
    assert!(
        matches!(&last_run.action, ActionRecord::ModelTests { requirements, .. } if requirements == &["tabulate==0.9.0"])
    );
    // The final solution ran with its requirement: the hidden check passes.
    assert!(r.solved && r.final_reward == 1.0, "{:?}", r.stop_reason);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_diagnosis_fixes_the_tests() {
    let server = FakeLlm::start(script(vec![
        plan(),
        code(GOOD, &[]),
        tests(TESTS_WRONG),
        diagnose("test"),
        tests(TESTS_OK),
    ]))
    .await
    .unwrap();
    let r = episode(2, &server, 3).await;
    assert_common(&r);
    let ac = r.autocoder.as_ref().unwrap();
    assert_eq!(ac.diagnoses, [Diagnosis::Test]);
    assert_eq!(ac.tests, TESTS_OK);
    assert_eq!(runs(&r), [0.5, 1.0]);
    assert_eq!(ac.model_tests_pass_rate, Some(1.0));
    assert_eq!(final_code(&r), GOOD);
    assert!(r.solved && r.final_reward == 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_without_response_format_gets_fenced_json() {
    let mut s = script(vec![plan(), code(GOOD, &[]), tests(TESTS_OK)]);
    s.reject_response_format = true;
    let server = FakeLlm::start(s).await.unwrap();
    let r = episode(3, &server, 2).await;
    assert_common(&r);
    // The refused call is in the record; the stage is asked again without response_format.
    let refused = &r.turns[0];
    assert_eq!(
        refused.model_call.error.as_ref().map(|e| e.kind),
        Some(ErrorKind::BadRequest)
    );
    assert!(refused.stage.as_ref().unwrap().parse_error.is_some());
    assert_eq!(
        stages(&r),
        [Stage::Plan, Stage::Plan, Stage::Solution, Stage::Tests]
    );
    assert!(
        r.turns[1..]
            .iter()
            .all(|t| !t.stage.as_ref().unwrap().structured)
    );
    let requests = server.recorded_requests();
    assert_eq!(requests.len(), 4);
    assert!(requests[0].get("response_format").is_some());
    assert!(
        requests[1..]
            .iter()
            .all(|q| q.get("response_format").is_none())
    );
    let ac = r.autocoder.as_ref().unwrap();
    assert!(ac.fenced_json_fallback);
    assert_eq!(
        ac.plan.as_deref(),
        Some("A function returning the greeting; main prints it.")
    );
    assert_eq!(runs(&r), [1.0]);
    assert!(r.solved && r.final_reward == 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passing_model_tests_do_not_make_a_wrong_solution_pay() {
    let server = FakeLlm::start(script(vec![
        plan(),
        code(WRONG, &[]),
        tests(TESTS_OF_WRONG),
    ]))
    .await
    .unwrap();
    let r = episode(4, &server, 3).await;
    assert_common(&r);
    assert_eq!(runs(&r), [1.0]);
    assert_eq!(
        r.autocoder.as_ref().unwrap().model_tests_pass_rate,
        Some(1.0)
    );
    assert_eq!(r.final_reward, 0.0);
    assert!(!r.solved);
    assert_eq!(r.stop_reason, StopReason::Submitted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_model_tests_do_not_cost_a_right_solution_its_reward() {
    // One run allowed: no diagnosis, the wrong tests stay.
    let server = FakeLlm::start(script(vec![plan(), code(GOOD, &[]), tests(TESTS_WRONG)]))
        .await
        .unwrap();
    let r = episode(5, &server, 1).await;
    assert_common(&r);
    assert_eq!(runs(&r), [0.5]);
    assert_eq!(stages(&r), [Stage::Plan, Stage::Solution, Stage::Tests]);
    assert_eq!(r.final_reward, 1.0);
    assert!(r.solved);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_answers_are_asked_again_then_end_without_code() {
    // Prose where JSON is due, twice at the solution stage: nothing runs, no reward.
    let mut s = script(vec![plan()]);
    s.rules.push(Rule {
        prompt_contains: None,
        turn: None,
        reply: Reply::Text("I would rather not use JSON.".into()),
    });
    let server = FakeLlm::start(s).await.unwrap();
    let r = episode(6, &server, 3).await;
    assert_eq!(stages(&r), [Stage::Plan, Stage::Solution, Stage::Solution]);
    assert!(r.turns[1].stage.as_ref().unwrap().parse_error.is_some());
    assert_eq!(r.stop_reason, StopReason::NoCode);
    assert_eq!(r.final_reward, 0.0);
    assert!(r.turns.iter().all(|t| t.env_steps.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_requirement_is_an_outcome_and_the_solution_is_scored_without_it() {
    // A URL requirement (the server takes plain names only): the tests cannot run and the model is
    // told why; the final solution, which does not need it, is scored without it.
    let server = FakeLlm::start(script(vec![
        plan(),
        code(GOOD, &["git+https://example.com/evil.git"]),
        tests(TESTS_OK),
    ]))
    .await
    .unwrap();
    let r = episode(7, &server, 1).await;
    assert_common(&r);
    let run = r.turns[2]
        .stage
        .as_ref()
        .unwrap()
        .model_tests
        .clone()
        .unwrap();
    let why = run.not_run.expect("the tests did not run");
    assert!(why.contains("evil.git"), "{why}");
    assert_eq!(run.pass_rate, 0.0);
    let step = &r.turns[2].env_steps[0];
    assert!(step.error.is_some() && step.execution.is_none());
    assert_eq!(final_code(&r), GOOD);
    assert!(r.solved && r.final_reward == 1.0, "{:?}", r.error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_mode_envs_run_the_loop_the_same_way() {
    // A persistent interpreter per reset: the runner and the final solution run there.
    let server = FakeLlm::start(script(vec![
        plan(),
        code(WRONG, &[]),
        tests(TESTS_OK),
        diagnose("logic"),
        code(GOOD, &[]),
    ]))
    .await
    .unwrap();
    let kwargs = json!({"mode": "session"}).as_object().cloned().unwrap();
    let r = episode_with(8, &server, 3, kwargs).await;
    assert_common(&r);
    assert_eq!(runs(&r), [0.5, 1.0]);
    assert_eq!(final_code(&r), GOOD);
    assert!(r.solved && r.final_reward == 1.0, "{:?}", r.error);
}
