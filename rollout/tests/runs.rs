//! Whole runs against the real coding env (sandboxed Python) and the fake model: both modes,
//! exact episode counts, and the dataset's resume guarantees.

mod support;

use std::collections::HashSet;

use fake_llm::{FakeLlm, FakeScript, Fault, FaultRule, Reply, Rule};
use rollout::dataset::record::{ActionRecord, EpisodeMode, Role, StopReason};
use rollout::dataset::{read_latest, sidecar};
use rollout::{EnvBackend, run};
use tokio_util::sync::CancellationToken;

fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_block_run_writes_one_record_per_episode() {
    let tasks = support::tasks(4);
    let server = FakeLlm::start(support::script(&tasks, false))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.jsonl");
    let config = support::config(&server.base_url(), &tasks, 3, &out);
    let summary = run(
        config,
        EnvBackend::in_process(support::registry()),
        CancellationToken::new(),
    )
    .await
    .unwrap();

    let records = read_latest(&out).unwrap();
    assert_eq!(lines(&out).len(), 12);
    assert_eq!(records.len(), 12);
    let keys: HashSet<_> = records.iter().map(|r| r.key()).collect();
    assert_eq!(keys.len(), 12);
    for r in &records {
        assert_eq!(r.mode, EpisodeMode::CodeBlock);
        assert_eq!(r.messages[0].role, Role::System);
        assert_eq!(r.model.requested, "test-org/test-model:fastest");
        let first_step = &r.turns[0].env_steps[0];
        assert!(matches!(first_step.action, ActionRecord::CodeBlock { .. }));
        assert!(first_step.execution.is_some(), "a real execution result");
        assert!(first_step.reward_breakdown.is_some());
        if support::solvable(&tasks, &r.task_id) {
            assert_eq!(r.stop_reason, StopReason::Solved, "{}", r.episode_id);
            assert!(r.solved && r.total_reward > 0.0);
            assert_eq!(r.turns.len(), 1);
        } else {
            assert_eq!(r.stop_reason, StopReason::MaxTurns, "{}", r.episode_id);
            assert!(!r.solved);
            assert_eq!(r.turns.len(), 2);
            // The second request saw the execution feedback of the first.
            let feedback = r.messages[3].content.as_deref().unwrap();
            assert_eq!(r.messages[3].role, Role::User);
            assert!(feedback.contains("wrong answer"), "{feedback}");
        }
    }
    // Distinct seeds within a group, and the same seed for the same key on every run.
    let group: HashSet<_> = records
        .iter()
        .filter(|r| r.task_id == tasks[0].0)
        .map(|r| r.seed)
        .collect();
    assert_eq!(group.len(), 3);
    assert_eq!(server.request_count(), 6 + 12);
    assert_eq!(summary.aggregate.episodes, 12);
    assert_eq!(summary.aggregate.solved, 6);
    assert_eq!(summary.aggregate.pass_at_k["pass@1"], 0.5);
    assert_eq!(summary.aggregate.pass_at_k["pass@3"], 0.5);
    assert!(sidecar(&out, ".manifest.json").exists());
    let written: rollout::Summary =
        serde_json::from_slice(&std::fs::read(sidecar(&out, ".summary.json")).unwrap()).unwrap();
    assert_eq!(written.aggregate.episodes, 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_run_follows_tool_calls_until_the_model_stops() {
    let tasks = support::tasks(2);
    let server = FakeLlm::start(support::script(&tasks, true)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tools.jsonl");
    let mut config = support::config(&server.base_url(), &tasks, 2, &out);
    config.episode.mode = EpisodeMode::Tools;
    config.episode.max_turns = 4;
    run(
        config,
        EnvBackend::in_process(support::registry()),
        CancellationToken::new(),
    )
    .await
    .unwrap();

    let records = read_latest(&out).unwrap();
    assert_eq!(records.len(), 4);
    for r in &records {
        let call = r.messages[2]
            .tool_calls
            .as_ref()
            .expect("the model called a tool");
        assert_eq!(call[0].function.name, "run_python");
        assert!(matches!(
            r.turns[0].env_steps[0].action,
            ActionRecord::RunPython { .. }
        ));
        if support::solvable(&tasks, &r.task_id) {
            assert_eq!(r.stop_reason, StopReason::Solved);
            assert_eq!(r.turns.len(), 1);
        } else {
            // Tool result, then the model answered without a tool call.
            assert_eq!(r.messages[3].role, Role::Tool);
            assert_eq!(
                r.messages[3].tool_call_id.as_deref(),
                Some(call[0].id.as_str())
            );
            assert_eq!(r.stop_reason, StopReason::NoCode);
            assert_eq!(r.turns.len(), 2);
            assert_eq!(r.turns[1].model_call.finish_reason.as_deref(), Some("stop"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_skips_finished_episodes_and_reruns_errored_ones() {
    let tasks = support::tasks(2);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("resume.jsonl");
    let registry = support::registry();
    // Run 1, one episode at a time: requests 1 and 2 get a 401, so exactly two episodes error.
    let mut script = support::script(&tasks, false);
    script.faults = vec![FaultRule::at(Fault::Unauthorized, [1, 2])];
    let first = FakeLlm::start(script).await.unwrap();
    let mut config = support::config(&first.base_url(), &tasks, 2, &out);
    config.concurrency = 1;
    config.episode.max_turns = 1;
    let s1 = run(
        config.clone(),
        EnvBackend::in_process(registry.clone()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(s1.errors_by_kind.get("auth"), Some(&2));
    let errored: Vec<_> = read_latest(&out)
        .unwrap()
        .into_iter()
        .filter(|r| r.needs_rerun())
        .collect();
    assert_eq!(errored.len(), 2);
    let run_id = errored[0].run_id.clone();

    // Run 2 resumes against a healthy server: only the two errored episodes run again.
    let second = FakeLlm::start(support::script(&tasks, false))
        .await
        .unwrap();
    config.model.base_urls = vec![second.base_url()];
    config.output.resume = true;
    let s2 = run(
        config.clone(),
        EnvBackend::in_process(registry.clone()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(second.request_count(), 2);
    assert_eq!(s2.episodes_this_run, 2);
    assert_eq!(lines(&out).len(), 6);
    let latest = read_latest(&out).unwrap();
    assert_eq!(latest.len(), 4);
    assert!(
        latest
            .iter()
            .all(|r| !r.needs_rerun() && r.run_id == run_id)
    );
    assert!(s2.errors_by_kind.is_empty());

    // Run 3: nothing left to do.
    run(
        config,
        EnvBackend::in_process(registry),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(second.request_count(), 2);
    assert_eq!(lines(&out).len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_repairs_a_torn_last_line() {
    let (_dir, out, mut config, registry, server) = finished_run("torn.jsonl", 2).await;
    let requests = server.request_count();

    // Simulate a kill -9 in the middle of writing the last record.
    let mut all = lines(&out);
    let last = all.pop().unwrap();
    let mut text = all.join("\n") + "\n";
    text.push_str(&last[..last.len() / 2]);
    std::fs::write(&out, text).unwrap();
    assert_eq!(
        read_latest(&out).unwrap().len(),
        3,
        "readers skip the torn line"
    );

    config.output.resume = true;
    run(
        config.clone(),
        EnvBackend::in_process(registry.clone()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(server.request_count(), requests + 1);
    let after = lines(&out);
    assert_eq!(after.len(), 4);
    for line in &after {
        serde_json::from_str::<rollout::dataset::record::TrajectoryRecord>(line).unwrap();
    }
    let keys: HashSet<_> = read_latest(&out).unwrap().iter().map(|r| r.key()).collect();
    assert_eq!(keys.len(), 4);

    // Without --resume an existing dataset is never appended to.
    config.output.resume = false;
    let err = run(
        config,
        EnvBackend::in_process(registry),
        CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, rollout::RolloutError::Exists(_)));
}

/// A finished one-turn run of two tasks x `samples` into `name`, for the resume tests.
async fn finished_run(
    name: &str,
    samples: u32,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    rollout::RolloutConfig,
    std::sync::Arc<env_core::Registry>,
    FakeLlm,
) {
    let tasks = support::tasks(2);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(name);
    let registry = support::registry();
    let server = FakeLlm::start(support::script(&tasks, false))
        .await
        .unwrap();
    let mut config = support::config(&server.base_url(), &tasks, samples, &out);
    config.episode.max_turns = 1;
    run(
        config.clone(),
        EnvBackend::in_process(registry.clone()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    (dir, out, config, registry, server)
}

/// The one reader's policy for resume: a corrupt line before the last is an error naming the file
/// and line, and nothing is run or appended (a torn last line is repaired: see above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_refuses_a_corrupt_middle_line() {
    let (_dir, out, mut config, registry, server) = finished_run("corrupt.jsonl", 1).await;
    let requests = server.request_count();
    let mut all = lines(&out);
    all.insert(1, "{\"schema_version\": 2, \"run_id\": ".to_string());
    let text = all.join("\n") + "\n";
    std::fs::write(&out, &text).unwrap();

    config.output.resume = true;
    let err = run(
        config,
        EnvBackend::in_process(registry),
        CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains(&format!("{}:2:", out.display())),
        "{err}"
    );
    assert_eq!(server.request_count(), requests);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_marks_in_flight_episodes_and_resume_finishes_them() {
    let tasks = support::tasks(2);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cancel.jsonl");
    let registry = support::registry();
    let hanging = support::hanging_llm(&tasks).await;
    let mut config = support::config(&hanging.base_url(), &tasks, 3, &out);
    config.concurrency = 2;
    let cancel = CancellationToken::new();
    let handle = tokio::spawn(run(
        config.clone(),
        EnvBackend::in_process(registry.clone()),
        cancel.clone(),
    ));
    // Cancel once both admitted episodes are waiting on the model.
    let waited = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        support::requests_reached(&hanging, 2),
    )
    .await;
    assert!(waited.is_ok(), "episodes never reached the model");
    cancel.cancel();
    let summary = handle.await.unwrap().unwrap();
    assert!(summary.interrupted);
    let records = read_latest(&out).unwrap();
    assert_eq!(records.len(), 2, "only admitted episodes are written");
    assert!(
        records
            .iter()
            .all(|r| r.stop_reason == StopReason::Cancelled)
    );

    let healthy = FakeLlm::start(support::script(&tasks, false))
        .await
        .unwrap();
    config.model.base_urls = vec![healthy.base_url()];
    config.output.resume = true;
    let done = run(
        config,
        EnvBackend::in_process(registry),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(done.aggregate.episodes, 6);
    assert_eq!(done.episodes_this_run, 6);
    assert!(read_latest(&out).unwrap().iter().all(|r| !r.needs_rerun()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_run_stops_it() {
    // `run` spawns the run as a task of its own; dropping `run` must not leave it running.
    let tasks = support::tasks(2);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dropped.jsonl");
    let hanging = support::hanging_llm(&tasks).await;
    let mut config = support::config(&hanging.base_url(), &tasks, 1, &out);
    config.concurrency = 2;
    // A run left running would end both episodes by this deadline and write its summary.
    config.episode_timeout_secs = 1.0;
    let running = run(
        config,
        EnvBackend::in_process(support::registry()),
        CancellationToken::new(),
    );
    tokio::select! {
        _ = running => panic!("the run ended although every request hangs"),
        () = support::requests_reached(&hanging, 2) => {}
    }
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(
        !sidecar(&out, ".summary.json").exists(),
        "the dropped run went on to finish"
    );
    assert!(read_latest(&out).unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_episode_deadline_ends_a_stuck_episode() {
    let tasks = support::tasks(1);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("deadline.jsonl");
    let server = support::hanging_llm(&tasks).await;
    let mut config = support::config(&server.base_url(), &tasks, 1, &out);
    config.episode_timeout_secs = 1.0;
    let summary = run(
        config,
        EnvBackend::in_process(support::registry()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let records = read_latest(&out).unwrap();
    assert_eq!(records[0].stop_reason, StopReason::Timeout);
    assert_eq!(summary.errors_by_kind.get("episode_timeout"), Some(&1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_stick_to_one_endpoint_round_robin() {
    let tasks = support::tasks(2);
    let a = FakeLlm::start(support::script(&tasks, false))
        .await
        .unwrap();
    let b = FakeLlm::start(support::script(&tasks, false))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("endpoints.jsonl");
    let mut config = support::config(&a.base_url(), &tasks, 3, &out);
    config.model.base_urls = vec![a.base_url(), b.base_url()];
    config.episode.max_turns = 1;
    run(
        config,
        EnvBackend::in_process(support::registry()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let records = read_latest(&out).unwrap();
    for (task, _, _) in &tasks {
        let endpoints: HashSet<_> = records
            .iter()
            .filter(|r| &r.task_id == task)
            .map(|r| r.model.endpoint.clone())
            .collect();
        assert_eq!(endpoints.len(), 1, "group {task} spread over {endpoints:?}");
    }
    assert_eq!((a.request_count(), b.request_count()), (3, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_tools_write_then_run_files() {
    let tasks = support::tasks(1);
    let (_, prompt, solution) = tasks[0].clone();
    let rule = |turn: usize, reply: Reply| Rule {
        prompt_contains: Some(prompt.clone()),
        turn: Some(turn),
        reply,
    };
    let script = FakeScript {
        rules: vec![
            rule(
                0,
                Reply::ToolCall {
                    name: "write_file".into(),
                    arguments: serde_json::json!({"path": "notes.txt", "content": "kept between calls"}),
                },
            ),
            rule(
                1,
                Reply::ToolCall {
                    name: "read_file".into(),
                    arguments: serde_json::json!({"path": "notes.txt"}),
                },
            ),
            rule(2, Reply::run_python(&solution)),
        ],
        ..FakeScript::default()
    };
    let server = FakeLlm::start(script).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("session.jsonl");
    let mut config = support::config(&server.base_url(), &tasks, 1, &out);
    config.episode.mode = EpisodeMode::Tools;
    config.episode.max_turns = 5;
    config
        .env_kwargs
        .insert("mode".into(), serde_json::json!("session"));
    run(
        config,
        EnvBackend::in_process(support::registry()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let r = &read_latest(&out).unwrap()[0];
    let tools = server.request_count();
    assert_eq!(tools, 3);
    assert!(matches!(
        r.turns[0].env_steps[0].action,
        ActionRecord::WriteFile { .. }
    ));
    let read_back = r
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .nth(1)
        .and_then(|m| m.content.clone());
    assert!(
        read_back.is_some_and(|c| c.contains("kept between calls")),
        "{:?}",
        r.messages
    );
    assert_eq!(r.stop_reason, StopReason::Solved, "{:?}", r.error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_length_error_ends_the_episode_without_a_rerun() {
    let tasks = support::tasks(1);
    let mut script = support::script(&tasks, false);
    script.faults = vec![FaultRule::at(Fault::ContextLength, [0])];
    let server = FakeLlm::start(script).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ctx.jsonl");
    let mut config = support::config(&server.base_url(), &tasks, 1, &out);
    config.model.base_urls = vec![server.base_url().replace("http://", "http://user:pw@")];
    run(
        config,
        EnvBackend::in_process(support::registry()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let r = &read_latest(&out).unwrap()[0];
    assert_eq!(r.stop_reason, StopReason::ContextLength);
    assert!(!r.needs_rerun());
    assert_eq!(r.turns[0].model_call.attempts, 1);
    assert!(!r.model.endpoint.contains("pw"), "{}", r.model.endpoint);
    assert_eq!(server.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_in_a_missing_directory_is_created() {
    let tasks = support::tasks(1);
    let server = FakeLlm::start(support::script(&tasks, false))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs").join("nested").join("run.jsonl");
    let config = support::config(&server.base_url(), &tasks, 1, &out);
    run(
        config,
        EnvBackend::in_process(support::registry()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(read_latest(&out).unwrap().len(), 1);
}
