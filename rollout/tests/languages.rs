//! Issue 14: code-block mode on a task in another language. The env names the episode's language in
//! `reset`'s info; the engine extracts the block in that language and sends it as `run_code`. An
//! answer in the wrong language is no code: an outcome of the episode, never an error.

use std::io::Write;
use std::sync::Arc;

use fake_llm::{FakeLlm, FakeScript, Reply, Rule};
use rollout::config::RolloutConfig;
use rollout::dataset::read_latest;
use rollout::dataset::record::{ActionRecord, StopReason};
use rollout::{EnvBackend, run};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const CPP: &str =
    "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n";
const PY: &str = "a, b = map(int, input().split())\nprint(a + b)\n";

/// A sum problem in C++ judged on stdin/stdout, with `prompt` (the fake model's rule key).
fn task(id: &str, prompt: &str) -> serde_json::Value {
    json!({
        "schema_version": 1, "id": id, "prompt": prompt, "language": "cpp",
        "reward": {"version": 1, "components": [{"type": "judge", "tests": [
            {"input": "1 2\n", "output": "3\n"}, {"input": "-7 7\n", "output": "0\n"}]}]}
    })
}

/// The real coding env whose default task file is `tasks`.
fn registry(tasks: &std::path::Path) -> Arc<env_core::Registry> {
    let mut registry = env_core::Registry::new();
    let config = env_coding::CodingConfig {
        tasks: tasks.display().to_string(),
        ..env_coding::CodingConfig::default()
    };
    env_coding::register(&mut registry, config).expect("register the coding env");
    Arc::new(registry)
}

fn config(base_url: &str, tasks: Vec<String>, out: &std::path::Path) -> RolloutConfig {
    let mut c = RolloutConfig::default();
    c.model.model = "test-org/test-model:fastest".into();
    c.model.base_urls = vec![base_url.to_string()];
    c.model.api_key_env = Some(Vec::new());
    c.model.request_timeout_secs = 60.0;
    c.tasks = tasks;
    c.samples = 1;
    c.seed = 7;
    c.episode.max_turns = 2;
    c.episode_timeout_secs = 120.0;
    c.output.out = out.to_path_buf();
    c.output.progress = rollout::config::ProgressMode::Off;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpp_task_is_solved_from_a_cpp_block_and_a_python_answer_is_no_code() {
    let dir = tempfile::tempdir().unwrap();
    let tasks_file = dir.path().join("tasks.jsonl");
    let mut f = std::fs::File::create(&tasks_file).unwrap();
    for t in [
        task("sum-cpp", "Add two integers (first)."),
        task("sum-cpp-wrong", "Add two integers (second)."),
    ] {
        writeln!(f, "{t}").unwrap();
    }
    drop(f);
    // First task: a Python sketch, then the C++ solution (the C++ block is the one that runs).
    // Second task: only a Python block, the wrong language for a C++ task.
    let script = FakeScript {
        rules: vec![
            Rule {
                prompt_contains: Some("(first)".into()),
                turn: None,
                reply: Reply::Text(format!(
                    "Idea:\n```python\nprint(0)\n```\nSolution:\n```cpp\n{CPP}```\n"
                )),
            },
            Rule {
                prompt_contains: Some("(second)".into()),
                turn: None,
                reply: Reply::Text(format!("```python\n{PY}```\n")),
            },
        ],
        default_reply: Reply::Text("I am done.".into()),
        ..FakeScript::default()
    };
    let server = FakeLlm::start(script).await.unwrap();
    let out = dir.path().join("cpp.jsonl");
    let ids = vec!["sum-cpp".to_string(), "sum-cpp-wrong".to_string()];
    let summary = run(
        config(&server.base_url(), ids, &out),
        EnvBackend::in_process(registry(&tasks_file)),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(summary.aggregate.episodes, 2);
    assert_eq!(
        summary.aggregate.sampled_episodes, 2,
        "no episode is an error"
    );
    assert_eq!(summary.aggregate.solved, 1);
    let records = read_latest(&out).unwrap();
    let solved = records.iter().find(|r| r.task_id == "sum-cpp").unwrap();
    assert_eq!(solved.stop_reason, StopReason::Solved, "{solved:?}");
    assert_eq!(solved.final_reward, 1.0);
    // The default system prompt asks for a block in the episode's language.
    let system = solved.messages[0].content.as_deref().unwrap();
    assert!(system.contains("```cpp"), "{system}");
    let step = &solved.turns[0].env_steps[0];
    let ActionRecord::CodeBlock { code, language } = &step.action else {
        panic!("not a code block: {:?}", step.action);
    };
    assert_eq!(code, CPP);
    assert_eq!(language.as_deref(), Some("cpp"));
    // The env judged it on stdin/stdout.
    let breakdown = step.reward_breakdown.as_ref().unwrap().to_string();
    assert!(breakdown.contains("judge"), "{breakdown}");

    let wrong = records
        .iter()
        .find(|r| r.task_id == "sum-cpp-wrong")
        .unwrap();
    assert_eq!(wrong.stop_reason, StopReason::NoCode, "{wrong:?}");
    assert!(wrong.error.is_none(), "{:?}", wrong.error);
    assert!(!wrong.solved);
    assert_eq!(wrong.total_reward, 0.0);
}
