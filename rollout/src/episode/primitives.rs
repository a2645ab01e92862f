//! The shared primitives every episode mode is built from: opening the episode (`make`, `reset`,
//! the opening messages), a model call (which appends a [`TurnRecord`] and the assistant message),
//! the env actions that run a program, and an env step (which appends an [`EnvStepRecord`] and
//! detects the episode's end). The modes sit on top; this module imports none of them.

use std::borrow::Cow;
use std::time::Instant;

use env_core::contract::{self, info};
use env_core::{EnvError, Value};
use serde_json::json;

use trajectory::record::{
    ActionRecord, ChatMessage, EnvStepRecord, ErrorKind, ErrorRecord, Role, StopReason, TurnRecord,
};

use super::format;
use super::state::{Ending, EpisodeContext, EpisodePlan, EpisodeState};
use crate::client::{ChatRequest, Completion, millis};

/// `make` + `reset` on the episode's task, then the system and task messages of the episode's mode
/// (the opening of every mode but program-of-thought, which makes its env with the engine's host
/// tools).
pub(super) async fn open(
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
    st.session = Some(made.map_err(Ending::env)?);
    let options = ctx
        .backend
        .task_options(&plan.task_id)
        .map_err(Ending::env)?;
    let t = Instant::now();
    let reset = match st.session.as_mut() {
        Some(s) => s.reset(Some(plan.seed), options).await,
        None => Err(EnvError::ClosedEnvironment),
    };
    st.env_ms += millis(t.elapsed());
    let (obs, info) = reset.map_err(Ending::env)?;
    // The episode's language, as the env chose it (the task's or a reset option's).
    st.language = info
        .get(info::LANGUAGE)
        .and_then(|v| v.as_str())
        .filter(|l| *l != "python")
        .map(str::to_string);
    let task = format::observation_text(&obs);
    // Data tasks: the env's summary of the task's sample files, for `{data_context}`.
    let data_context = info
        .get(info::DATA_CONTEXT)
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

/// The env action running exactly `code`: the tool call the coding env accepts in every mode.
/// Sending the model's whole text instead would let the env extract again, by its own `extract`
/// kwarg (`raw` runs the prose too), and run something else than the record says.
pub(super) fn run_python(code: &str) -> Value {
    Value::Json(contract::run_python(code))
}

/// The same for a program in `language` (SandboxFusion's name), the env's `run_code`.
pub(super) fn run_code(code: &str, language: &str) -> Value {
    Value::Json(contract::run_code(code, language))
}

/// Calls the model with the (possibly capped) history; appends the turn and the assistant message.
pub(super) async fn call_model(
    ctx: &EpisodeContext,
    plan: &EpisodePlan,
    st: &mut EpisodeState,
    tools: Option<&serde_json::Value>,
) -> Result<Completion, Ending> {
    call_model_with(ctx, plan, st, tools, None).await
}

/// [`call_model`] with an OpenAI `response_format` (AutoCoder's structured outputs).
pub(super) async fn call_model_with(
    ctx: &EpisodeContext,
    plan: &EpisodePlan,
    st: &mut EpisodeState,
    tools: Option<&serde_json::Value>,
    response_format: Option<&serde_json::Value>,
) -> Result<Completion, Ending> {
    let view = history_view(&st.messages, ctx.config.episode.max_history_messages);
    // Providers commonly reject seeds beyond 32-bit signed integers.
    let request = ChatRequest {
        messages: &view,
        tools,
        seed: Some(plan.seed & 0x7fff_ffff),
        response_format,
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
        sub_calls: Vec::new(),
        stage: None,
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
pub(super) fn history_view(messages: &[ChatMessage], cap: Option<usize>) -> Cow<'_, [ChatMessage]> {
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

pub(super) enum StepResult {
    /// The episode ended with this step (solved, or the env terminated or truncated it).
    Done(Ending),
    /// The observation and reward (boxed: an execution result is large, and this enum is moved
    /// around on every step).
    Continue { obs: Box<(Value, f64)> },
}

/// Steps the env and records the step. Invalid actions are shown to the model; other env errors
/// end the episode.
pub(super) async fn env_step(
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
            push_failed_step(st, record, tool_call_id, error.clone(), duration_ms);
            if invalid {
                // The model's action was at fault, not the machinery: let it see why.
                return Ok(StepResult::Continue {
                    obs: Box::new((Value::Text(format!("invalid action: {e}")), 0.0)),
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
        .get(info::SOLVED)
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
            reward_breakdown: step.info.get(info::REWARD_BREAKDOWN).cloned(),
            terminated: step.terminated,
            truncated: step.truncated,
            info: step.info.clone(),
            duration_ms,
            error: None,
            provenance: step
                .info
                .get(info::PROVENANCE)
                .and_then(|p| serde_json::from_value(p.clone()).ok()),
            rescore: None,
            cross_check: None,
        },
    );
    if solved {
        return Ok(StepResult::Done(Ending::new(StopReason::Solved)));
    }
    if step.terminated || step.truncated {
        return Ok(StepResult::Done(Ending::new(StopReason::EnvDone)));
    }
    Ok(StepResult::Continue {
        obs: Box::new((step.obs, step.reward)),
    })
}

/// Records a step that did not run as asked (the env refused it, or the model's call was invalid):
/// no execution, no reward, the error.
pub(super) fn push_failed_step(
    st: &mut EpisodeState,
    action: ActionRecord,
    tool_call_id: Option<String>,
    error: ErrorRecord,
    duration_ms: u64,
) {
    push_step(
        st,
        EnvStepRecord {
            action,
            tool_call_id,
            execution: None,
            observation: None,
            reward: 0.0,
            reward_breakdown: None,
            terminated: false,
            truncated: false,
            info: serde_json::Map::new(),
            duration_ms,
            error: Some(error),
            provenance: None,
            rescore: None,
            cross_check: None,
        },
    );
}

/// Appends `step` to the current turn: the one place every step record goes through, so the
/// episode's cross-checks see each one, in order.
pub(super) fn push_step(st: &mut EpisodeState, step: EnvStepRecord) {
    let Some(t) = st.turns.len().checked_sub(1) else {
        return;
    };
    let turn = &mut st.turns[t];
    st.checks.recorded((t, turn.env_steps.len()), &step);
    turn.env_steps.push(step);
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
}
