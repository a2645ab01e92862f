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
