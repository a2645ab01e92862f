//! The engine's side of `--cross-check`: which steps it hands to the checker, that a check runs
//! beside the episode (its next model call does not wait), that a failing checker is an `error`
//! that changes no reward, and that the same seed checks the same steps. The env and its scoring
//! are real (sandboxed Python); the checkers here are the test's own, so the engine's part is
//! seen alone (the coding env's checker end to end: the root `tests/cross_check.rs`).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_llm::{FakeLlm, FakeScript, Reply, Rule};
use rollout::config::RolloutConfig;
use rollout::cross_check::{CheckFuture, CrossCheck};
use rollout::dataset::read_latest;
use rollout::dataset::record::{
    CrossCheckOutcome, CrossCheckRecord, OnDisagreement, StopReason, TrajectoryRecord,
};
use rollout::{EnvBackend, run_checked};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// `square` gamed: right on the tests' one input, wrong everywhere else.
const GAMED: &str = "def square(x):\n    return 4\n";

/// A HumanEval-style `square` task whose tests are `asserts` (each one test: partial credit).
fn task(id: &str, prompt: &str, asserts: &[&str]) -> serde_json::Value {
    let code = format!(
        "def check(candidate):\n{}",
        asserts
            .iter()
            .map(|a| format!("    assert {a}\n"))
            .collect::<String>()
    );
    json!({
        "schema_version": 1, "id": id, "prompt": prompt,
        "reward": {"version": 1, "components": [
            {"type": "check_function", "entry_point": "square", "code": code}]},
        "reference_solution": "def square(x):\n    return x * x\n",
    })
}

/// The task file: `weak` (one test, which the gamed program passes: solved) and `half` (two
/// tests, the gamed program passes one: a reward of 0.5, not solved, so the episode goes on).
fn tasks_file(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("tasks.jsonl");
    let mut f = std::fs::File::create(&path).unwrap();
    for t in [
        task("weak", "Write square(x) (weak).", &["candidate(2) == 4"]),
        task(
            "half",
            "Write square(x) (half).",
            &["candidate(2) == 4", "candidate(3) == 9"],
        ),
    ] {
        writeln!(f, "{t}").unwrap();
    }
    path
}

fn registry(tasks: &std::path::Path) -> Arc<env_core::Registry> {
    let mut registry = env_core::Registry::new();
    let config = env_coding::CodingConfig {
        tasks: tasks.display().to_string(),
        ..env_coding::CodingConfig::default()
    };
    env_coding::register(&mut registry, config).expect("register the coding env");
    Arc::new(registry)
}

/// Every prompt answered with the gamed program.
async fn gaming_model() -> FakeLlm {
    FakeLlm::start(FakeScript {
        rules: vec![Rule {
            prompt_contains: Some("Write square(x)".into()),
            turn: None,
            reply: Reply::code(GAMED),
        }],
        ..FakeScript::default()
    })
    .await
    .unwrap()
}

fn config(base_url: &str, tasks: &[&str], samples: u32, out: &std::path::Path) -> RolloutConfig {
    let mut c = RolloutConfig::default();
    c.model.model = "test-org/test-model:fastest".into();
    c.model.base_urls = vec![base_url.to_string()];
    c.model.api_key_env = Some(Vec::new());
    c.model.request_timeout_secs = 60.0;
    c.tasks = tasks.iter().map(|t| t.to_string()).collect();
    c.samples = samples;
    c.concurrency = 4;
    c.seed = 5;
    c.episode.max_turns = 2;
    c.episode_timeout_secs = 120.0;
    c.output.out = out.to_path_buf();
    c.output.progress = rollout::config::ProgressMode::Off;
    c.cross_check.fraction = 1.0;
    c
}

/// What a test checker was asked: (task, program, language).
type Calls = Arc<Mutex<Vec<(String, String, String)>>>;

/// A checker whose machinery always fails.
struct Broken(Calls);

impl CrossCheck for Broken {
    fn covers(&self, _task_id: &str) -> bool {
        true
    }

    fn check<'a>(
        &'a self,
        task_id: &'a str,
        program: &'a str,
        language: &'a str,
    ) -> CheckFuture<'a> {
        let call = (
            task_id.to_string(),
            program.to_string(),
            language.to_string(),
        );
        self.0.lock().unwrap().push(call);
        Box::pin(async { Err("sandbox: the fork server is gone".into()) })
    }
}

