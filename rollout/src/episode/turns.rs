//! The turn loops of both modes and the two primitives they share: a model call (which appends the
//! assistant message and a [`TurnRecord`]) and an env step (which appends an [`EnvStepRecord`]).

use std::borrow::Cow;
use std::time::Instant;

use env_core::{EnvError, Value};
use serde_json::json;

use super::{Ending, EpisodeContext, EpisodePlan, EpisodeState, format, millis};
use crate::client::{ChatRequest, Completion};
use crate::dataset::record::{
    ActionRecord, ChatMessage, EnvStepRecord, EpisodeMode, ErrorKind, ErrorRecord, Role,
    StopReason, ToolCall, TurnRecord,
};

/// Runs the episode until it ends on its own terms.
pub(super) async fn drive(
    ctx: &EpisodeContext,
    plan: &EpisodePlan,
    st: &mut EpisodeState,
) -> Ending {
    match setup(ctx, plan, st).await {
        Ok(()) => {}
        Err(ending) => return ending,
    }
    match ctx.config.episode.mode {
        EpisodeMode::CodeBlock => code_block_loop(ctx, plan, st).await,
        EpisodeMode::Tools => tools_loop(ctx, plan, st).await,
    }
}

/// `make` + `reset`, then the system and task messages.
async fn setup(
    ctx: &EpisodeContext,
    plan: &EpisodePlan,
    st: &mut EpisodeState,
) -> Result<(), Ending> {
    let config = &ctx.config;
    let t = Instant::now();
    let made = ctx
        .backend
        .make(&config.env_id, &config.env_kwargs, plan.env_route)
        .await;
    st.env_ms += millis(t.elapsed());
    st.session = Some(made.map_err(env_ending)?);
    let mut options = serde_json::Map::new();
    options.insert("task_id".into(), json!(plan.task_id));
    let t = Instant::now();
    let reset = match st.session.as_mut() {
        Some(s) => s.reset(Some(plan.seed), options).await,
        None => Err(EnvError::ClosedEnvironment),
    };
    st.env_ms += millis(t.elapsed());
    let (obs, _info) = reset.map_err(env_ending)?;
    let prompts = &config.episode.prompts;
    let system = match config.episode.mode {
        EpisodeMode::CodeBlock => &prompts.system,
        EpisodeMode::Tools => &prompts.tools_system,
    };
    st.messages
        .push(ChatMessage::text(Role::System, system.clone()));
    let task = format::observation_text(&obs);
    st.messages.push(ChatMessage::text(
        Role::User,
        format::render(&prompts.task, &[("prompt", &task)]),
    ));
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
        let Some(code) = env_coding::extract::first_python_block(&content).map(str::to_string)
        else {
            return Ending::new(StopReason::NoCode);
        };
        let obs = match env_step(
            st,
            Value::Text(content),
            ActionRecord::CodeBlock { code },
            None,
        )
        .await
        {
            Ok(StepResult::Done(ending)) => return ending,
            Ok(StepResult::Continue { obs }) => obs,
            Err(ending) => return ending,
        };
        if turn + 1 < ep.max_turns {
            let (obs, reward) = obs;
            let text = format::feedback(
                &ep.prompts.feedback,
                &obs,
                reward,
                false,
                ep.feedback_max_chars,
            );
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
    let tools = format::tool_definitions(session);
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
            let (action, record) = match decode_tool_call(&call) {
                Ok(decoded) => decoded,
                Err(why) => {
                    record_invalid_call(st, &call, &why);
                    continue;
                }
            };
            match env_step(st, action, record, Some(call.id.clone())).await {
                Ok(StepResult::Done(ending)) => return ending,
                Ok(StepResult::Continue { obs: (obs, _) }) => {
                    let text = format::tool_result(&obs, false, ep.feedback_max_chars);
                    st.messages.push(ChatMessage::tool_result(call.id, text));
                }
                Err(ending) => return ending,
            }
        }
    }
    Ending::new(StopReason::MaxTurns)
}

