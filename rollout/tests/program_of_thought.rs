//! Program-of-thought mode (issue 12), the RLM loop, against the real sandbox and the fake model:
//! the task's context reaches the program as a variable, the program's `llm_query` sub-calls are
//! answered by the same fake endpoint and recorded with their tokens under the turn that made them,
//! `FINAL(answer)` ends the episode and the task's reward scores the answer; tool errors are Python
//! exceptions in the program, not engine errors.

mod support;

use std::sync::Arc;

use fake_llm::{FakeLlm, FakeScript, Fault, FaultRule, Reply, Rule};
use rollout::dataset::read_latest;
use rollout::dataset::record::{EpisodeMode, StopReason, TrajectoryRecord};
use rollout::{EnvBackend, run};
use tokio_util::sync::CancellationToken;

const SECRET_TASK: &str = "Find the secret word described in `context`.";
const ERRORS_TASK: &str = "Exercise the tools' errors.";
const SECRET_CONTEXT: &str = "The secret word is a fruit: PINEAPPLE, in capitals.";

/// Two tasks whose data lives only in their metadata's `context`, scored on stdout.
fn write_tasks(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("pot.jsonl");
    let task = |id: &str, prompt: &str, expected: &str| {
        serde_json::json!({
            "id": id, "prompt": prompt,
            "reward": {"version": 1, "components": [{"type": "stdout", "expected": expected}]},
            "metadata": {"context": SECRET_CONTEXT}
        })
        .to_string()
    };
    let text = format!(
        "{}\n{}\n{}\n",
        serde_json::json!({"schema_version": 1, "name": "pot"}),
        task("secret", SECRET_TASK, "PINEAPPLE\n"),
        task("errors", ERRORS_TASK, "never\n"),
    );
    std::fs::write(&path, text).unwrap();
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

fn script() -> FakeScript {
    let rule = |contains: &str, turn: Option<usize>, reply: Reply| Rule {
        prompt_contains: Some(contains.into()),
        turn,
        reply,
    };
    FakeScript {
        rules: vec![
            // The sub-calls (their prompts are built by the programs below).
            rule("SUBQ2:", None, Reply::Text("PINEAPPLE".into())),
            rule("SUBQ:", None, Reply::Text("a pineapple, I think".into())),
            // Turn 0 asks the model about the context; turn 1 asks again and answers.
            rule(
                SECRET_TASK,
                Some(0),
                Reply::code("first = llm_query('SUBQ: ' + context)\nprint('first:', first)\n"),
            ),
            rule(
                SECRET_TASK,
                Some(1),
                Reply::code("FINAL(llm_query('SUBQ2: ' + first).strip())\n"),
            ),
            rule(
                ERRORS_TASK,
                Some(0),
                Reply::code(
                    "try:\n    llm_query(123)\nexcept Exception as e:\n    print('caught:', e)\n\
                     try:\n    llm_query_batched(['SUBQ: x'] * 33)\nexcept Exception as e:\n    print('caught:', e)\n\
                     answers = llm_query_batched(['SUBQ: a', 'SUBQ: b'])\n\
                     print(len(answers), answers[0])\nFINAL('wrong')\n",
                ),
            ),
        ],
        default_reply: Reply::Text("I am done.".into()),
        ..FakeScript::default()
    }
}

async fn play(tasks: &[&str]) -> (Vec<TrajectoryRecord>, FakeLlm, tempfile::TempDir) {
    play_with(tasks, Vec::new()).await
}

async fn play_with(
    tasks: &[&str],
    faults: Vec<FaultRule>,
) -> (Vec<TrajectoryRecord>, FakeLlm, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let task_file = write_tasks(dir.path());
    let server = FakeLlm::start(FakeScript { faults, ..script() })
        .await
        .unwrap();
    let out = dir.path().join("pot-out.jsonl");
    let mut config = support::config(&server.base_url(), &[], 1, &out);
    config.tasks = tasks.iter().map(|t| (*t).to_string()).collect();
    config.episode.mode = EpisodeMode::ProgramOfThought;
    config.episode.max_turns = 3;
    let summary = run(
        config,
        EnvBackend::in_process(registry(&task_file)),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(summary.aggregate.episodes, tasks.len() as u64);
    (read_latest(&out).unwrap(), server, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rlm_episode_queries_the_policy_from_the_sandbox_and_final_ends_it() {
    let (records, server, _dir) = play(&["secret"]).await;
    let r = &records[0];
    assert_eq!(r.mode, EpisodeMode::ProgramOfThought);
    assert_eq!(r.stop_reason, StopReason::Solved, "{r:#?}");
    assert!(r.solved);
    assert!((r.final_reward - 1.0).abs() < 1e-9, "{}", r.final_reward);
    // Two model turns plus one sub-call in each.
    assert_eq!(r.turns.len(), 2);
    assert_eq!(server.request_count(), 4);
    let sub0 = &r.turns[0].sub_calls;
    assert_eq!(sub0.len(), 1, "{sub0:#?}");
    assert_eq!(sub0[0].tool, "llm_query");
    assert_eq!(sub0[0].prompt, format!("SUBQ: {SECRET_CONTEXT}"));
    assert_eq!(sub0[0].answer.as_deref(), Some("a pineapple, I think"));
    let usage = sub0[0].call.usage.expect("the sub-call's tokens");
    assert!(usage.prompt_tokens > 0 && usage.completion_tokens > 0);
    let sub1 = &r.turns[1].sub_calls;
    assert_eq!(sub1.len(), 1);
    assert_eq!(sub1[0].prompt, "SUBQ2: a pineapple, I think");
    assert_eq!(sub1[0].answer.as_deref(), Some("PINEAPPLE"));
    // The first cell saw the context and the sub-call's answer.
    let exec = r.turns[0].env_steps[0].execution.as_ref().unwrap();
    assert_eq!(exec.stdout, "first: a pineapple, I think\n");
    // The last step of the last turn is the scoring run of the final answer.
    let last = r.turns[1].env_steps.last().unwrap();
    assert_eq!(last.execution.as_ref().unwrap().stdout, "PINEAPPLE\n");
    // The context never went into the conversation; the episode's usage counts the sub-calls.
    assert!(r.messages.iter().all(|m| {
        !m.content
            .as_deref()
            .unwrap_or("")
            .contains("PINEAPPLE, in capitals")
    }));
    let turn_tokens: u64 = r
        .turns
        .iter()
        .filter_map(|t| t.model_call.usage.map(|u| u.total_tokens))
        .sum();
    let sub_tokens: u64 = [sub0, sub1]
        .iter()
        .flat_map(|s| s.iter())
        .filter_map(|s| s.call.usage.map(|u| u.total_tokens))
        .sum();
    assert_eq!(r.usage.total_tokens, turn_tokens + sub_tokens);
    // The record round-trips with its sub-calls.
    let json = serde_json::to_string(r).unwrap();
    assert_eq!(&serde_json::from_str::<TrajectoryRecord>(&json).unwrap(), r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_errors_are_python_exceptions_and_a_wrong_final_answer_scores_zero() {
    let (records, _server, _dir) = play(&["errors"]).await;
    let r = &records[0];
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_ne!(r.stop_reason, StopReason::Error);
    assert!(!r.solved);
    assert_eq!(r.final_reward, 0.0);
    assert_eq!(r.turns.len(), 1);
    let exec = r.turns[0].env_steps[0].execution.as_ref().unwrap();
    assert!(
        exec.stdout.contains("caught:") && exec.stdout.contains("prompt must be a string"),
        "{exec:#?}"
    );
    assert!(exec.stdout.contains("at most 32"), "{exec:#?}");
    assert!(exec.stdout.contains("2 a pineapple, I think"), "{exec:#?}");
    // Only the batch's two queries reached the model; refused calls are not sub-calls.
    let subs = &r.turns[0].sub_calls;
    assert_eq!(subs.len(), 2, "{subs:#?}");
    assert!(subs.iter().all(|s| s.tool == "llm_query_batched"));
    let last = r.turns[0].env_steps.last().unwrap();
    assert_eq!(last.execution.as_ref().unwrap().stdout, "wrong\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sub_call_is_an_exception_in_the_program_and_is_recorded() {
    // Request 0 is the model's turn; 1 and 2 are the batch's queries, one of which the endpoint
    // refuses (context length: not retried). The batch raises, the cell fails, no FINAL: the
    // model's next answer has no code and the episode ends there, with no engine error.
    let faults = vec![FaultRule::at(Fault::ContextLength, [1])];
    let (records, _server, _dir) = play_with(&["errors"], faults).await;
    let r = &records[0];
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.stop_reason, StopReason::NoCode);
    let exec = r.turns[0].env_steps[0].execution.as_ref().unwrap();
    assert!(!exec.success(), "{exec:#?}");
    assert!(exec.stderr.contains("llm_query failed"), "{exec:#?}");
    let subs = &r.turns[0].sub_calls;
    assert_eq!(subs.len(), 2, "{subs:#?}");
    let failed: Vec<_> = subs.iter().filter(|s| s.answer.is_none()).collect();
    assert_eq!(failed.len(), 1, "{subs:#?}");
    assert!(failed[0].call.error.is_some());
    // No scoring run happened: the only env step is the failed cell.
    assert_eq!(r.turns[0].env_steps.len(), 1);
}

#[tokio::test]
async fn program_of_thought_with_env_servers_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = support::config("http://127.0.0.1:9", &[], 1, &dir.path().join("o.jsonl"));
    config.tasks = vec!["secret".into()];
    config.episode.mode = EpisodeMode::ProgramOfThought;
    config.env_servers = vec!["127.0.0.1:9".into()];
    let err = config.validate().unwrap_err().to_string();
    assert!(
        err.contains("program-of-thought") && err.contains("--env-server"),
        "{err}"
    );
}