fn steps(r: &TrajectoryRecord) -> impl Iterator<Item = &rollout::dataset::record::EnvStepRecord> {
    r.turns.iter().flat_map(|t| &t.env_steps)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_check_is_an_error_and_changes_no_reward() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = tasks_file(dir.path());
    let server = gaming_model().await;
    let out = dir.path().join("run.jsonl");
    let mut c = config(&server.base_url(), &["weak"], 2, &out);
    // Even the harshest penalty: a failure of the machinery is no verdict.
    c.cross_check.on_disagreement = OnDisagreement::Zero;
    let calls = Calls::default();
    let checker: Arc<dyn CrossCheck> = Arc::new(Broken(calls.clone()));
    run_checked(
        c,
        EnvBackend::in_process(registry(&tasks)),
        Some(checker),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let records = read_latest(&out).unwrap();
    assert_eq!(records.len(), 2);
    for r in &records {
        assert_eq!(r.stop_reason, StopReason::Solved);
        assert!(r.solved && r.total_reward == 1.0 && r.final_reward == 1.0);
        let step = steps(r).next().unwrap();
        let check = step
            .cross_check
            .as_ref()
            .expect("the rewarded step was checked");
        assert_eq!(check.outcome, CrossCheckOutcome::Error);
        assert_eq!(
            check.why.as_deref(),
            Some("sandbox: the fork server is gone")
        );
        assert_eq!(
            (check.action, check.original_reward, step.reward),
            (OnDisagreement::Keep, 1.0, 1.0)
        );
    }
    // The checker saw the program the env scored (the step's action), in its language.
    let ran = steps(&records[0])
        .next()
        .unwrap()
        .action
        .code()
        .unwrap()
        .to_string();
    assert!(ran.starts_with(GAMED), "{ran:?}");
    let calls = calls.lock().unwrap();
    assert_eq!(calls.len(), 2);
    assert!(
        calls
            .iter()
            .all(|c| c == &("weak".to_string(), ran.clone(), "python".to_string())),
        "{calls:?}"
    );
}

/// A checker that answers only once the model has been asked `n` times: a check on the episode's
/// critical path would wait for a request that never comes.
struct WaitsForTheModel {
    server: Arc<FakeLlm>,
    n: u64,
}

impl CrossCheck for WaitsForTheModel {
    fn covers(&self, _task_id: &str) -> bool {
        true
    }

    fn check<'a>(&'a self, _: &'a str, _: &'a str, _: &'a str) -> CheckFuture<'a> {
        Box::pin(async move {
            while self.server.request_count() < self.n {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Ok(CrossCheckRecord::compared(7, Vec::new()))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_runs_beside_the_episode_and_is_joined_before_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = tasks_file(dir.path());
    let server = Arc::new(gaming_model().await);
    let out = dir.path().join("run.jsonl");
    // `half`: the first step earns 0.5 and is checked; the episode's second model call must go
    // out while that check waits for it.
    let c = config(&server.base_url(), &["half"], 1, &out);
    let checker: Arc<dyn CrossCheck> = Arc::new(WaitsForTheModel {
        server: server.clone(),
        n: 2,
    });
    let run = run_checked(
        c,
        EnvBackend::in_process(registry(&tasks)),
        Some(checker),
        CancellationToken::new(),
    );
    tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the episode's next model call waited for the cross-check")
        .unwrap();
    let r = &read_latest(&out).unwrap()[0];
    assert_eq!(r.stop_reason, StopReason::MaxTurns);
    let checked: Vec<_> = steps(r)
        .map(|s| s.cross_check.as_ref().map(|c| (c.outcome, c.inputs)))
        .collect();
    // Both steps earned 0.5; both were checked, and the record carries both outcomes.
    assert_eq!(
        checked,
        [
            Some((CrossCheckOutcome::Agree, 7)),
            Some((CrossCheckOutcome::Agree, 7))
        ]
    );
}

/// A checker that records which task it was asked about and always agrees.
struct Agrees(Calls);

impl CrossCheck for Agrees {
    fn covers(&self, task_id: &str) -> bool {
        // `half` stands for a task without a reference here: never checked.
        task_id != "half"
    }

    fn check<'a>(
        &'a self,
        task_id: &'a str,
        program: &'a str,
        language: &'a str,
    ) -> CheckFuture<'a> {
        let call = (
            task_id.to_string(),
            program.to_string(),
            language.to_string(),
        );
        self.0.lock().unwrap().push(call);
        Box::pin(async { Ok(CrossCheckRecord::compared(1, Vec::new())) })
    }
}

/// The episode ids whose steps carry a check.
fn checked_episodes(out: &std::path::Path) -> Vec<String> {
    let mut ids: Vec<String> = read_latest(out)
        .unwrap()
        .iter()
        .filter(|r| steps(r).any(|s| s.cross_check.is_some()))
        .map(|r| r.episode_id.clone())
        .collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_seed_checks_the_same_steps_and_uncovered_tasks_none() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = tasks_file(dir.path());
    let server = gaming_model().await;
    let registry = registry(&tasks);
    let mut runs = Vec::new();
    for name in ["a", "b"] {
        let out = dir.path().join(format!("{name}.jsonl"));
        let mut c = config(&server.base_url(), &["weak", "half"], 8, &out);
        c.cross_check.fraction = 0.5;
        let calls = Calls::default();
        let checker: Arc<dyn CrossCheck> = Arc::new(Agrees(calls.clone()));
        run_checked(
            c,
            EnvBackend::in_process(registry.clone()),
            Some(checker),
            CancellationToken::new(),
        )
        .await
        .unwrap();
        assert!(
            calls.lock().unwrap().iter().all(|c| c.0 == "weak"),
            "an uncovered task was checked"
        );
        runs.push(checked_episodes(&out));
    }
    assert_eq!(runs[0], runs[1], "the same seed checked other steps");
    // Half of the 8 rewarded `weak` steps, about: some, not all.
    assert!((1..8).contains(&runs[0].len()), "{:?}", runs[0]);
    assert!(runs[0].iter().all(|id| id.starts_with("weak#")));
}
