//! Tools mode on a repository env (`codegym/Repo-v0`): the model's function calls checked by the
//! contract's one decoder of repository tool calls (`env_core::contract::repo`, the env's own) and
//! sent as the env's action, recorded as [`ActionRecord::RepoTool`]; the submit step's diff and
//! verdict kept as the record's [`RepoOutcome`]. The loop itself is tools mode's; an episode it
//! ends without a submit is submitted by the engine ([`submit_at_end`]).

use env_core::Value;
use env_core::contract::repo::{REPO_ENV_ID, RepoToolCall};
use env_core::contract::tool;
use trajectory::record::{ActionRecord, ChatToolCall, RepoOutcome};

use super::primitives::{StepResult, env_step};
use super::state::{Ending, EpisodeContext, EpisodeState};
use trajectory::record::StopReason;

/// Whether the episode's env is the repository env.
pub(super) fn is_repo(ctx: &EpisodeContext) -> bool {
    ctx.config.env_id == REPO_ENV_ID
}

/// Turns a function call into the env's action (`{"tool": name, ...arguments}`) and its record,
/// or says why the env would refuse it (then nothing is sent).
pub(super) fn decode(call: &ChatToolCall) -> Result<(Value, ActionRecord), String> {
    let text = call.function.arguments.trim();
    // A call of a tool without fields (`submit`) may come with no arguments at all.
    let args = match text {
        "" => serde_json::Value::Object(serde_json::Map::new()),
        _ => serde_json::from_str(text)
            .map_err(|e| format!("the arguments are not valid JSON: {e}"))?,
    };
    let serde_json::Value::Object(arguments) = args else {
        return Err("the arguments are not a JSON object".into());
    };
    // The tool is the call's name; an argument may not name another one.
    if arguments.contains_key(tool::KEY) {
        return Err(format!("`{}` is not an argument", tool::KEY));
    }
    let name = call.function.name.clone();
    let mut action = arguments.clone();
    action.insert(tool::KEY.into(), serde_json::Value::String(name.clone()));
    let action = serde_json::Value::Object(action);
    RepoToolCall::decode(action.clone())?;
    Ok((
        Value::Json(action),
        ActionRecord::RepoTool {
            tool: name,
            arguments,
        },
    ))
}

/// Keeps the submit step's diff and verdict (its `info["patch"]` and `info["verdict"]`) as the
/// record's repository outcome, when the episode's last step has them.
pub(super) fn keep_outcome(st: &mut EpisodeState) {
    let Some(step) = st.turns.last().and_then(|t| t.env_steps.last()) else {
        return;
    };
    if let Some(verdict) = step.info.get("verdict") {
        st.repository = Some(RepoOutcome {
            patch: step
                .info
                .get("patch")
                .and_then(serde_json::Value::as_str)
                .map(str::to_string),
            verdict: verdict.clone(),
            auto_submitted: false,
        });
    }
}

/// Submits for the model when a repository episode ended on the model's side without a submit:
/// its turns used up, an answer without a call, its context full. The diff is scored as a submit
/// would score it, so the episode's reward is its diff's (what SWE-bench's harnesses do with an
/// agent that stops); the stop reason stays the model's. Recorded as a `submit` step answering
/// no call, and the outcome says the engine made it. A submit that fails is the episode's
/// error (retried, never a reward); an episode that never called the model has no step to hang
/// it on and is left unscored.
pub(super) async fn submit_at_end(
    ctx: &EpisodeContext,
    st: &mut EpisodeState,
    ending: Ending,
) -> Ending {
    let model_ended = matches!(
        ending.stop,
        StopReason::MaxTurns | StopReason::NoCode | StopReason::ContextLength
    );
    if !ctx.config.episode.auto_submit
        || !is_repo(ctx)
        || !model_ended
        || st.repository.is_some()
        || st.turns.is_empty()
    {
        return ending;
    }
    let action = serde_json::json!({ tool::KEY: tool::SUBMIT });
    let record = ActionRecord::RepoTool {
        tool: tool::SUBMIT.into(),
        arguments: serde_json::Map::new(),
    };
    match env_step(st, Value::Json(action), record, None).await {
        Ok(StepResult::Done(_)) => {
            keep_outcome(st);
            if let Some(outcome) = st.repository.as_mut() {
                outcome.auto_submitted = true;
            }
            ending
        }
        // The env ends every submit; one that did not is refused rather than guessed at.
        Ok(StepResult::Continue { .. }) => Ending::error(
            StopReason::Error,
            trajectory::record::ErrorKind::Env,
            "the repository env did not end the episode at the engine's submit",
        ),
        Err(failed) => failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
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
    fn calls_become_the_envs_actions_or_say_why_not() {
        let (action, record) = decode(&call("view", r#"{"path":"a.py","start":2}"#)).unwrap();
        assert_eq!(
            action,
            Value::Json(json!({"tool": "view", "path": "a.py", "start": 2}))
        );
        assert_eq!(
            record,
            ActionRecord::RepoTool {
                tool: "view".into(),
                arguments: json!({"path": "a.py", "start": 2})
                    .as_object()
                    .cloned()
                    .unwrap()
            }
        );
        let (action, _) = decode(&call("submit", "")).unwrap();
        assert_eq!(action, Value::Json(json!({"tool": "submit"})));
        for (name, args) in [
            ("view", r#"{"path": "a.py", "#),
            ("view", r#"["a.py"]"#),
            ("view", r#"{"path": "a.py", "start": "2"}"#),
            ("bash", r#"{}"#),
            ("bash", r#"{"command": "ls", "tool": "submit"}"#),
            ("run_python", r#"{"code": "1"}"#),
        ] {
            assert!(decode(&call(name, args)).is_err(), "{name} {args}");
        }
    }
}
