//! AutoCoder mode (after Flyte's AutoCoderAgent): per episode, structured calls to the
//! policy for a plan, a solution (code and requirements) and a pytest suite; the env runs the suite
//! against the solution ([`workbench`]); on failure the model diagnoses it as a `logic`,
//! `environment` or `test` error and the loop patches the code, adds packages or fixes the tests,
//! up to `max_turns` runs of the suite. Then the task's own hidden checks score the final solution:
//! that step's reward is the episode's. The model's tests never give reward; their pass rate is
//! recorded beside it (`autocoder.model_tests_pass_rate`).
//!
//! Every model call is a turn with its [`StageRecord`]; a run of the tests is an env step of the turn
//! whose answer it tested. Answers are JSON objects of the stage's schema ([`structured`]), asked for
//! with `response_format` until the endpoint refuses it (a 400), then as a fenced ```json block.

mod structured;
mod workbench;

use structured::{Answer, Ask};
use trajectory::record::{
    AutoCoderSummary, ChatMessage, Diagnosis, ErrorKind, ModelTestRun, Role, StageRecord,
    StopReason,
};
use workbench::Solution;

use super::primitives::call_model_with;
use super::state::{Ending, EpisodeContext, EpisodePlan, EpisodeState};

/// An answer that is not the stage's JSON is asked for again this many times.
const REASKS: u32 = 1;

/// The loop's progress.
struct Loop {
    structured: bool,
    sol: Solution,
    summary: AutoCoderSummary,
}

/// Plays the episode in AutoCoder mode, after its opening.
pub(super) async fn play(
    ctx: &EpisodeContext,
    plan: &EpisodePlan,
    st: &mut EpisodeState,
) -> Ending {
    let mut lp = Loop {
        structured: ctx.config.episode.autocoder.structured_outputs,
        sol: Solution::default(),
        summary: AutoCoderSummary::default(),
    };
    match stages(ctx, plan, st, &mut lp).await {
        Ok(true) => {}
        Ok(false) => return Ending::new(StopReason::NoCode),
        Err(ending) => return ending,
    }
    let (ending, refusal) = workbench::score_solution(plan, st, &lp.sol).await;
    if let Some(why) = refusal {
        tracing::debug!(reason = %why, "final requirements refused; scored without them");
    }
    ending
}

/// The stages; `Ok(false)` when no usable solution came.
async fn stages(
    ctx: &EpisodeContext,
    plan: &EpisodePlan,
    st: &mut EpisodeState,
    lp: &mut Loop,
) -> Result<bool, Ending> {
    if let Some(Answer::Plan(p)) = ask(ctx, plan, st, lp, Ask::Plan, PLAN.into()).await? {
        lp.summary.plan = Some(p);
    }
    let Some(Answer::Code { code, requirements }) =
        ask(ctx, plan, st, lp, Ask::Solution, SOLUTION.into()).await?
    else {
        return Ok(false);
    };
    lp.sol.code = code;
    lp.sol.requirements = requirements;
    sync(st, lp);
    let Some(Answer::Tests(tests)) = ask(ctx, plan, st, lp, Ask::Tests, TESTS.into()).await? else {
        return Ok(true);
    };
    lp.sol.tests = tests;
    sync(st, lp);
    let max_runs = ctx.config.episode.max_turns;
    for run in 1..=max_runs {
        let (result, report) = workbench::run_model_tests(ctx, plan, st, &lp.sol).await?;
        record_run(st, lp, result.clone());
        if result.all_passed() || run == max_runs {
            break;
        }
        let instruction = format!("{DIAGNOSE_HEAD}\n\n{report}\n\n{DIAGNOSE_TAIL}");
        let Some(Answer::Diagnosis { kind, .. }) =
            ask(ctx, plan, st, lp, Ask::Diagnose, instruction).await?
        else {
            break;
        };
        lp.summary.diagnoses.push(kind);
        sync(st, lp);
        let fix = match kind {
            Diagnosis::Logic => FIX_LOGIC,
            Diagnosis::Environment => FIX_ENVIRONMENT,
            Diagnosis::Test => FIX_TEST,
        };
        match ask(ctx, plan, st, lp, Ask::Fix(kind), fix.into()).await? {
            Some(Answer::Code { code, requirements }) => {
                lp.sol.code = code;
                workbench::merge(&mut lp.sol.requirements, &requirements);
            }
            Some(Answer::Requirements(r)) => workbench::merge(&mut lp.sol.requirements, &r),
            Some(Answer::Tests(t)) => lp.sol.tests = t,
            _ => break,
        }
        sync(st, lp);
    }
    Ok(true)
}

