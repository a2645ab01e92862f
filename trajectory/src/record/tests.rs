//! Serialization of the record types: the JSON names other tools read.

use super::*;

#[test]
fn enums_use_their_snake_case_names() {
    for reason in [
        StopReason::NoCode,
        StopReason::ContextLength,
        StopReason::Cancelled,
    ] {
        let json = serde_json::to_value(reason).unwrap();
        assert_eq!(json, serde_json::json!(reason.as_str()));
    }
    for kind in [
        ErrorKind::RetryBudgetExhausted,
        ErrorKind::Env,
        ErrorKind::QuotaExceeded,
    ] {
        assert_eq!(
            serde_json::to_value(kind).unwrap(),
            serde_json::json!(kind.as_str())
        );
    }
}

#[test]
fn actions_are_tagged_by_kind() {
    let action = ActionRecord::CodeBlock {
        code: "print(1)".into(),
        language: None,
    };
    let json = serde_json::to_value(&action).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"kind": "code_block", "code": "print(1)"})
    );
    assert_eq!(
        serde_json::from_value::<ActionRecord>(json).unwrap(),
        action
    );
    // Issue 14: a block in another language records it.
    let cpp = ActionRecord::CodeBlock {
        code: "int main(){}".into(),
        language: Some("cpp".into()),
    };
    let json = serde_json::to_value(&cpp).unwrap();
    assert_eq!(json["language"], "cpp");
    assert_eq!(serde_json::from_value::<ActionRecord>(json).unwrap(), cpp);
}

#[test]
fn optional_fields_are_omitted_and_keys_name_episodes() {
    let message = ChatMessage::tool_result("call_1", "ok");
    let json = serde_json::to_value(&message).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"role": "tool", "content": "ok", "tool_call_id": "call_1"})
    );
    let key = EpisodeKey {
        task_id: "add".into(),
        sample_index: 3,
    };
    assert_eq!(key.episode_id(), "add#3");
    assert_eq!(EngineInfo::default().name, ENGINE_NAME);
}

/// Issue 12: a turn's `sub_calls` are optional (older version 2 and version 1 turns have none) and
/// omitted when empty; the program-of-thought mode has its snake-case name.
#[test]
fn sub_calls_are_optional_on_turns() {
    let old = serde_json::json!({
        "index": 0,
        "model_call": {"latency_ms": 5, "attempts": 1, "retries": []},
        "env_steps": []
    });
    let turn: TurnRecord = serde_json::from_value(old.clone()).unwrap();
    assert!(turn.sub_calls.is_empty());
    assert_eq!(serde_json::to_value(&turn).unwrap(), old);
    let mut with = turn.clone();
    with.sub_calls.push(SubCallRecord {
        tool: "llm_query".into(),
        prompt: "2+2?".into(),
        answer: Some("4".into()),
        call: turn.model_call.clone(),
    });
    let json = serde_json::to_value(&with).unwrap();
    assert_eq!(json["sub_calls"][0]["answer"], "4");
    assert_eq!(serde_json::from_value::<TurnRecord>(json).unwrap(), with);
    assert_eq!(
        serde_json::to_value(EpisodeMode::ProgramOfThought).unwrap(),
        serde_json::json!("program_of_thought")
    );
}

/// A record as schema 1 wrote it (no `autocoder`, no `stage`, no new variants) reads under schema 2.
#[test]
fn version_1_records_stay_readable() {
    let v1 = serde_json::json!({
        "schema_version": 1, "run_id": "r", "episode_id": "add#0", "group_id": "r/add",
        "task_id": "add", "sample_index": 0, "seed": 7, "env_id": "codegym/Python-v0",
        "env_kwargs": {}, "mode": "code_block",
        "model": {"requested": "m", "endpoint": "http://x/v1"}, "sampling": {},
        "messages": [{"role": "user", "content": "task"}],
        "turns": [{"index": 0, "model_call": {"latency_ms": 1, "attempts": 1, "retries": []},
                   "env_steps": [{"action": {"kind": "code_block", "code": "print(1)"},
                                  "reward": 1.0, "terminated": true, "truncated": false,
                                  "info": {}, "duration_ms": 3}]}],
        "total_reward": 1.0, "final_reward": 1.0, "solved": true, "stop_reason": "solved",
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        "timings": {"started_at_ms": 0, "wall_ms": 1, "model_ms": 1, "env_ms": 1},
        "engine": {"name": ENGINE_NAME, "version": "0.1.0"}
    });
    let record: TrajectoryRecord = serde_json::from_value(v1).expect("a v1 record reads");
    assert_eq!(record.schema_version, 1);
    assert!(record.autocoder.is_none());
    assert!(record.turns[0].stage.is_none());
    assert!((OLDEST_READABLE_VERSION..=SCHEMA_VERSION).contains(&record.schema_version));
    // Written back, the v2 additions stay absent: a v1 reader sees no new keys.
    let back = serde_json::to_value(&record).unwrap();
    assert!(back.get("autocoder").is_none());
    assert!(back["turns"][0].get("stage").is_none());
}

#[test]
fn autocoder_stages_and_model_tests_round_trip() {
    let stage = StageRecord {
        stage: Stage::Diagnose,
        output: Some(serde_json::json!({"kind": "environment"})),
        structured: false,
        parse_error: None,
        diagnosis: Some(Diagnosis::Environment),
        model_tests: Some(ModelTestRun {
            passed: 1,
            failed: 1,
            errors: 0,
            pass_rate: 0.5,
            not_run: None,
        }),
    };
    let json = serde_json::to_value(&stage).unwrap();
    assert_eq!(json["stage"], "diagnose");
    assert_eq!(json["diagnosis"], "environment");
    assert_eq!(serde_json::from_value::<StageRecord>(json).unwrap(), stage);
    let action = ActionRecord::ModelTests {
        solution: "x = 1".into(),
        tests: "def test_x(): pass".into(),
        requirements: vec!["pytest".into()],
    };
    let json = serde_json::to_value(&action).unwrap();
    assert_eq!(json["kind"], "model_tests");
    assert_eq!(
        serde_json::to_value(EpisodeMode::Autocoder).unwrap(),
        "autocoder"
    );
    assert!(!stage.model_tests.unwrap().all_passed());
}
