//! Tools mode: the model calls the env's tools (`run_python` or `run_code`, and in session mode
//! `write_file` / `read_file`; a repository env's `bash`, `view`, `create`, `str_replace` and
//! `submit`, through `repo_tools`) as chat function calls; each call is one env step answered
//! with a tool message, until the env ends the episode (solved, or a repository's `submit`) or
//! the model answers without a call. For models without function calling, `structured_tools`
//! asks for each call as JSON instead.

use env_core::Value;
use env_core::contract::{field, tool};
use serde_json::json;
use trajectory::record::{
    ActionRecord, ChatMessage, ChatToolCall, ErrorKind, ErrorRecord, FunctionCall, Role, StopReason,
};

use super::format;
use super::primitives::{StepResult, call_model, call_model_with, env_step, push_failed_step};
use super::state::{Ending, EpisodeContext, EpisodePlan, EpisodeState};
use super::{repo_tools, structured_tools};
use crate::config::ToolCalls;

/// Plays the episode in tools mode, after its opening; a repository episode the model ends
/// without a submit is submitted by the engine.
pub(super) async fn play(
    ctx: &EpisodeContext,
    plan: &EpisodePlan,
    st: &mut EpisodeState,
) -> Ending {
    let ending = play_calls(ctx, plan, st).await;
    repo_tools::submit_at_end(ctx, st, ending).await
}

/// The model's calls, one env step each, until the episode ends.
async fn play_calls(ctx: &EpisodeContext, plan: &EpisodePlan, st: &mut EpisodeState) -> Ending {
    let ep = &ctx.config.episode;
    let session = ctx
        .config
        .env_kwargs
        .get("mode")
        .and_then(serde_json::Value::as_str)
        == Some("session");
    let repo = repo_tools::is_repo(ctx);
    // An episode in another language gets `run_code` instead of `run_python`.
    let tools = match repo {
        true => format::repo_tool_definitions(),
        false => format::tool_definitions(session, st.language.as_deref()),
    };
    // Without function calling: the tools in the task's message, each answer one JSON call.
    let structured = (ep.tool_calls == ToolCalls::Structured).then(|| {
        let told = structured_tools::instruction(&tools);
        if let Some(task) = st.messages.iter_mut().rev().find(|m| m.role == Role::User) {
            task.content.get_or_insert_default().push_str(&told);
        }
        structured_tools::response_format(&tools)
    });
    for turn in 0..ep.max_turns {
        let called = match &structured {
            Some(format) => call_model_with(ctx, plan, st, None, Some(format)).await,
            None => call_model(ctx, plan, st, Some(&tools)).await,
        };
        let completion = match called {
            Ok(c) => c,
            Err(ending) => return ending,
        };
        let calls = match structured {
            Some(_) => {
                let content = completion.message.content.unwrap_or_default();
                match structured_tools::parse(&content, format!("structured-{turn}")) {
                    Ok(call) => vec![call],
                    Err(why) => {
                        let call = ChatToolCall {
                            id: format!("structured-{turn}"),
                            kind: "function".into(),
                            function: FunctionCall {
                                name: String::new(),
                                arguments: content,
                            },
                        };
                        record_invalid_call(st, &call, &why, true);
                        continue;
                    }
                }
            }
            None => completion.message.tool_calls.unwrap_or_default(),
        };
        if calls.is_empty() {
            return Ending::new(StopReason::NoCode);
        }
        let native = structured.is_none();
        for call in calls {
            let decoded = match repo {
                true => repo_tools::decode(&call),
                false => decode_tool_call(&call, st.language.as_deref()),
            };
            let (action, record) = match decoded {
                Ok(decoded) => decoded,
                Err(why) => {
                    record_invalid_call(st, &call, &why, !native);
                    continue;
                }
            };
            let call_id = native.then(|| call.id.clone());
            match env_step(st, action, record, call_id).await {
                Ok(StepResult::Done(ending)) => {
                    if repo {
                        repo_tools::keep_outcome(st);
                    }
                    return ending;
                }
                Ok(StepResult::Continue { obs }) => {
                    let (obs, _) = *obs;
                    let text = format::tool_result(&obs, false, ep.feedback_max_chars);
                    st.messages.push(match native {
                        true => ChatMessage::tool_result(call.id, text),
                        false => ChatMessage::text(Role::User, text),
                    });
                }
                Err(ending) => return ending,
            }
        }
    }
    Ending::new(StopReason::MaxTurns)
}

