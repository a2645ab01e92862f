//! Cross-checks of rewarded programs: which steps are checked, and what an outcome does to the
//! record. One set of rules for `codegym rollout --cross-check` (the engine checks steps as they
//! are scored) and `codegym rescore --cross-check` (a stored dataset), so both check the same
//! steps of the same episode and penalise them the same way. The checking itself (deriving
//! inputs, running the program and the reference) is the coding env's; the record types are
//! [`crate::record::CrossCheckRecord`]'s module.
//!
//! - **Which steps.** A step whose program earned a reward (`> 0`, before any penalty): the code
//!   of its action, as the env ran it in script mode. A session-mode step's reward is the
//!   session's replayed cells', not its action's: it is `unavailable`.
//! - **Which fraction.** `sampled(fraction, episode seed, step index)` by a stable hash of the
//!   episode's seed (itself a stable function of the run seed, task and sample) and the step's
//!   index among the episode's env steps: a resumed run, and a rescoring of its dataset, sample
//!   the same steps.
//! - **What a disagreement does** ([`OnDisagreement`]): `keep` records it; `flag` records it and
//!   the step no longer counts as solving the task (the record's `solved` follows); `zero` also
//!   sets the step's reward to 0 (the record's `total_reward` and `final_reward` follow; the
//!   env's reward stays in `cross_check.original_reward`). Any other outcome changes nothing.

use env_core::contract::info;

use crate::mix::splitmix64;
use crate::record::{
    ActionRecord, CrossCheckOutcome, CrossCheckRecord, EnvStepRecord, OnDisagreement,
    TrajectoryRecord,
};

/// The program a rewarded step ran, and its language (SandboxFusion's name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub program: String,
    pub language: String,
}

/// The reward the env gave `step` (a `zero` penalty keeps it in `cross_check.original_reward`).
pub fn earned_reward(step: &EnvStepRecord) -> f64 {
    match &step.cross_check {
        Some(c) if c.zeroes() => c.original_reward,
        _ => step.reward,
    }
}

/// Whether a run cross-checking `fraction` of the rewarded steps checks the `index`-th env step
/// (0-based, over every env step of the episode in order) of the episode seeded `episode_seed`.
pub fn sampled(fraction: f64, episode_seed: u64, index: u64) -> bool {
    if fraction >= 1.0 {
        return true;
    }
    if fraction.is_nan() || fraction <= 0.0 {
        return false;
    }
    let h = splitmix64(episode_seed ^ splitmix64(index.wrapping_add(0x5851_f42d_4c95_7f2d)));
    // The top 53 bits as a uniform number in [0, 1).
    ((h >> 11) as f64 / (1u64 << 53) as f64) < fraction
}

/// What a cross-check of `step` compares: `None` when there is nothing to check (the step
/// earned no reward, or ran no program), `Some(Err(why))` when its program cannot be compared.
pub fn candidate(step: &EnvStepRecord) -> Option<Result<Candidate, String>> {
    if step.error.is_some() || earned_reward(step) <= 0.0 {
        return None;
    }
    let (program, language) = match &step.action {
        ActionRecord::CodeBlock { code, language } => (code, language.as_deref()),
        ActionRecord::RunPython { code } => (code, None),
        ActionRecord::RunCode { code, language } => (code, Some(language.as_str())),
        _ => return None,
    };
    if step.info.get(info::MODE).and_then(|m| m.as_str()) == Some("session") {
        return Some(Err(
            "a session-mode step's reward is the session's replayed cells', not its action's"
                .into(),
        ));
    }
    Some(Ok(Candidate {
        program: program.clone(),
        language: language.unwrap_or("python").to_string(),
    }))
}

/// What a run cross-checking `fraction` of the rewarded steps does with the `index`-th env step
/// of the episode seeded `episode_seed`: `None` to leave it, else its [`candidate`].
pub fn selected(
    fraction: f64,
    episode_seed: u64,
    index: u64,
    step: &EnvStepRecord,
) -> Option<Result<Candidate, String>> {
    if !sampled(fraction, episode_seed, index) {
        return None;
    }
    candidate(step)
}

/// Whether `step` counts as solving its task: the env said so (`info.solved`, else
/// `terminated`), and no cross-check flagged or zeroed it.
pub fn solves(step: &EnvStepRecord) -> bool {
    step.error.is_none()
        && step
            .info
            .get(info::SOLVED)
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(step.terminated)
        && !step.cross_check.as_ref().is_some_and(|c| c.unsolves())
}

/// The step whose reward is the record's `final_reward`: the last one the env scored (not a
/// failed step, not the model's own tests).
fn final_step(record: &TrajectoryRecord) -> Option<(usize, usize)> {
    let mut last = None;
    for (t, turn) in record.turns.iter().enumerate() {
        for (i, s) in turn.env_steps.iter().enumerate() {
            if s.error.is_none() && !matches!(s.action, ActionRecord::ModelTests { .. }) {
                last = Some((t, i));
            }
        }
    }
    last
}

/// Writes `check` on the step at `(turn, step)` of `record` under the run's `policy`, replacing
/// an earlier check (whose penalty is undone first): sets its `action` and `original_reward`,
/// applies the penalty, and updates the record's `total_reward`, `final_reward` and `solved`.
pub fn apply(
    record: &mut TrajectoryRecord,
    (turn, index): (usize, usize),
    mut check: CrossCheckRecord,
    policy: OnDisagreement,
) {
    let is_final = final_step(record) == Some((turn, index));
    let Some(step) = record
        .turns
        .get_mut(turn)
        .and_then(|t| t.env_steps.get_mut(index))
    else {
        return;
    };
    let earned = earned_reward(step);
    check.original_reward = earned;
    check.action = match check.outcome {
        CrossCheckOutcome::Disagree => policy,
        _ => OnDisagreement::Keep,
    };
    let reward = if check.zeroes() { 0.0 } else { earned };
    record.total_reward += reward - step.reward;
    if is_final {
        record.final_reward = reward;
    }
    step.reward = reward;
    step.cross_check = Some(check);
    record.solved = record.turns.iter().flat_map(|t| &t.env_steps).any(solves);
}

#[cfg(test)]
mod tests;
