//! The turn loops of both modes: code-block (answer, run the first block in the episode's language
//! as a `run_python` or `run_code` action, show the feedback) and tools (follow function calls until the model answers without one).

use std::time::Instant;

use env_core::contract::{self, field, info, tool};
use env_core::{EnvError, Value};
use serde_json::json;

use super::primitives::{StepResult, call_model, env_step, push_step};
use super::{Ending, EpisodeContext, EpisodePlan, EpisodeState, format, millis};
use crate::dataset::record::{
    ActionRecord, ChatMessage, EnvStepRecord, EpisodeMode, ErrorKind, ErrorRecord, Role,
    StopReason, ToolCall,
};

/// Runs the episode until it ends on its own terms.
pub(super) async fn drive(
    ctx: &EpisodeContext,
    plan: &EpisodePlan,
    st: &mut EpisodeState,
) -> Ending {
    // Issue 12: program-of-thought mode makes its own env (with the engine's host tools).
    if ctx.config.episode.mode == EpisodeMode::ProgramOfThought {
        return super::pot::drive(ctx, plan, st).await;
    }
    match setup(ctx, plan, st).await {
        Ok(()) => {}
        Err(ending) => return ending,
    }
    match ctx.config.episode.mode {
        EpisodeMode::CodeBlock => code_block_loop(ctx, plan, st).await,
        EpisodeMode::Tools | EpisodeMode::ProgramOfThought => tools_loop(ctx, plan, st).await,
        EpisodeMode::Autocoder => super::autocoder::run(ctx, plan, st).await,
    }
}

/// `make` + `reset`, then the system and task messages.
pub(super) async fn setup(
    ctx: &EpisodeContext,
    plan: &EpisodePlan,
    st: &mut EpisodeState,
) -> Result<(), Ending> {
    let config = &ctx.config;
    let t = Instant::now();
    let made = ctx
        .backend
        .make(&config.env_id, &config.env_kwargs, st.avoid_server)
        .await;
    st.env_ms += millis(t.elapsed());
    st.session = Some(made.map_err(env_ending)?);
    let options = ctx
        .backend
        .task_options(&plan.task_id)
        .map_err(env_ending)?;
    let t = Instant::now();
    let reset = match st.session.as_mut() {
        Some(s) => s.reset(Some(plan.seed), options).await,
        None => Err(EnvError::ClosedEnvironment),
    };
    st.env_ms += millis(t.elapsed());
    let (obs, info) = reset.map_err(env_ending)?;
    // Issue 14: the episode's language, as the env chose it (the task's or a reset option's).
    st.language = info
        .get(info::LANGUAGE)
        .and_then(|v| v.as_str())
        .filter(|l| *l != "python")
        .map(str::to_string);
    let task = format::observation_text(&obs);
    // Data tasks (issue 13): the env's summary of the task's sample files, for `{data_context}`.
    let data_context = info
        .get("data_context")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    let language = st.language.as_deref().unwrap_or("python");
    let (system, user) =
        config
            .episode
            .prompts
            .opening_in(config.episode.mode, &task, data_context, language);
    st.messages.push(ChatMessage::text(Role::System, system));
    st.messages.push(ChatMessage::text(Role::User, user));
    Ok(())
}

async fn code_block_loop(
    ctx: &EpisodeContext,
    plan: &EpisodePlan,
    st: &mut EpisodeState,
) -> Ending {
    let ep = &ctx.config.episode;
    for turn in 0..ep.max_turns {
        let completion = match call_model(ctx, plan, st, None).await {
            Ok(c) => c,
            Err(ending) => return ending,
        };
        let content = completion.message.content.unwrap_or_default();
        // Issue 14: a block in the episode's language; a block in another one is no code.
        let language = st.language.clone();
        let block = match &language {
            None => code_extract::first_python_block(&content),
            Some(l) => code_extract::first_block_in(&content, l),
        };
        let Some(code) = block.map(str::to_string) else {
            return Ending::new(StopReason::NoCode);
        };
        let action = match &language {
            None => run_python(&code),
            Some(l) => run_code(&code, l),
        };
        let obs = match env_step(st, action, ActionRecord::CodeBlock { code, language }, None).await
        {
            Ok(StepResult::Done(ending)) => return ending,
            Ok(StepResult::Continue { obs }) => *obs,
            Err(ending) => return ending,
        };
        if turn + 1 < ep.max_turns {
            let (obs, reward) = obs;
            let language = st.language.as_deref().unwrap_or("python");
            let template = format::render(&ep.prompts.feedback, &[("language", language)]);
            let text = format::feedback(&template, &obs, reward, false, ep.feedback_max_chars);
            st.messages.push(ChatMessage::text(Role::User, text));
        }
    }
    Ending::new(StopReason::MaxTurns)
}

