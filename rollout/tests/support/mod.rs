//! Shared test setup: the real `codegym/Code-v0` env in a registry, and fake-model scripts that
//! answer some bundled tasks correctly (their reference solution) and others wrongly.

#![allow(dead_code)]

use std::sync::Arc;

use env_coding::tasks::TaskSet;
use fake_llm::{FakeLlm, FakeScript, Fault, FaultRule, Reply, Rule};
use rollout::config::RolloutConfig;

/// A registry with the real coding env (real sandboxed Python).
pub fn registry() -> Arc<env_core::Registry> {
    let mut registry = env_core::Registry::new();
    env_coding::register(&mut registry, env_coding::CodingConfig::default())
        .expect("register the coding env");
    Arc::new(registry)
}

/// The first `n` bundled tasks with their prompts and reference solutions.
pub fn tasks(n: usize) -> Vec<(String, String, String)> {
    TaskSet::builtin_examples()
        .iter()
        .filter_map(|t| {
            Some((
                t.id.clone(),
                t.prompt.clone(),
                t.reference_solution.clone()?,
            ))
        })
        .take(n)
        .collect()
}

/// Even-indexed tasks are answered with their reference solution, odd ones with a wrong program.
/// In tools mode the answer is a `run_python` call, and the next turn ends the conversation.
pub fn script(tasks: &[(String, String, String)], tools: bool) -> FakeScript {
    let mut rules = Vec::new();
    for (i, (_, prompt, solution)) in tasks.iter().enumerate() {
        let program = if i % 2 == 0 {
            solution.as_str()
        } else {
            "print('wrong answer')\n"
        };
        let reply = if tools {
            Reply::run_python(program)
        } else {
            Reply::code(program)
        };
        rules.push(Rule {
            prompt_contains: Some(prompt.clone()),
            turn: if tools { Some(0) } else { None },
            reply,
        });
    }
    FakeScript {
        rules,
        default_reply: Reply::Text("I am done.".into()),
        ..FakeScript::default()
    }
}

/// Whether task `id` is one the script solves.
pub fn solvable(tasks: &[(String, String, String)], id: &str) -> bool {
    tasks
        .iter()
        .position(|(t, _, _)| t == id)
        .is_some_and(|i| i % 2 == 0)
}

/// A config for a run against `base_url` writing to `out`.
pub fn config(
    base_url: &str,
    tasks: &[(String, String, String)],
    samples: u32,
    out: &std::path::Path,
) -> RolloutConfig {
    let mut c = RolloutConfig::default();
    c.model.model = "test-org/test-model:fastest".into();
    c.model.base_urls = vec![base_url.to_string()];
    c.model.api_key_env = Some(Vec::new());
    c.model.backoff_initial_ms = 1;
    c.model.backoff_max_ms = 50;
    c.model.request_timeout_secs = 60.0;
    c.tasks = tasks.iter().map(|t| t.0.clone()).collect();
    c.samples = samples;
    c.concurrency = 8;
    c.seed = 7;
    c.episode.max_turns = 2;
    c.episode_timeout_secs = 120.0;
    c.output.out = out.to_path_buf();
    c.output.progress = rollout::config::ProgressMode::Off;
    c
}

/// A fake model that never answers (every request hangs until the server stops).
pub async fn hanging_llm(tasks: &[(String, String, String)]) -> FakeLlm {
    let mut script = script(tasks, false);
    script.faults = vec![FaultRule::with_rate(Fault::Hang, 1.0)];
    FakeLlm::start(script).await.expect("start the fake model")
}

/// Returns once `server` has received `n` chat requests.
pub async fn requests_reached(server: &FakeLlm, n: u64) {
    while server.request_count() < n {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
