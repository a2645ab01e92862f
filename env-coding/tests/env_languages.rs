//! Languages through the coding env (issue 14): a task's `language`, the `language` reset option and
//! `Evaluate` option, fenced blocks of the episode's language, `run_code` tool calls, the compile
//! result in the observation, verdicts in the reward breakdown, and the errors (unknown language,
//! session mode).

use env_coding::{CodingConfig, PYTHON_ENV_ID, register};
use env_core::{AsyncEnv, EnvError, EvalItem, Options, Registry, Value};
use serde_json::json;

fn registry() -> Registry {
    let mut reg = Registry::new();
    if let Err(e) = register(&mut reg, CodingConfig::default()) {
        panic!("register: {e}");
    }
    reg
}

fn opts(v: serde_json::Value) -> Options {
    v.as_object().cloned().unwrap_or_default()
}

/// A sum problem judged on stdin/stdout, in `language`.
fn task(language: &str) -> serde_json::Value {
    json!({
        "id": "a-plus-b", "prompt": "Read two integers, print their sum.", "language": language,
        "reward": {"version": 1, "components": [{"type": "judge", "tests": [
            {"input": "1 2\n", "output": "3\n"}, {"input": "-7 7\n", "output": "0\n"}]}]}
    })
}

const CPP: &str =
    "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n";
const PY: &str = "a, b = map(int, input().split())\nprint(a + b)\n";

async fn make(reg: &Registry, kwargs: serde_json::Value) -> Box<dyn AsyncEnv> {
    match reg
        .make_async(
            PYTHON_ENV_ID,
            &kwargs.as_object().cloned().unwrap_or_default(),
        )
        .await
    {
        Ok(env) => env,
        Err(e) => panic!("make: {e}"),
    }
}

#[tokio::test]
async fn a_cpp_task_is_solved_from_a_fenced_cpp_block() {
    let reg = registry();
    let mut env = make(&reg, json!({})).await;
    env.reset(None, opts(json!({"task": task("cpp")})))
        .await
        .expect("reset");
    // The Python block is not the episode's language: the C++ one is extracted.
    let text = format!("Plan:\n```python\nprint(0)\n```\nSolution:\n```cpp\n{CPP}```\n");
    let s = env.step(Value::Text(text)).await.expect("step");
    let Value::Execution(obs) = &s.obs else {
        panic!("{:?}", s.obs)
    };
    assert!(obs.compile.as_ref().is_some_and(|c| c.success()), "{obs:?}");
    assert_eq!(s.reward, 1.0, "{:?}", s.info);
    assert!(s.terminated);
    let detail = &s.info["reward_breakdown"]["components"][0]["detail"];
    assert_eq!(detail["verdicts"], json!(["AC", "AC"]), "{detail}");
}

#[tokio::test]
async fn reset_option_and_run_code_calls_pick_the_language() {
    let reg = registry();
    let mut env = make(&reg, json!({})).await;
    // The task says Python; the option asks for C++ in this episode.
    env.reset(
        None,
        opts(json!({"task": task("python"), "language": "c++"})),
    )
    .await
    .expect("reset");
    let s = env
        .step(Value::Text("```cpp\nint main(){ return 1 }\n```".into()))
        .await
        .expect("step");
    let Value::Execution(obs) = &s.obs else {
        panic!()
    };
    assert!(
        obs.compile_failed(),
        "a compile error is an outcome: {obs:?}"
    );
    assert_eq!(s.reward, 0.0);
    let detail = &s.info["reward_breakdown"]["components"][0]["detail"];
    assert_eq!(detail["verdicts"], json!(["CE", "CE"]));
    // A tool call names its own language.
    let s = env
        .step(Value::Json(
            json!({"tool": "run_code", "language": "python", "code": PY}),
        ))
        .await
        .expect("step");
    assert_eq!(s.reward, 1.0, "{:?}", s.info);
}

#[tokio::test]
async fn evaluate_items_carry_a_language_and_bad_ones_are_clear_errors() {
    let reg = registry();
    let evaluator = reg.evaluator(PYTHON_ENV_ID).expect("evaluator");
    let item = |language: serde_json::Value, code: &str| EvalItem {
        seed: None,
        options: opts(json!({"task": task("python"), "language": language})),
        action: Value::Text(code.to_string()),
    };
    let results = evaluator
        .evaluate(
            Default::default(),
            vec![
                item(json!("cpp"), CPP),
                item(json!("python"), PY),
                item(json!("cobol"), "DISPLAY 'HI'."),
                item(json!(3), PY),
            ],
        )
        .await
        .expect("batch");
    assert_eq!(results[0].as_ref().expect("cpp").reward, 1.0);
    assert_eq!(results[1].as_ref().expect("python").reward, 1.0);
    assert!(matches!(&results[2], Err(EnvError::InvalidOptions(m)) if m.contains("cobol")));
    assert!(matches!(&results[3], Err(EnvError::InvalidOptions(_))));
}

#[tokio::test]
async fn session_mode_is_python_only() {
    let reg = registry();
    let mut env = make(&reg, json!({"mode": "session"})).await;
    let e = env
        .reset(None, opts(json!({"task": task("cpp")})))
        .await
        .expect_err("cpp session");
    assert!(matches!(e, EnvError::InvalidOptions(_)), "{e}");
    env.reset(None, opts(json!({"task": task("python")})))
        .await
        .expect("reset");
    let e = env
        .step(Value::Json(
            json!({"tool": "run_code", "language": "cpp", "code": CPP}),
        ))
        .await
        .expect_err("cpp cell");
    assert!(matches!(e, EnvError::InvalidAction(_)), "{e}");
}
