//! Issue 12 over gRPC: the coding env's results as agents use them (return value, variables,
//! error, timings in `info`), injected `vars` in script and session mode, and their bad-input
//! errors (INVALID_ARGUMENT).

mod support;

use env_core::{ExecutionResult, ReturnValue, Value};
use proto::convert::{json_object, value_from_proto, value_to_proto};
use proto::v1;
use proto::v1::env_service_client::EnvServiceClient;
use serde_json::json;
use support::TestServer;
use tonic::Code;
use tonic::transport::Channel;

fn registry() -> env_core::Registry {
    codegym::registry(Default::default()).expect("registry with the coding env")
}

/// A `run_python` tool call with extra fields.
fn run(call: serde_json::Value) -> Option<v1::Value> {
    Some(value_to_proto(&Value::Json(call)))
}

async fn episode(
    c: &mut EnvServiceClient<Channel>,
    kwargs: serde_json::Value,
    options: serde_json::Value,
) -> String {
    let make = v1::MakeRequest {
        env_id: "codegym/Code-v0".into(),
        kwargs_json: kwargs.to_string(),
    };
    let id = c.make(make).await.expect("make").into_inner().session_id;
    c.reset(v1::ResetRequest {
        session_id: id.clone(),
        seed: Some(0),
        options_json: options.to_string(),
    })
    .await
    .expect("reset");
    id
}

async fn step(
    c: &mut EnvServiceClient<Channel>,
    id: &str,
    action: serde_json::Value,
) -> Result<(ExecutionResult, serde_json::Map<String, serde_json::Value>), tonic::Status> {
    let s = c
        .step(v1::StepRequest {
            session_id: id.into(),
            action: run(action),
        })
        .await?
        .into_inner();
    let Ok(Value::Execution(e)) = value_from_proto(s.observation.expect("observation")) else {
        panic!("an execution observation")
    };
    Ok((e, json_object(&s.info_json, "info").expect("info")))
}

fn value(e: &ExecutionResult) -> Option<&serde_json::Value> {
    match &e.return_value {
        Some(ReturnValue::Json { value }) => Some(value),
        _ => None,
    }
}

#[tokio::test]
async fn script_mode_reports_and_injects() {
    let server = TestServer::start(registry(), Default::default()).await;
    let mut c = server.client().await;
    let id = episode(
        &mut c,
        json!({"max_episode_steps": 8, "variables": true}),
        json!({"task_id": "sum-of-squares", "vars": {"context": "abc", "n": 1}}),
    )
    .await;
    // The reset's vars are set in every run; the action's override them.
    let (e, info) = step(
        &mut c,
        &id,
        json!({"tool": "run_python", "code": "y = context * n\ny", "vars": {"n": 2}}),
    )
    .await
    .expect("step");
    assert_eq!(value(&e), Some(&json!("abcabc")), "{}", e.stderr);
    let vars = &e.variables.as_ref().expect("variables (make kwarg)").values;
    assert_eq!(vars.get("y"), Some(&json!("abcabc")));
    assert!(
        info["execution_time_ms"].is_u64() && info["memory_used_bytes"].is_u64(),
        "{info:?}"
    );
    let (e, _) = step(
        &mut c,
        &id,
        json!({"tool": "run_python", "code": "n", "variables": false}),
    )
    .await
    .expect("step");
    assert_eq!((value(&e), &e.variables), (Some(&json!(1)), &None));
    // An error is the exception's type and message.
    let (e, _) = step(
        &mut c,
        &id,
        json!({"tool": "run_python", "code": "int(context)"}),
    )
    .await
    .expect("step");
    assert_eq!(
        e.error.as_ref().map(|x| x.type_name.as_str()),
        Some("ValueError")
    );
    assert!(!e.success());
    // Plain text actions report too.
    let s = c
        .step(v1::StepRequest {
            session_id: id.clone(),
            action: Some(value_to_proto(&Value::Text("[n] * 3".into()))),
        })
        .await
        .expect("step")
        .into_inner();
    let Ok(Value::Execution(e)) = value_from_proto(s.observation.expect("obs")) else {
        panic!("execution")
    };
    assert_eq!(value(&e), Some(&json!([1, 1, 1])));
}