/// One stage: the instruction, the call (falling back to fenced JSON when the endpoint refuses
/// `response_format`), the parse (asking again once when it fails). `Ok(None)`: no usable answer.
async fn ask(
    ctx: &EpisodeContext,
    plan: &EpisodePlan,
    st: &mut EpisodeState,
    lp: &mut Loop,
    what: Ask,
    instruction: String,
) -> Result<Option<Answer>, Ending> {
    let schema = serde_json::to_string(&what.schema()).unwrap_or_default();
    st.messages.push(ChatMessage::text(
        Role::User,
        format!(
            "{instruction}\n\nAnswer with one JSON object matching this JSON schema (bare, or in a \
             ```json block):\n{schema}"
        ),
    ));
    let mut reasks = 0;
    loop {
        let format = lp.structured.then(|| what.response_format());
        let completion = match call_model_with(ctx, plan, st, None, format.as_ref()).await {
            Ok(c) => c,
            Err(ending) if lp.structured && refused_format(&ending) => {
                // The endpoint has no structured outputs: the rest of the episode uses fenced JSON.
                let why = ending.error.map(|e| e.message).unwrap_or_default();
                mark(
                    st,
                    stage(
                        what,
                        true,
                        None,
                        Some(format!("response_format refused: {why}")),
                    ),
                );
                lp.structured = false;
                lp.summary.fenced_json_fallback = true;
                continue;
            }
            Err(ending) => return Err(ending),
        };
        let text = completion.message.content.unwrap_or_default();
        match structured::parse(what, &text) {
            Ok((value, answer)) => {
                let mut rec = stage(what, lp.structured, Some(value), None);
                if let Answer::Diagnosis { kind, .. } = &answer {
                    rec.diagnosis = Some(*kind);
                }
                mark(st, rec);
                return Ok(Some(answer));
            }
            Err(why) => {
                mark(st, stage(what, lp.structured, None, Some(why.clone())));
                if reasks >= REASKS {
                    return Ok(None);
                }
                reasks += 1;
                st.messages.push(ChatMessage::text(
                    Role::User,
                    format!("That answer could not be used: {why}. Answer again with only the JSON object."),
                ));
            }
        }
    }
}

/// Whether a failed call was the endpoint refusing `response_format` (a 4xx other than length).
fn refused_format(ending: &Ending) -> bool {
    ending
        .error
        .as_ref()
        .is_some_and(|e| e.kind == ErrorKind::BadRequest)
}

fn stage(
    what: Ask,
    structured: bool,
    output: Option<serde_json::Value>,
    parse_error: Option<String>,
) -> StageRecord {
    StageRecord {
        stage: what.stage(),
        output,
        structured,
        parse_error,
        diagnosis: match what {
            Ask::Fix(d) => Some(d),
            _ => None,
        },
        model_tests: None,
    }
}

/// Sets the stage of the latest turn (the call just made).
fn mark(st: &mut EpisodeState, rec: StageRecord) {
    if let Some(turn) = st.turns.last_mut() {
        turn.stage = Some(rec);
    }
}

/// Records a run of the model's tests on the turn whose answer it tested.
fn record_run(st: &mut EpisodeState, lp: &mut Loop, run: ModelTestRun) {
    lp.summary.test_runs += 1;
    lp.summary.model_tests_pass_rate = Some(run.pass_rate);
    if let Some(rec) = st.turns.last_mut().and_then(|t| t.stage.as_mut()) {
        rec.model_tests = Some(run);
    }
    sync(st, lp);
}

/// Keeps the record's summary current, so that a deadline or cancellation still leaves it.
fn sync(st: &mut EpisodeState, lp: &Loop) {
    let mut s = lp.summary.clone();
    s.code.clone_from(&lp.sol.code);
    s.requirements.clone_from(&lp.sol.requirements);
    s.tests.clone_from(&lp.sol.tests);
    st.autocoder = Some(s);
}

const PLAN: &str = "Stage 1, plan: describe briefly how you will solve the task (the approach, the \
                    functions, the edge cases).";
const SOLUTION: &str = "Stage 2, solution: write the complete Python program. Put the logic in \
                        functions and run the program's work under `if __name__ == \"__main__\":`, \
                        because your tests import it as the module `program` (file program.py). \
                        List the pip requirements it needs beyond the standard library (often none).";
const TESTS: &str = "Stage 3, tests: write a pytest test suite for your solution (file \
                     test_program.py; import what you test from `program`). Test behaviour the \
                     task asks for, including edge cases.";
const DIAGNOSE_HEAD: &str = "Your tests did not pass against your solution.";
const DIAGNOSE_TAIL: &str = "Diagnose the failure: `logic` (the solution is wrong), `environment` (a \
                             package is missing or cannot be imported) or `test` (the test itself is \
                             wrong).";
const FIX_LOGIC: &str = "Fix the solution: answer with the complete corrected program and its \
                         requirements.";
const FIX_ENVIRONMENT: &str = "Fix the environment: answer with the pip requirements to add.";
const FIX_TEST: &str = "Fix the tests: answer with the complete corrected test suite.";