/// Turns a tool call into the env's action (`{"tool": name, ...arguments}`). `run_code` without a
/// `language` runs in the episode's (`language`, `None`: Python).
fn decode_tool_call(
    call: &ChatToolCall,
    language: Option<&str>,
) -> Result<(Value, ActionRecord), String> {
    let args: serde_json::Value = serde_json::from_str(&call.function.arguments)
        .map_err(|e| format!("the arguments are not valid JSON: {e}"))?;
    let string_arg = |k: &str| {
        args.get(k)
            .and_then(serde_json::Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("missing string argument `{k}`"))
    };
    let record = match call.function.name.as_str() {
        tool::RUN_PYTHON => ActionRecord::RunPython {
            code: string_arg(field::CODE)?,
        },
        tool::RUN_CODE => ActionRecord::RunCode {
            code: string_arg(field::CODE)?,
            language: match args.get(field::LANGUAGE) {
                None | Some(serde_json::Value::Null) => language.unwrap_or("python").to_string(),
                Some(serde_json::Value::String(l)) => l.clone(),
                Some(_) => return Err("argument `language` must be a string".into()),
            },
        },
        tool::WRITE_FILE => ActionRecord::WriteFile {
            path: string_arg(field::PATH)?,
            content: string_arg(field::CONTENT)?,
        },
        tool::READ_FILE => ActionRecord::ReadFile {
            path: string_arg(field::PATH)?,
        },
        other => return Err(format!("unknown tool `{other}`")),
    };
    let mut action = serde_json::Map::new();
    action.insert(tool::KEY.into(), json!(call.function.name));
    if let serde_json::Value::Object(map) = args {
        action.extend(map);
    }
    if let ActionRecord::RunCode { language, .. } = &record {
        action.insert(field::LANGUAGE.into(), json!(language));
    }
    Ok((Value::Json(serde_json::Value::Object(action)), record))
}

/// Records a call the env would refuse and tells the model why (`structured`: as a user message,
/// there being no function call for a tool message to answer).
fn record_invalid_call(st: &mut EpisodeState, call: &ChatToolCall, why: &str, structured: bool) {
    let error = ErrorRecord {
        kind: ErrorKind::Env,
        status: None,
        message: format!("invalid tool call: {why}"),
    };
    let action = ActionRecord::Invalid {
        name: call.function.name.clone(),
        arguments: call.function.arguments.clone(),
    };
    let id = (!structured).then(|| call.id.clone());
    push_failed_step(st, action, id, error, 0);
    let text = format!("error: {why}");
    st.messages.push(match structured {
        false => ChatMessage::tool_result(call.id.clone(), text),
        true => ChatMessage::text(Role::User, text),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::episode::primitives::{run_code, run_python};
    use trajectory::record::FunctionCall;

    fn call(name: &str, args: &str) -> ChatToolCall {
        ChatToolCall {
            id: "c".into(),
            kind: "function".into(),
            function: FunctionCall {
                name: name.into(),
                arguments: args.into(),
            },
        }
    }

    #[test]
    fn tool_calls_become_env_actions() {
        let (action, record) = decode_tool_call(
            &call("write_file", r#"{"path":"a.py","content":"x=1"}"#),
            None,
        )
        .unwrap();
        assert_eq!(
            action,
            Value::Json(json!({"tool": "write_file", "path": "a.py", "content": "x=1"}))
        );
        assert!(matches!(record, ActionRecord::WriteFile { .. }));
        assert!(decode_tool_call(&call("run_python", "{not json"), None).is_err());
        assert!(decode_tool_call(&call("run_python", r#"{"source":"x"}"#), None).is_err());
        assert!(decode_tool_call(&call("rm_rf", r#"{}"#), None).is_err());
    }

    #[test]
    fn a_code_block_is_sent_as_run_python() {
        // The same action a `run_python` tool call becomes, so the env runs exactly this code.
        let (from_tools, _) =
            decode_tool_call(&call("run_python", r#"{"code":"print(1)\n"}"#), None).unwrap();
        assert_eq!(run_python("print(1)\n"), from_tools);
    }

    #[test]
    fn run_code_calls_are_the_code_block_action_in_the_episode_language() {
        // One action for a C++ program, from a code block or from the tool.
        let src = r#"{"code":"int main(){}"}"#;
        let (action, record) = decode_tool_call(&call("run_code", src), Some("cpp")).unwrap();
        assert_eq!(action, run_code("int main(){}", "cpp"));
        assert_eq!(
            record,
            ActionRecord::RunCode {
                code: "int main(){}".into(),
                language: "cpp".into()
            }
        );
        // An explicit language is kept; a bad one is an invalid call.
        let explicit = r#"{"code":"x","language":"rust"}"#;
        let (action, _) = decode_tool_call(&call("run_code", explicit), Some("cpp")).unwrap();
        assert_eq!(action, run_code("x", "rust"));
        let bad = r#"{"code":"x","language":3}"#;
        assert!(decode_tool_call(&call("run_code", bad), Some("cpp")).is_err());
        // The definitions offered follow the episode's language.
        let tools = format::tool_definitions(false, Some("cpp"));
        assert_eq!(tools[0]["function"]["name"], "run_code");
        assert_eq!(
            tools[0]["function"]["parameters"]["properties"]["language"]["enum"],
            json!(["cpp"])
        );
        assert_eq!(
            format::tool_definitions(true, None)[0]["function"]["name"],
            "run_python"
        );
    }
}