/// Turns a tool call into the env's action (`{"tool": name, ...arguments}`).
fn decode_tool_call(call: &ToolCall) -> Result<(Value, ActionRecord), String> {
    let args: serde_json::Value = serde_json::from_str(&call.function.arguments)
        .map_err(|e| format!("the arguments are not valid JSON: {e}"))?;
    let field = |k: &str| {
        args.get(k)
            .and_then(serde_json::Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("missing string argument `{k}`"))
    };
    let record = match call.function.name.as_str() {
        "run_python" => ActionRecord::RunPython {
            code: field("code")?,
        },
        "write_file" => ActionRecord::WriteFile {
            path: field("path")?,
            content: field("content")?,
        },
        "read_file" => ActionRecord::ReadFile {
            path: field("path")?,
        },
        other => return Err(format!("unknown tool `{other}`")),
    };
    let mut action = serde_json::Map::new();
    action.insert("tool".into(), json!(call.function.name));
    if let serde_json::Value::Object(map) = args {
        action.extend(map);
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

/// Calls the model with the (possibly capped) history; appends the turn and the assistant message.
async fn call_model(
    ctx: &EpisodeContext,
    plan: &EpisodePlan,
    st: &mut EpisodeState,
    tools: Option<&serde_json::Value>,
) -> Result<Completion, Ending> {
    let view = history_view(&st.messages, ctx.config.episode.max_history_messages);
    // Providers commonly reject seeds beyond 32-bit signed integers.
    let request = ChatRequest {
        messages: &view,
        tools,
        seed: Some(plan.seed & 0x7fff_ffff),
    };
    let outcome = ctx
        .client
        .chat(plan.endpoint, &request, &mut st.retry_budget)
        .await;
    drop(view);
    st.model_ms += outcome.call.latency_ms;
    if let Some(u) = &outcome.call.usage {
        st.usage.add(u);
    }
    if outcome.call.served_model.is_some() {
        st.served_model.clone_from(&outcome.call.served_model);
    }
    let error = outcome.call.error.clone();
    let index = u32::try_from(st.turns.len()).unwrap_or(u32::MAX);
    let mut turn = TurnRecord {
        index,
        model_call: outcome.call,
        message_index: None,
        env_steps: Vec::new(),
    };
    let Some(completion) = outcome.completion else {
        st.turns.push(turn);
        let error = error.unwrap_or(ErrorRecord {
            kind: ErrorKind::MalformedResponse,
            status: None,
            message: "no completion".into(),
        });
        let stop = if error.kind == ErrorKind::ContextLength {
            StopReason::ContextLength
        } else {
            StopReason::Error
        };
        return Err(Ending {
            stop,
            error: Some(error),
        });
    };
    turn.message_index = Some(st.messages.len());
    st.turns.push(turn);
    st.messages.push(completion.message.clone());
    Ok(completion)
}

/// System and task messages, then at most `cap` of the latest messages, starting at an assistant
/// message so no tool result is separated from its call.
fn history_view(messages: &[ChatMessage], cap: Option<usize>) -> Cow<'_, [ChatMessage]> {
    let Some(cap) = cap else {
        return Cow::Borrowed(messages);
    };
    if messages.len() <= 2 + cap {
        return Cow::Borrowed(messages);
    }
    let mut start = messages.len() - cap;
    while start < messages.len() && messages[start].role != Role::Assistant {
        start += 1;
    }
    let mut view = messages[..2].to_vec();
    view.extend_from_slice(&messages[start..]);
    Cow::Owned(view)
}

enum StepResult {
    /// The episode ended with this step (solved, or the env terminated or truncated it).
    Done(Ending),
    Continue {
        obs: (Value, f64),
    },
}

/// Steps the env and records the step. Invalid actions are shown to the model; other env errors
/// end the episode.
async fn env_step(
    st: &mut EpisodeState,
    action: Value,
    record: ActionRecord,
    tool_call_id: Option<String>,
) -> Result<StepResult, Ending> {
    let t = Instant::now();
    let result = match st.session.as_mut() {
        Some(s) => s.step(action).await,
        None => Err(EnvError::ClosedEnvironment),
    };
    let duration_ms = millis(t.elapsed());
    st.env_ms += duration_ms;
    let step = match result {
        Ok(step) => step,
        Err(e) => {
            let invalid = matches!(e, EnvError::InvalidAction(_));
            let error = ErrorRecord {
                kind: ErrorKind::Env,
                status: None,
                message: e.to_string(),
            };
            push_step(
                st,
                EnvStepRecord {
                    action: record,
                    tool_call_id,
                    execution: None,
                    observation: None,
                    reward: 0.0,
                    reward_breakdown: None,
                    terminated: false,
                    truncated: false,
                    info: serde_json::Map::new(),
                    duration_ms,
                    error: Some(error.clone()),
                },
            );
            if invalid {
                // The model's action was at fault, not the machinery: let it see why.
                return Ok(StepResult::Continue {
                    obs: (Value::Text(format!("invalid action: {e}")), 0.0),
                });
            }
            return Err(Ending {
                stop: StopReason::Error,
                error: Some(error),
            });
        }
    };
    let solved = step
        .info
        .get("solved")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(step.terminated);
    st.total_reward += step.reward;
    st.final_reward = step.reward;
    st.solved |= solved;
    let (execution, observation) = match &step.obs {
        Value::Execution(e) => (Some(e.clone()), None),
        other => (None, Some(json!(format::observation_text(other)))),
    };
    push_step(
        st,
        EnvStepRecord {
            action: record,
            tool_call_id,
            execution,
            observation,
            reward: step.reward,
            reward_breakdown: step.info.get("reward_breakdown").cloned(),
            terminated: step.terminated,
            truncated: step.truncated,
            info: step.info.clone(),
            duration_ms,
            error: None,
        },
    );
    if solved {
        return Ok(StepResult::Done(Ending::new(StopReason::Solved)));
    }
    if step.terminated || step.truncated {
        return Ok(StepResult::Done(Ending::new(StopReason::EnvDone)));
    }
    Ok(StepResult::Continue {
        obs: (step.obs, step.reward),
    })
}

fn push_step(st: &mut EpisodeState, step: EnvStepRecord) {
    if let Some(turn) = st.turns.last_mut() {
        turn.env_steps.push(step);
    }
}

fn env_ending(e: EnvError) -> Ending {
    Ending::error(StopReason::Error, ErrorKind::Env, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: Role, text: &str) -> ChatMessage {
        ChatMessage::text(role, text)
    }

    #[test]
    fn the_history_cap_keeps_system_task_and_a_whole_tail() {
        let mut m = vec![msg(Role::System, "s"), msg(Role::User, "task")];
        for i in 0..4 {
            m.push(msg(Role::Assistant, &format!("a{i}")));
            m.push(msg(Role::User, &format!("f{i}")));
        }
        assert_eq!(history_view(&m, None).len(), 10);
        assert_eq!(history_view(&m, Some(8)).len(), 10);
        let view = history_view(&m, Some(3));
        let texts: Vec<_> = view
            .iter()
            .map(|x| x.content.as_deref().unwrap_or(""))
            .collect();
        // A cap of 3 would start at a feedback message; the tail starts at the next assistant turn.
        assert_eq!(texts, ["s", "task", "a3", "f3"]);
        let view = history_view(&m, Some(4));
        assert_eq!(view.len(), 6);
        assert_eq!(view[2].content.as_deref(), Some("a2"));
    }

    #[test]
    fn tool_calls_become_env_actions() {
        let call = |name: &str, args: &str| ToolCall {
            id: "c".into(),
            kind: "function".into(),
            function: crate::dataset::record::FunctionCall {
                name: name.into(),
                arguments: args.into(),
            },
        };
        let (action, record) =
            decode_tool_call(&call("write_file", r#"{"path":"a.py","content":"x=1"}"#)).unwrap();
        assert_eq!(
            action,
            Value::Json(json!({"tool": "write_file", "path": "a.py", "content": "x=1"}))
        );
        assert!(matches!(record, ActionRecord::WriteFile { .. }));
        assert!(decode_tool_call(&call("run_python", "{not json")).is_err());
        assert!(decode_tool_call(&call("run_python", r#"{"source":"x"}"#)).is_err());
        assert!(decode_tool_call(&call("rm_rf", r#"{}"#)).is_err());
    }
}
