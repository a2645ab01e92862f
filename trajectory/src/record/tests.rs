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
