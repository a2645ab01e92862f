//! Code-block mode runs exactly the code it records, whatever the env's own `extract` kwarg says.

mod support;

use fake_llm::FakeLlm;
use rollout::dataset::read_latest;
use rollout::dataset::record::{ActionRecord, Role, StopReason};
use rollout::{EnvBackend, run};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_env_runs_the_extracted_block_even_in_raw_mode() {
    // The fake model wraps its code in prose ("Here is my solution."), which is not Python: an env
    // that extracted the whole text again (`extract: raw`) would fail every task.
    let tasks = support::tasks(2);
    let server = FakeLlm::start(support::script(&tasks, false))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("raw.jsonl");
    let mut config = support::config(&server.base_url(), &tasks, 1, &out);
    config.env_kwargs.insert("extract".into(), "raw".into());
    let summary = run(
        config,
        EnvBackend::in_process(support::registry()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(summary.aggregate.episodes, 2);
    assert_eq!(summary.aggregate.solved, 1);
    let records = read_latest(&out).unwrap();
    let solved = records
        .iter()
        .find(|r| support::solvable(&tasks, &r.task_id))
        .unwrap();
    assert_eq!(solved.stop_reason, StopReason::Solved);
    // The record keeps the block, and the conversation keeps the model's whole answer.
    let ActionRecord::CodeBlock { code, .. } = &solved.turns[0].env_steps[0].action else {
        panic!(
            "not a code block: {:?}",
            solved.turns[0].env_steps[0].action
        );
    };
    assert_eq!(code.trim_end(), tasks[0].2.trim_end());
    let answer = &solved.messages[2];
    assert_eq!(answer.role, Role::Assistant);
    let text = answer.content.as_deref().unwrap();
    assert!(text.starts_with("Here is my solution."), "{text}");
    assert!(text.contains(code.as_str()), "{text}");
}