async fn tools_loop(ctx: &EpisodeContext, plan: &EpisodePlan, st: &mut EpisodeState) -> Ending {
    let ep = &ctx.config.episode;
    let session = ctx
        .config
        .env_kwargs
        .get("mode")
        .and_then(serde_json::Value::as_str)
        == Some("session");
    // Issue 14: an episode in another language gets `run_code` instead of `run_python`.
    let tools = format::tool_definitions(session, st.language.as_deref());
    for _ in 0..ep.max_turns {
        let completion = match call_model(ctx, plan, st, Some(&tools)).await {
            Ok(c) => c,
            Err(ending) => return ending,
        };
        let calls = completion.message.tool_calls.unwrap_or_default();
        if calls.is_empty() {
            return Ending::new(StopReason::NoCode);
        }
        for call in calls {
            let (action, record) = match decode_tool_call(&call, st.language.as_deref()) {
                Ok(decoded) => decoded,
                Err(why) => {
                    record_invalid_call(st, &call, &why);
                    continue;
                }
            };
            match env_step(st, action, record, Some(call.id.clone())).await {
                Ok(StepResult::Done(ending)) => return ending,
                Ok(StepResult::Continue { obs }) => {
                    let (obs, _) = *obs;
                    let text = format::tool_result(&obs, false, ep.feedback_max_chars);
                    st.messages.push(ChatMessage::tool_result(call.id, text));
                }
                Err(ending) => return ending,
            }
        }
    }
    Ending::new(StopReason::MaxTurns)
}

/// The env action running exactly `code`: the tool call the coding env accepts in every mode.
/// Sending the model's whole text instead would let the env extract again, by its own `extract`
/// kwarg (`raw` runs the prose too), and run something else than the record says.
pub(super) fn run_python(code: &str) -> Value {
    Value::Json(contract::run_python(code))
}

/// Issue 14: the same for a program in `language` (SandboxFusion's name), the env's `run_code`.
fn run_code(code: &str, language: &str) -> Value {
    Value::Json(contract::run_code(code, language))
}

/// Turns a tool call into the env's action (`{"tool": name, ...arguments}`). `run_code` without a
/// `language` runs in the episode's (`language`, `None`: Python).
fn decode_tool_call(
    call: &ToolCall,
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
        // Issue 14.
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

fn record_invalid_call(st: &mut EpisodeState, call: &ToolCall, why: &str) {
    let error = ErrorRecord {
        kind: ErrorKind::Env,
        status: None,
        message: format!("invalid tool call: {why}"),
    };
    push_step(
        st,
        EnvStepRecord {
            action: ActionRecord::Invalid {
                name: call.function.name.clone(),
                arguments: call.function.arguments.clone(),
            },
            tool_call_id: Some(call.id.clone()),
            execution: None,
            observation: None,
            reward: 0.0,
            reward_breakdown: None,
            terminated: false,
            truncated: false,
            info: serde_json::Map::new(),
            duration_ms: 0,
            error: Some(error),
        },
    );
    st.messages.push(ChatMessage::tool_result(
        call.id.clone(),
        format!("error: {why}"),
    ));
}

pub(super) fn env_ending(e: EnvError) -> Ending {
    Ending::error(StopReason::Error, ErrorKind::Env, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &str) -> ToolCall {
        ToolCall {
            id: "c".into(),
            kind: "function".into(),
            function: crate::dataset::record::FunctionCall {
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
        // Issue 14: one action for a C++ program, from a code block or from the tool.
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
