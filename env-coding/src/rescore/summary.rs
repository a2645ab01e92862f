//! The summary of a rescoring: how many steps kept their reward, how many changed and why, which
//! could not be rescored, and (with `--repeat`) which programs' verdicts were not the same every
//! time. Written beside the output as JSON and printed as a table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use trajectory::aggregate::CrossCheckCounts;
use trajectory::cross_check::earned_reward;
use trajectory::record::{CrossCheckOutcome, DriftReason, TrajectoryRecord};

use super::Turns;

/// The summary's format version (a changed meaning of a field bumps it).
pub const SUMMARY_FORMAT_VERSION: u32 = 1;

/// What a rescoring found, over every rescored step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub format_version: u32,
    pub turns: Turns,
    pub repeat: u32,
    pub episodes: usize,
    /// Steps selected for rescoring (`turns`).
    pub steps: usize,
    /// Rescored with the recorded reward.
    pub unchanged: usize,
    /// Rescored with another reward.
    pub changed: usize,
    /// Not rescored (see `not_rescored`): they keep their recorded reward.
    pub errors: usize,
    /// For the changed steps: how many had each reason.
    pub reasons: BTreeMap<&'static str, usize>,
    /// For the unchanged steps: what differs in their provenance all the same (e.g. a new
    /// codegym version that scores the same, or `no_provenance_recorded`).
    pub unchanged_drift: BTreeMap<&'static str, usize>,
    /// For the steps not rescored: how many for each reason (`task_missing`, `not_replayable`,
    /// `replay_failed`).
    pub not_rescored_reasons: BTreeMap<&'static str, usize>,
    /// Mean reward of the rescored steps, as recorded and as rescored.
    pub mean_recorded_reward: f64,
    pub mean_reward: f64,
    pub changes: Vec<Change>,
    pub not_rescored: Vec<NotRescored>,
    /// With `repeat > 1`: the steps whose rewards were not all equal.
    pub flaky: Vec<Flaky>,
    /// With `--cross-check`: the steps' cross-checks by outcome (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cross_checks: Option<CrossCheckCounts>,
    /// With `--cross-check`: the steps whose program disagreed with the reference.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disagreements: Vec<Disagreeing>,
}

/// A step whose program disagreed with the task's reference, on how many inputs of how many.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Disagreeing {
    #[serde(flatten)]
    pub at: StepRef,
    pub disagreeing: u64,
    pub inputs: u64,
    /// The step's reward after the penalty (`--on-disagreement`).
    pub reward: f64,
}

/// Where a step is: episode, task, turn and step index within the turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepRef {
    pub episode_id: String,
    pub task_id: String,
    pub turn: usize,
    pub step: usize,
}

/// A step whose reward changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    #[serde(flatten)]
    pub at: StepRef,
    pub recorded_reward: f64,
    pub reward: f64,
    pub reasons: Vec<DriftReason>,
}

/// A step that was not rescored, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotRescored {
    #[serde(flatten)]
    pub at: StepRef,
    pub error: String,
}

/// A step whose repeated runs disagreed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Flaky {
    #[serde(flatten)]
    pub at: StepRef,
    pub rewards: Vec<f64>,
}

impl Summary {
    /// The summary of rescored `records` (their steps' `rescore` fields, and their
    /// `cross_check` fields when the rescoring `cross_checked`).
    pub(super) fn of(
        records: &[TrajectoryRecord],
        turns: Turns,
        repeat: u32,
        cross_checked: bool,
    ) -> Summary {
        let mut s = Summary {
            format_version: SUMMARY_FORMAT_VERSION,
            turns,
            repeat,
            episodes: records.len(),
            steps: 0,
            unchanged: 0,
            changed: 0,
            errors: 0,
            reasons: BTreeMap::new(),
            unchanged_drift: BTreeMap::new(),
            not_rescored_reasons: BTreeMap::new(),
            mean_recorded_reward: 0.0,
            mean_reward: 0.0,
            changes: Vec::new(),
            not_rescored: Vec::new(),
            flaky: Vec::new(),
            cross_checks: None,
            disagreements: Vec::new(),
        };
        if cross_checked {
            s.cross_checks = Some(cross_checks(records, &mut s.disagreements));
        }
        let (mut recorded_sum, mut new_sum) = (0.0, 0.0);
        for r in records {
            for (t, turn) in r.turns.iter().enumerate() {
                for (i, step) in turn.env_steps.iter().enumerate() {
                    let Some(rs) = &step.rescore else { continue };
                    s.steps += 1;
                    let at = StepRef {
                        episode_id: r.episode_id.clone(),
                        task_id: r.task_id.clone(),
                        turn: t,
                        step: i,
                    };
                    if let Some(error) = &rs.error {
                        s.errors += 1;
                        for reason in &rs.reasons {
                            *s.not_rescored_reasons.entry(reason.as_str()).or_default() += 1;
                        }
                        s.not_rescored.push(NotRescored {
                            at,
                            error: error.clone(),
                        });
                        continue;
                    }
                    recorded_sum += rs.recorded_reward;
                    new_sum += earned_reward(step);
                    let tally = match rs.changed {
                        true => &mut s.reasons,
                        false => &mut s.unchanged_drift,
                    };
                    for reason in &rs.reasons {
                        *tally.entry(reason.as_str()).or_default() += 1;
                    }
                    if rs.repeat_rewards.windows(2).any(|w| w[0] != w[1]) {
                        s.flaky.push(Flaky {
                            at: at.clone(),
                            rewards: rs.repeat_rewards.clone(),
                        });
                    }
                    if rs.changed {
                        s.changed += 1;
                        s.changes.push(Change {
                            at,
                            recorded_reward: rs.recorded_reward,
                            reward: earned_reward(step),
                            reasons: rs.reasons.clone(),
                        });
                    } else {
                        s.unchanged += 1;
                    }
                }
            }
        }
        let rescored = (s.changed + s.unchanged).max(1) as f64;
        s.mean_recorded_reward = recorded_sum / rescored;
        s.mean_reward = new_sum / rescored;
        s
    }

