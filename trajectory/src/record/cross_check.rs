//! What a cross-check of a rewarded program found: the program that earned a step's reward run on
//! inputs derived from the task's own tests and compared with the task's reference solution
//! (`codegym rollout --cross-check`, `codegym rescore --cross-check`), and what was done about a
//! disagreement. The rules that pick the steps and apply the penalty are [`crate::cross_check`].

use serde::{Deserialize, Serialize};

/// Disagreements kept in a record (the first ones found); [`CrossCheckRecord::disagreeing`]
/// counts them all.
pub const SHOWN_DISAGREEMENTS: usize = 3;

/// One step's cross-check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CrossCheckRecord {
    pub outcome: CrossCheckOutcome,
    /// Inputs the program was compared on (those the reference handles).
    #[serde(default)]
    pub inputs: u64,
    /// Inputs on which the program and the reference disagree.
    #[serde(default)]
    pub disagreeing: u64,
    /// The first [`SHOWN_DISAGREEMENTS`] of them, with both outputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disagreements: Vec<DisagreementRecord>,
    /// Why there was no comparison (`unavailable`) or what failed (`error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// What was done about the outcome: `keep` unless the program disagreed and the run said
    /// otherwise (`--on-disagreement`).
    #[serde(default)]
    pub action: OnDisagreement,
    /// The step's reward as the env gave it (its `reward` is 0 when `action` is `zero`).
    pub original_reward: f64,
}

/// How a cross-check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CrossCheckOutcome {
    /// The program and the reference agree on every derived input.
    Agree,
    /// They disagree on at least one.
    Disagree,
    /// No comparison was possible (the task's inputs could not be derived, the program is in
    /// another language than the reference, a session-mode step...); `why` says which.
    Unavailable,
    /// The machinery failed (the sandbox could not run the check): never a verdict, and never a
    /// change of the reward.
    Error,
}

impl CrossCheckOutcome {
    /// Every outcome, in the order summaries list them.
    pub const ALL: [CrossCheckOutcome; 4] = [
        CrossCheckOutcome::Agree,
        CrossCheckOutcome::Disagree,
        CrossCheckOutcome::Unavailable,
        CrossCheckOutcome::Error,
    ];

    /// The snake_case name used in JSON and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            CrossCheckOutcome::Agree => "agree",
            CrossCheckOutcome::Disagree => "disagree",
            CrossCheckOutcome::Unavailable => "unavailable",
            CrossCheckOutcome::Error => "error",
        }
    }
}

/// What a disagreement does to the step (`--on-disagreement`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDisagreement {
    /// Recorded only.
    #[default]
    Keep,
    /// Recorded, and the step no longer counts as solving the task (its reward is kept).
    Flag,
    /// Recorded, and the step's reward becomes 0.
    Zero,
}

impl OnDisagreement {
    pub fn as_str(self) -> &'static str {
        match self {
            OnDisagreement::Keep => "keep",
            OnDisagreement::Flag => "flag",
            OnDisagreement::Zero => "zero",
        }
    }
}

/// One input on which the program and the reference disagree (each text capped by the checker).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DisagreementRecord {
    /// The input: a function's argument list as JSON, or a program's stdin.
    pub input: String,
    /// The reference's output.
    pub reference: String,
    /// The program's output, or why it gave none.
    pub candidate: String,
}

impl CrossCheckRecord {
    fn new(outcome: CrossCheckOutcome) -> Self {
        CrossCheckRecord {
            outcome,
            inputs: 0,
            disagreeing: 0,
            disagreements: Vec::new(),
            why: None,
            action: OnDisagreement::Keep,
            original_reward: 0.0,
        }
    }

    /// The comparison on `inputs` inputs found `disagreements` (all of them; the first
    /// [`SHOWN_DISAGREEMENTS`] are kept).
    pub fn compared(inputs: u64, mut disagreements: Vec<DisagreementRecord>) -> Self {
        let outcome = if disagreements.is_empty() {
            CrossCheckOutcome::Agree
        } else {
            CrossCheckOutcome::Disagree
        };
        let disagreeing = disagreements.len() as u64;
        disagreements.truncate(SHOWN_DISAGREEMENTS);
        CrossCheckRecord {
            inputs,
            disagreeing,
            disagreements,
            ..CrossCheckRecord::new(outcome)
        }
    }

    /// No comparison was possible, and why.
    pub fn unavailable(why: impl Into<String>) -> Self {
        CrossCheckRecord {
            why: Some(why.into()),
            ..CrossCheckRecord::new(CrossCheckOutcome::Unavailable)
        }
    }

    /// The machinery failed, and how.
    pub fn error(why: impl Into<String>) -> Self {
        CrossCheckRecord {
            why: Some(why.into()),
            ..CrossCheckRecord::new(CrossCheckOutcome::Error)
        }
    }

    /// Whether the step no longer counts as solving its task (a disagreement flagged or zeroed).
    pub fn unsolves(&self) -> bool {
        self.outcome == CrossCheckOutcome::Disagree && self.action != OnDisagreement::Keep
    }

    /// Whether the step's reward was set to 0 ([`CrossCheckRecord::original_reward`] holds it).
    pub fn zeroes(&self) -> bool {
        self.outcome == CrossCheckOutcome::Disagree && self.action == OnDisagreement::Zero
    }
}
