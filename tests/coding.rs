//! The coding environment end to end: through a real gRPC server (Step, Session, Evaluate) and through
//! the `codegym tasks check` / `codegym evaluate` commands, with real sandboxed Python.

mod support;

use std::process::Command;

use env_core::Value;
use proto::convert::{json_object, value_from_proto, value_to_proto};
use proto::v1;
use support::TestServer;
use tonic::Code;

const SOLUTION: &str = "print(f\"Result: {sum(i * i for i in range(1, 101))}\")";

fn registry() -> env_core::Registry {
    codegym::registry(Default::default()).expect("registry with the coding env")
}

fn code(text: &str) -> Option<v1::Value> {
    Some(value_to_proto(&Value::Text(text.into())))
}

#[tokio::test]
async fn a_coding_episode_over_grpc_is_rewarded_honestly() {
    // The server process has a secret in its environment; the sandboxed program must not see it.
    // SAFETY: set before the server starts; no other thread of this test binary reads it concurrently.
    unsafe { std::env::set_var("CODEGYM_E2E_SECRET", "hunter2-e2e") };
    let server = TestServer::start(registry(), Default::default()).await;
    let mut c = server.client().await;
    let make = v1::MakeRequest {
        env_id: "codegym/Code-v0".into(),
        kwargs_json: String::new(),
    };
    let id = c.make(make).await.unwrap().into_inner().session_id;
    let reset = v1::ResetRequest {
        session_id: id.clone(),
        seed: None,
        options_json: r#"{"task_id": "sum-of-squares"}"#.into(),
    };
    let reset = c.reset(reset).await.unwrap().into_inner();
    let Value::Text(prompt) = value_from_proto(reset.observation.unwrap()).unwrap() else {
        panic!("text prompt")
    };
    assert!(prompt.contains("sum of the squares"), "{prompt}");

    // A wrong program: a failing outcome with a low reward, not an error; the episode goes on.
    let wrong = "import os\nprint(os.environ.get('CODEGYM_E2E_SECRET'))\nprint('Result: 42')";
    let step = c
        .step(v1::StepRequest {
            session_id: id.clone(),
            action: code(wrong),
        })
        .await
        .unwrap()
        .into_inner();
    let Value::Execution(run) = value_from_proto(step.observation.clone().unwrap()).unwrap() else {
        panic!("execution")
    };
    assert_eq!(run.exit_code, Some(0));
    assert!(
        !run.stdout.contains("hunter2"),
        "a host secret leaked: {}",
        run.stdout
    );
    assert!(
        step.reward < 1.0 && !step.terminated && !step.truncated,
        "{step:?}"
    );
    let info = json_object(&step.info_json, "info").unwrap();
    assert_eq!(info["solved"], false);
    assert!(info.contains_key("reward_breakdown"), "{info:?}");

    // A crashing program is an outcome too.
    let step = c
        .step(v1::StepRequest {
            session_id: id.clone(),
            action: code("raise ValueError('x')"),
        })
        .await
        .unwrap()
        .into_inner();
    let Value::Execution(run) = value_from_proto(step.observation.clone().unwrap()).unwrap() else {
        panic!("execution")
    };
    assert_eq!(run.exit_code, Some(1));
    assert!(run.stderr.contains("ValueError"), "{}", run.stderr);

    // Model-style text with a fenced block: extracted, run, solved, terminated.
    let answer = format!("Here you go:\n```python\n{SOLUTION}\n```\n");
    let step = c
        .step(v1::StepRequest {
            session_id: id.clone(),
            action: code(&answer),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(step.reward, 1.0, "{step:?}");
    assert!(step.terminated);
    let e = c
        .step(v1::StepRequest {
            session_id: id,
            action: code(SOLUTION),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
}

#[tokio::test]
async fn evaluate_scores_a_mixed_batch_in_item_order() {
    let server = TestServer::start(registry(), Default::default()).await;
    let mut c = server.client().await;
    let item = |task: &str, src: &str| v1::EvaluateItem {
        seed: None,
        options_json: format!(r#"{{"task_id": "{task}"}}"#),
        action: code(src),
    };
    let items = vec![
        item("sum-of-squares", SOLUTION),
        item("sum-of-squares", "import sys; sys.exit(0)"),
        item("no-such-task", SOLUTION),
        item("hello-world", "print('Hello, world!')"),
        item("hello-world", "while True: pass"),
    ];
    let req = v1::EvaluateRequest {
        env_id: "codegym/Code-v0".into(),
        kwargs_json: r#"{"limits": {"cpu_ms": 1000, "wall_ms": 3000}}"#.into(),
        items,
    };
    let results = c.evaluate(req).await.unwrap().into_inner().results;
    assert_eq!(results.len(), 5);
    let reward = |i: usize| {
        results[i]
            .step
            .as_ref()
            .unwrap_or_else(|| panic!("item {i}: {:?}", results[i]))
            .reward
    };
    assert_eq!(reward(0), 1.0);
    assert!(reward(1) < 1.0, "exiting early is not a pass");
    assert_eq!(
        results[2].error.as_ref().map(|e| e.code),
        Some(Code::InvalidArgument as i32),
        "{:?}",
        results[2]
    );
    assert_eq!(reward(3), 1.0);
    assert!(reward(4) < 1.0);
    let Value::Execution(spin) =
        value_from_proto(results[4].step.clone().unwrap().observation.unwrap()).unwrap()
    else {
        panic!("execution")
    };
    assert!(
        spin.timed_out || spin.signal.is_some(),
        "the spinning program was killed: {spin:?}"
    );

    // Remote clients may lower the limits, never raise them past the server's.
    let greedy = v1::EvaluateRequest {
        env_id: "codegym/Code-v0".into(),
        kwargs_json: r#"{"limits": {"cpu_ms": 999999999}}"#.into(),
        items: vec![item("hello-world", "print('Hello, world!')")],
    };
    assert_eq!(
        c.evaluate(greedy).await.unwrap_err().code(),
        Code::InvalidArgument
    );
}

fn codegym(args: &[&str], dir: &std::path::Path) -> std::process::Output {
    // The binary under test is a process by nature; this is not sandboxed user code.
    #[allow(clippy::disallowed_methods)]
    let out = Command::new(env!("CARGO_BIN_EXE_codegym"))
        .args(args)
        .current_dir(dir)
        .output();
    out.expect("run codegym")
}

#[test]
fn tasks_check_passes_every_bundled_reference_solution() {
    let dir = tempfile::tempdir().unwrap();
    let out = codegym(&["tasks", "check", "builtin:examples"], dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("sum-of-squares"), "{stdout}");
}

#[test]
fn evaluate_writes_per_sample_results_and_pass_at_k() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/env-coding/tasks/fixtures/humaneval_mini.jsonl.gz"
    );
    let samples = dir.path().join("samples.jsonl");
    let right = "    return sum(1 for ch in s if ch.lower() in 'aeiou')\n";
    let wrong = "    return 0\n";
    let lines: Vec<String> = [right, wrong, "    import sys; sys.exit(0)\n"]
        .iter()
        .map(|c| serde_json::json!({"task_id": "Mini/0", "completion": c}).to_string())
        .collect();
    std::fs::write(&samples, lines.join("\n") + "\n").unwrap();
    let out = codegym(
        &[
            "evaluate",
            "--tasks",
            tasks,
            "--samples",
            "samples.jsonl",
            "-k",
            "1",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results = std::fs::read_to_string(dir.path().join("samples.jsonl_results.jsonl")).unwrap();
    let passed: Vec<bool> = results
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["passed"]
                .as_bool()
                .unwrap()
        })
        .collect();
    assert_eq!(passed, [true, false, false]);

    // A malformed samples file is rejected with its file and line.
    std::fs::write(&samples, format!("{}\nnot json\n", lines[0])).unwrap();
    let out = codegym(
        &["evaluate", "--tasks", tasks, "--samples", "samples.jsonl"],
        dir.path(),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("samples.jsonl:2"), "{stderr}");
}

#[tokio::test]
async fn list_tasks_pages_through_the_task_set_with_rollout_prompts() {
    let server = TestServer::start(registry(), Default::default()).await;
    let mut c = server.client().await;
    let page = |token: &str, size: u32| v1::ListTasksRequest {
        env_id: "codegym/Code-v0".into(),
        kwargs_json: String::new(),
        page_size: size,
        page_token: token.into(),
    };
    let mut ids = Vec::new();
    let mut token = String::new();
    let mut totals = Vec::new();
    loop {
        let resp = c.list_tasks(page(&token, 2)).await.unwrap().into_inner();
        assert!(resp.tasks.len() <= 2);
        totals.push(resp.total);
        for t in &resp.tasks {
            let messages: serde_json::Value = serde_json::from_str(&t.messages_json).unwrap();
            let prompts = rollout::config::Prompts::default();
            assert_eq!(messages[0]["role"], "system");
            // Issue 14: the system template renders `{language}` (these tasks are Python).
            let (system, _) =
                prompts.opening(rollout::dataset::record::EpisodeMode::CodeBlock, &t.prompt);
            assert_eq!(messages[0]["content"], system.as_str());
            assert_eq!(messages[1]["role"], "user");
            assert_eq!(messages[1]["content"], t.prompt.as_str());
            ids.push(t.id.clone());
        }
        if resp.next_page_token.is_empty() {
            break;
        }
        token = resp.next_page_token;
    }
    assert!(totals.iter().all(|t| *t == ids.len() as u64), "{totals:?}");
    assert!(totals.len() > 1, "several pages");
    assert!(ids.iter().any(|id| id == "sum-of-squares"));
    let everything = c.list_tasks(page("", 0)).await.unwrap().into_inner();
    let all: Vec<_> = everything.tasks.iter().map(|t| t.id.clone()).collect();
    assert_eq!(all, ids);

    let bad = c.list_tasks(page("not-a-token", 2)).await.unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    let mut cartpole = page("", 0);
    cartpole.env_id = "classic/CartPole-v1".into();
    assert_eq!(
        c.list_tasks(cartpole).await.unwrap_err().code(),
        Code::Unimplemented
    );
}

#[tokio::test]
async fn the_former_env_id_is_an_alias_of_the_coding_env() {
    let server = TestServer::start(registry(), Default::default()).await;
    let mut c = server.client().await;
    // Listed once, under its id.
    let ids: Vec<String> = c
        .list_envs(v1::ListEnvsRequest {})
        .await
        .unwrap()
        .into_inner()
        .envs
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert!(ids.contains(&"codegym/Code-v0".to_string()), "{ids:?}");
    assert!(!ids.contains(&"codegym/Python-v0".to_string()), "{ids:?}");
    // Both ids make, reset and step the same env: the solution solves the task under either.
    for env_id in ["codegym/Code-v0", "codegym/Python-v0", "codegym/Python"] {
        let make = v1::MakeRequest {
            env_id: env_id.into(),
            kwargs_json: String::new(),
        };
        let made = c.make(make).await.unwrap().into_inner();
        assert_eq!(made.spec.unwrap().id, "codegym/Code-v0", "{env_id}");
        let reset = v1::ResetRequest {
            session_id: made.session_id.clone(),
            seed: None,
            options_json: r#"{"task_id": "sum-of-squares"}"#.into(),
        };
        c.reset(reset).await.unwrap();
        let step = c
            .step(v1::StepRequest {
                session_id: made.session_id.clone(),
                action: code(SOLUTION),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(step.terminated && step.reward > 0.99, "{env_id}: {step:?}");
        c.close(v1::CloseRequest {
            session_id: made.session_id,
        })
        .await
        .unwrap();
    }
}
