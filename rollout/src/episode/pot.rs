//! Program-of-thought mode, the RLM loop: the model answers with a python block that
//! runs in a session (the namespace lives across turns) where the task's context is the injected
//! variable `context` (the task metadata's `context` field, or `None`), never pasted into the
//! prompt. The program may call `llm_query(prompt)` / `llm_query_batched(prompts)`, answered by
//! the policy's own endpoint (see [`crate::host_tools`]); each sub-call is recorded under the turn
//! whose program made it, and its tokens count in the episode's usage.
//!
//! The episode ends when the program calls `FINAL(answer)`: after that cell the answer is scored
//! by the task's own reward, by printing it from a fresh script-mode env of the same task (the
//! session's replayed program cannot be scored as is: the scoring run has no host tools). That
//! scoring step is the turn's last env step, and its reward is the episode's final reward.

use std::time::Instant;

use env_core::contract;
use env_core::{EnvError, Value};
use serde_json::json;

use trajectory::record::{ActionRecord, ChatMessage, Role, StopReason};

use super::format;
use super::primitives::{StepResult, call_model, env_step, run_python};
use super::state::{Ending, EpisodeContext, EpisodePlan, EpisodeState};
use crate::client::millis;
use crate::host_tools::{PolicyTools, declarations, make_with_tools};

/// Plays the episode in program-of-thought mode.
pub(super) async fn play(
    ctx: &EpisodeContext,
    plan: &EpisodePlan,
    st: &mut EpisodeState,
) -> Ending {
    let tools = PolicyTools::new(
        ctx.client.clone(),
        plan.endpoint,
        ctx.config.model.episode_retry_budget,
    );
    let mut context = match setup(ctx, plan, st, &tools).await {
        Ok(context) => Some(context),
        Err(ending) => return ending,
    };
    let ep = &ctx.config.episode;
    for turn in 0..ep.max_turns {
        let completion = match call_model(ctx, plan, st, None).await {
            Ok(c) => c,
            Err(ending) => return ending,
        };
        let content = completion.message.content.unwrap_or_default();
        let Some(code) = code_extract::first_python_block(&content).map(str::to_string) else {
            return Ending::new(StopReason::NoCode);
        };
        let mut action = run_python(&code);
        // The context goes in with the first cell only: it stays in the session's namespace.
        if let (Some(ctx_value), Value::Json(action)) = (context.take(), &mut action) {
            action[contract::field::VARS] = json!({ "context": ctx_value });
        }
        let stepped = env_step(
            st,
            action,
            // Program-of-thought cells are Python (a session); the episode's language is not used.
            ActionRecord::CodeBlock {
                code,
                language: None,
            },
            None,
        )
        .await;
        record_sub_calls(st, &tools);
        let (obs, reward) = match stepped {
            Ok(StepResult::Done(ending)) | Err(ending) => return ending,
            Ok(StepResult::Continue { obs }) => *obs,
        };
        if let Some(answer) = tools.final_answer() {
            return score(ctx, plan, st, &answer).await;
        }
        if turn + 1 < ep.max_turns {
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

/// A session-mode env serving the engine's tools, reset on the task; returns the context to
/// inject.
async fn setup(
    ctx: &EpisodeContext,
    plan: &EpisodePlan,
    st: &mut EpisodeState,
    tools: &PolicyTools,
) -> Result<serde_json::Value, Ending> {
    let config = &ctx.config;
    let mut kwargs = config.env_kwargs.clone();
    kwargs.insert("mode".into(), json!("session"));
    kwargs.insert("tools".into(), declarations());
    let t = Instant::now();
    let made = make_with_tools(&ctx.backend, &config.env_id, &kwargs, tools).await;
    st.env_ms += millis(t.elapsed());
    st.session = Some(made.map_err(Ending::env)?);
    let (obs, info) = reset(st, plan).await?;
    let context = info
        .get("metadata")
        .and_then(|m| m.get("context"))
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    let task = format::observation_text(&obs);
    let (system, user) = config.episode.prompts.opening(config.episode.mode, &task);
    st.messages.push(ChatMessage::text(Role::System, system));
    st.messages.push(ChatMessage::text(Role::User, user));
    Ok(context)
}

async fn reset(
    st: &mut EpisodeState,
    plan: &EpisodePlan,
) -> Result<(Value, env_core::Info), Ending> {
    let mut options = serde_json::Map::new();
    options.insert("task_id".into(), json!(plan.task_id));
    let t = Instant::now();
    let reset = match st.session.as_mut() {
        Some(s) => s.reset(Some(plan.seed), options).await,
        None => Err(EnvError::ClosedEnvironment),
    };
    st.env_ms += millis(t.elapsed());
    reset.map_err(Ending::env)
}

/// Moves the sub-calls made during the last step under the current turn.
fn record_sub_calls(st: &mut EpisodeState, tools: &PolicyTools) {
    let calls = tools.take_calls();
    for c in &calls {
        if let Some(u) = &c.call.usage {
            st.usage.add(u);
        }
    }
    if let Some(turn) = st.turns.last_mut() {
        turn.sub_calls.extend(calls);
    }
}

/// Scores `answer` with the task's reward: a fresh script-mode env of the task prints it.
async fn score(
    ctx: &EpisodeContext,
    plan: &EpisodePlan,
    st: &mut EpisodeState,
    answer: &serde_json::Value,
) -> Ending {
    let text = match answer {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    // A JSON string literal is a valid Python string literal.
    let code = format!("print({})\n", json!(text));
    let mut kwargs = ctx.config.env_kwargs.clone();
    kwargs.insert("mode".into(), json!("script"));
    kwargs.remove("tools");
    let t = Instant::now();
    let made = ctx.backend.make(&ctx.config.env_id, &kwargs, None).await;
    st.env_ms += millis(t.elapsed());
    let scorer = match made {
        Ok(s) => s,
        Err(e) => return Ending::env(e),
    };
    // The session is closed now: the episode is over, and its record closes nothing twice.
    if let Some(session) = st.session.replace(scorer) {
        let _ = session.close().await;
    }
    if let Err(ending) = reset(st, plan).await {
        return ending;
    }
    let stepped = env_step(
        st,
        run_python(&code),
        ActionRecord::RunPython { code: code.clone() },
        None,
    )
    .await;
    match stepped {
        Ok(StepResult::Done(ending)) | Err(ending) => ending,
        Ok(StepResult::Continue { .. }) => Ending::new(StopReason::EnvDone),
    }
}