    /// Whether every selected step was rescored and none was flaky (the command's exit status).
    pub fn clean(&self) -> bool {
        self.errors == 0 && self.flaky.is_empty()
    }

    /// The summary for people: counts, then one line per change, failure and flaky step.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} steps of {} episodes rescored: {} unchanged, {} changed, {} not rescored",
            self.steps, self.episodes, self.unchanged, self.changed, self.errors
        );
        let _ = writeln!(
            out,
            "mean reward: {:.4} recorded, {:.4} now",
            self.mean_recorded_reward, self.mean_reward
        );
        for (title, tally) in [
            ("why rewards changed", &self.reasons),
            (
                "what changed without changing a reward",
                &self.unchanged_drift,
            ),
            ("why steps were not rescored", &self.not_rescored_reasons),
        ] {
            if !tally.is_empty() {
                let _ = writeln!(out, "{title}:");
                for (reason, n) in tally {
                    let _ = writeln!(out, "  {reason:<26} {n}");
                }
            }
        }
        if !self.changes.is_empty() {
            let _ = writeln!(out, "changed:");
            for c in &self.changes {
                let reasons: Vec<&str> = c.reasons.iter().map(|r| r.as_str()).collect();
                let _ = writeln!(
                    out,
                    "  {:<24} turn {} step {}  {} -> {}  ({})",
                    c.at.episode_id,
                    c.at.turn,
                    c.at.step,
                    c.recorded_reward,
                    c.reward,
                    reasons.join(", ")
                );
            }
        }
        if !self.not_rescored.is_empty() {
            let _ = writeln!(out, "not rescored:");
            for n in &self.not_rescored {
                let _ = writeln!(
                    out,
                    "  {:<24} turn {} step {}  {}",
                    n.at.episode_id, n.at.turn, n.at.step, n.error
                );
            }
        }
        if let Some(checks) = &self.cross_checks {
            let _ = writeln!(out, "cross-checks: {checks}");
            for d in &self.disagreements {
                let _ = writeln!(
                    out,
                    "  {:<24} turn {} step {}  disagrees with the reference on {} of {} inputs (reward {})",
                    d.at.episode_id, d.at.turn, d.at.step, d.disagreeing, d.inputs, d.reward
                );
            }
        }
        if !self.flaky.is_empty() {
            let _ = writeln!(out, "flaky (verdicts differ between runs):");
            for f in &self.flaky {
                let _ = writeln!(
                    out,
                    "  {:<24} task {}  rewards {:?}",
                    f.at.episode_id, f.at.task_id, f.rewards
                );
            }
        }
        out
    }
}

/// The cross-checks of `records`' steps by outcome; the disagreeing steps go to `disagreeing`.
fn cross_checks(
    records: &[TrajectoryRecord],
    disagreeing: &mut Vec<Disagreeing>,
) -> CrossCheckCounts {
    let mut counts = CrossCheckCounts::default();
    for r in records {
        counts.add(&CrossCheckCounts::of(r));
        for (t, turn) in r.turns.iter().enumerate() {
            for (i, step) in turn.env_steps.iter().enumerate() {
                let Some(check) = step
                    .cross_check
                    .as_ref()
                    .filter(|c| c.outcome == CrossCheckOutcome::Disagree)
                else {
                    continue;
                };
                disagreeing.push(Disagreeing {
                    at: StepRef {
                        episode_id: r.episode_id.clone(),
                        task_id: r.task_id.clone(),
                        turn: t,
                        step: i,
                    },
                    disagreeing: check.disagreeing,
                    inputs: check.inputs,
                    reward: step.reward,
                });
            }
        }
    }
    counts
}
