//! The cross-checks of a rescoring: the rewarded steps a rollout with the same fraction would
//! check (`trajectory::cross_check`'s rules), compared with their task's reference by the one
//! [`Checker`], each outcome written with its penalty.

use trajectory::cross_check as rules;
use trajectory::record::{CrossCheckRecord, OnDisagreement, TrajectoryRecord};

use crate::cross_check::Checker;

/// A rescoring's cross-checks: the checker, the fraction of rewarded steps, the penalty.
pub(super) struct CrossChecks {
    pub checker: Checker,
    pub fraction: f64,
    pub on_disagreement: OnDisagreement,
}

impl CrossChecks {
    /// Checks the steps of `record` the rules select, in order, and writes each outcome with its
    /// penalty.
    pub(super) async fn check(&self, record: &mut TrajectoryRecord) {
        if !self.checker.covers(&record.task_id) {
            return;
        }
        let mut selected = Vec::new();
        let mut index = 0;
        for (t, turn) in record.turns.iter().enumerate() {
            for (i, step) in turn.env_steps.iter().enumerate() {
                if let Some(c) = rules::selected(self.fraction, record.seed, index, step) {
                    selected.push(((t, i), c));
                }
                index += 1;
            }
        }
        for (at, candidate) in selected {
            let check = match candidate {
                Err(why) => CrossCheckRecord::unavailable(why),
                Ok(c) => self
                    .checker
                    .check(&record.task_id, &c.program, &c.language)
                    .await
                    .unwrap_or_else(|e| CrossCheckRecord::error(e.to_string())),
            };
            rules::apply(record, at, check, self.on_disagreement);
        }
    }
}