#[tokio::test]
async fn session_mode_updates_the_live_namespace() {
    let server = TestServer::start(registry(), Default::default()).await;
    let mut c = server.client().await;
    let id = episode(
        &mut c,
        json!({"mode": "session", "max_episode_steps": 8}),
        json!({"task_id": "sum-of-squares", "vars": {"total": 10}}),
    )
    .await;
    let (e, _) = step(
        &mut c,
        &id,
        json!({"tool": "run_python", "code": "total += 5"}),
    )
    .await
    .expect("step");
    assert!(e.success(), "{}", e.stderr);
    let (e, _) = step(
        &mut c,
        &id,
        json!({"tool": "run_python", "code": "total + extra", "vars": {"extra": 100}}),
    )
    .await
    .expect("step");
    assert_eq!(value(&e), Some(&json!(115)), "{}", e.stderr);
    let (e, _) = step(
        &mut c,
        &id,
        json!({"tool": "run_python", "code": "total", "variables": true}),
    )
    .await
    .expect("step");
    assert_eq!(value(&e), Some(&json!(15)));
    let vars = e.variables.expect("variables").values;
    assert_eq!(
        (vars.get("total"), vars.get("extra")),
        (Some(&json!(15)), Some(&json!(100)))
    );
}

#[tokio::test]
async fn bad_vars_are_invalid_argument() {
    let server = TestServer::start(registry(), Default::default()).await;
    let mut c = server.client().await;
    let id = episode(
        &mut c,
        json!({"max_episode_steps": 8}),
        json!({"task_id": "sum-of-squares"}),
    )
    .await;
    for (vars, needle) in [
        (json!({"not an identifier": 1}), "identifier"),
        (json!({"__builtins__": {}}), "identifier"),
        (json!({"class": 1}), "identifier"),
        (json!({"big": "x".repeat(2 << 20)}), "bytes"),
    ] {
        let err = step(
            &mut c,
            &id,
            json!({"tool": "run_python", "code": "1", "vars": vars}),
        )
        .await
        .expect_err("bad vars");
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains(needle), "{}", err.message());
    }
    let err = step(
        &mut c,
        &id,
        json!({"tool": "run_python", "code": "1", "vars": [1]}),
    )
    .await
    .expect_err("vars not an object");
    assert_eq!(err.code(), Code::InvalidArgument);
    // The episode is still usable after the refusals.
    let (e, _) = step(&mut c, &id, json!({"tool": "run_python", "code": "6 * 7"}))
        .await
        .expect("step");
    assert_eq!(value(&e), Some(&json!(42)));
    // Reset options: same checks.
    for vars in [json!([1]), json!({"1x": 1})] {
        let err = c
            .reset(v1::ResetRequest {
                session_id: id.clone(),
                seed: None,
                options_json: json!({"task_id": "sum-of-squares", "vars": vars}).to_string(),
            })
            .await
            .expect_err("bad reset vars");
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    }
}

#[tokio::test]
async fn ungraded_episodes_score_nothing_and_never_terminate() {
    let server = TestServer::start(registry(), Default::default()).await;
    let mut c = server.client().await;
    let id = episode(
        &mut c,
        json!({"grade": false, "max_episode_steps": 8}),
        json!({"task_id": "sum-of-squares"}),
    )
    .await;
    // The task's solution: graded, it would end the episode with reward 1.
    let solution = "print(f\"Result: {sum(i * i for i in range(1, 101))}\")";
    for _ in 0..3 {
        let s = c
            .step(v1::StepRequest {
                session_id: id.clone(),
                action: run(json!({"tool": "run_python", "code": solution})),
            })
            .await
            .expect("step")
            .into_inner();
        assert_eq!((s.reward, s.terminated, s.truncated), (0.0, false, false));
    }
}
