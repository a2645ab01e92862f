//! Languages end to end (issue 14): `Evaluate` items in C++ and Python over a real gRPC server (the
//! compile result in the observation's proto, judge verdicts in the breakdown, an unknown language
//! as INVALID_ARGUMENT), and `codegym doctor` listing the languages this machine runs.

mod support;

use std::process::Command;

use env_core::Value;
use proto::convert::{value_from_proto, value_to_proto};
use proto::v1;
use support::TestServer;
use tonic::Code;

const TASK: &str = r#"{"id": "a-plus-b", "prompt": "Sum.", "reward": {"version": 1, "components": [
  {"type": "judge", "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "4 5\n", "output": "9\n"}]}]}}"#;

#[tokio::test]
async fn evaluate_judges_items_in_their_languages() {
    let registry = codegym::registry(Default::default()).expect("registry");
    let server = TestServer::start(registry, Default::default()).await;
    let mut c = server.client().await;
    let item = |language: &str, src: &str| v1::EvaluateItem {
        seed: None,
        options_json: format!(r#"{{"task": {TASK}, "language": "{language}"}}"#),
        action: Some(value_to_proto(&Value::Text(src.into()))),
    };
    let cpp =
        "```cpp\n#include <iostream>\nint main(){int a,b;std::cin>>a>>b;std::cout<<a+b;}\n```";
    let req = v1::EvaluateRequest {
        env_id: "codegym/Code-v0".into(),
        kwargs_json: "{}".into(),
        items: vec![
            item("cpp", cpp),
            item("cpp", "```cpp\nint main() { syntax error\n```"),
            item("python", "a, b = map(int, input().split())\nprint(a + b)"),
            item("klingon", "Qapla'"),
        ],
    };
    let results = c
        .evaluate(req)
        .await
        .expect("evaluate")
        .into_inner()
        .results;
    let step = |i: usize| {
        results[i]
            .step
            .clone()
            .unwrap_or_else(|| panic!("item {i}: {:?}", results[i]))
    };
    assert_eq!(step(0).reward, 1.0);
    let Value::Execution(obs) = value_from_proto(step(1).observation.expect("obs")).expect("value")
    else {
        panic!("an execution")
    };
    assert!(
        obs.compile_failed(),
        "the compile result crosses the wire: {obs:?}"
    );
    let info: serde_json::Value = serde_json::from_str(&step(1).info_json).expect("info");
    assert_eq!(
        info["reward_breakdown"]["components"][0]["detail"]["verdicts"],
        serde_json::json!(["CE", "CE"]),
        "{info}"
    );
    assert_eq!(step(2).reward, 1.0);
    assert_eq!(
        results[3].error.as_ref().map(|e| e.code),
        Some(Code::InvalidArgument as i32),
        "{:?}",
        results[3]
    );
}

#[test]
fn doctor_lists_the_languages() {
    // The binary under test is a process by nature; this is not sandboxed user code.
    #[allow(clippy::disallowed_methods)]
    let out = Command::new(env!("CARGO_BIN_EXE_codegym"))
        .arg("doctor")
        .output()
        .expect("run codegym doctor");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("languages:"), "{stdout}");
    for l in [
        "python",
        "cpp",
        "rust",
        "go",
        "java",
        "nodejs",
        "typescript",
        "bash",
    ] {
        assert!(
            stdout
                .lines()
                .any(|line| line.trim_start().starts_with("[x] ")
                    && line.contains(&format!(" {l} "))),
            "{l} is installed (tests/all.sh installs it): {stdout}"
        );
    }
}

/// Issue 14: `ListTasks` reports each task's language and renders its opening in it; MultiPL-E
/// (C++) and HumanEval+ (Python) tasks from a task file are scored through `Evaluate`.
#[tokio::test]
async fn list_tasks_reports_languages_and_foreign_sets_evaluate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let multipl_e = dir.path().join("multipl_e.jsonl");
    let prompt = "#include<assert.h>\n// Add two numbers x and y\nlong add(long x, long y) {\n";
    let record = serde_json::json!({"name": "HumanEval_53_add", "language": "cpp",
        "prompt": prompt, "stop_tokens": ["\n}"],
        "tests": "}\nint main() {\n    auto candidate = add;\n    assert(candidate(5, 7) == 12);\n}\n"});
    std::fs::write(&multipl_e, format!("{record}\n")).expect("write");
    let evalplus = dir.path().join("humaneval_plus.jsonl");
    std::fs::write(
        &evalplus,
        r#"{"task_id": "HumanEval/53", "prompt": "def add(x, y):\n", "entry_point": "add", "canonical_solution": "    return x + y\n", "base_input": [[1, 2]], "plus_input": [[10000000000000000000000, 1]], "atol": 0}"#,
    )
    .expect("write");
    let coding = env_coding::CodingConfig {
        task_dirs: vec![dir.path().to_path_buf()],
        ..Default::default()
    };
    let registry = codegym::registry(coding).expect("registry");
    let server = TestServer::start(registry, Default::default()).await;
    let mut c = server.client().await;
    let kwargs =
        |path: &std::path::Path| format!(r#"{{"tasks": {:?}}}"#, path.display().to_string());
    let listed = c
        .list_tasks(v1::ListTasksRequest {
            env_id: "codegym/Code-v0".into(),
            kwargs_json: kwargs(&multipl_e),
            page_size: 0,
            page_token: String::new(),
        })
        .await
        .expect("list")
        .into_inner();
    let task = &listed.tasks[0];
    assert_eq!(task.language, "cpp");
    let messages: serde_json::Value = serde_json::from_str(&task.messages_json).expect("json");
    let (system, _) = rollout::config::Prompts::default().opening_in(
        rollout::dataset::record::EpisodeMode::CodeBlock,
        &task.prompt,
        "",
        "cpp",
    );
    assert_eq!(messages[0]["content"], system.as_str());

    let evaluate = |path: &std::path::Path, id: &str, actions: &[String]| v1::EvaluateRequest {
        env_id: "codegym/Code-v0".into(),
        kwargs_json: kwargs(path),
        items: actions
            .iter()
            .map(|a| v1::EvaluateItem {
                seed: None,
                options_json: format!(r#"{{"task_id": "{id}"}}"#),
                action: Some(value_to_proto(&Value::Text(a.clone()))),
            })
            .collect(),
    };
    let rewards = |resp: v1::EvaluateResponse| -> Vec<(f64, String)> {
        resp.results
            .iter()
            .map(|r| {
                let step = r.step.as_ref().unwrap_or_else(|| panic!("{r:?}"));
                (step.reward, step.info_json.clone())
            })
            .collect()
    };
    let only = |r: Vec<(f64, String)>| -> Vec<f64> {
        let rewards = r.iter().map(|(x, _)| *x).collect();
        if rewards != [1.0, 0.0] {
            panic!("{r:?}");
        }
        rewards
    };
    // The episode's language comes from the task: a C++ block, tests appended by the scorer.
    let actions = [
        format!("```cpp\n{prompt}    return x + y;\n}}\n```"),
        format!("```cpp\n{prompt}    return x - y;\n}}\n```"),
    ];
    let resp = c
        .evaluate(evaluate(&multipl_e, "HumanEval_53_add", &actions))
        .await
        .expect("evaluate")
        .into_inner();
    assert_eq!(only(rewards(resp)), [1.0, 0.0]);
    // HumanEval+: the plus input's 23-digit integer reaches Python exactly.
    let actions = [
        "def add(x, y):\n    return x + y\n".to_string(),
        "def add(x, y):\n    return int(float(x) + y)\n".to_string(),
    ];
    let resp = c
        .evaluate(evaluate(&evalplus, "HumanEval/53", &actions))
        .await
        .expect("evaluate")
        .into_inner();
    assert_eq!(only(rewards(resp)), [1.0, 0.0]);
    // The `tests` option counts the base inputs only: the float version passes them.
    let mut base = evaluate(&evalplus, "HumanEval/53", &actions[1..]);
    base.items[0].options_json = r#"{"task_id": "HumanEval/53", "tests": "base"}"#.into();
    let resp = c
        .evaluate(base.clone())
        .await
        .expect("evaluate")
        .into_inner();
    assert_eq!(rewards(resp)[0].0, 1.0);
    base.items[0].options_json = r#"{"task_id": "HumanEval/53", "tests": "all"}"#.into();
    let resp = c.evaluate(base).await.expect("evaluate").into_inner();
    let error = resp.results[0].error.as_ref().expect("an item error");
    assert!(error.message.contains("option tests"), "{error:?}");
    // A task without differential testing refuses the option.
    let mut cpp = evaluate(&multipl_e, "HumanEval_53_add", &actions[..1]);
    cpp.items[0].options_json = r#"{"task_id": "HumanEval_53_add", "tests": "base"}"#.into();
    let resp = c.evaluate(cpp).await.expect("evaluate").into_inner();
    let error = resp.results[0].error.as_ref().expect("an item error");
    assert!(error.message.contains("no differential"), "{error:?}");
}
