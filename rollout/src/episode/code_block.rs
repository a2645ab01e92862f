//! Code-block mode: the model answers in prose with a fenced block; the first block in the
//! episode's language runs as a `run_python` or `run_code` action, and the feedback (the `feedback`
//! template over the execution) is the next user message.

use trajectory::record::{ActionRecord, ChatMessage, Role, StopReason};

use super::format;
use super::primitives::{StepResult, call_model, env_step, run_code, run_python};
use super::state::{Ending, EpisodeContext, EpisodePlan, EpisodeState};

/// Plays the episode in code-block mode, after its opening.
pub(super) async fn play(
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
        // A block in the episode's language; a block in another one is no code.
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
            let template = prompts::render(&ep.prompts.feedback, &[("language", language)]);
            let text = format::feedback(&template, &obs, reward, false, ep.feedback_max_chars);
            st.messages.push(ChatMessage::text(Role::User, text));
        }
    }
    Ending::new(StopReason::MaxTurns)
}
