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
        env_id: "codegym/Python-v0".into(),
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
