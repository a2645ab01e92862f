//! The one aggregation of episode outcomes: solved counts, solved rate, pass@k and mean rewards.
//! The rollout summary (`FILE.summary.json`), `codegym report` and `codegym evaluate` all compute
//! their numbers here, so they agree on the same episodes.
//!
//! The rules:
//!
//! - **Errored episodes are not samples.** An episode that ended with `stop_reason` `error` or
//!   `cancelled` ([`crate::record::StopReason::is_infra_failure`]) failed for reasons outside the model (the
//!   endpoint, the environment, an interrupted run); `--resume` runs it again. It is counted in
//!   [`Aggregate::episodes`] and [`Aggregate::errored`] and in nothing else: not in the solved rate,
//!   pass@k or the means. A timeout or a context-length stop is the model's outcome and is a sample.
//! - **pass@k** is HumanEval's ([`crate::pass_at_k`]): per task, the unbiased estimator over its
//!   sampled episodes; over the tasks, the mean, reported for a k only when every task (including a
//!   task whose episodes all errored) has at least k samples. The k values are 1, 2, 4, ... below
//!   the largest number of episodes of a task, and that number itself ([`default_ks`]), unless the
//!   caller names them (`codegym evaluate -k`).
//! - **Two means, named for what they average**, both over sampled episodes:
//!   `mean_final_reward` (the reward of each episode's last env step, the task's score) and
//!   `mean_total_reward` (each episode's summed step rewards, Gymnasium's return).
//! - **Cross-checks** ([`crate::cross_check`]) are counted by outcome over the steps of sampled
//!   episodes, with the ids of the tasks where a rewarded program disagreed with the reference.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::record::{CrossCheckOutcome, TrajectoryRecord};

/// What the aggregation needs of one episode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome<'a> {
    pub task_id: &'a str,
    /// Whether the episode is a sample of the model (not an infrastructure failure).
    pub sampled: bool,
    pub solved: bool,
    pub final_reward: f64,
    pub total_reward: f64,
    /// The episode's cross-checks by outcome.
    pub cross_checks: CrossCheckCounts,
}

impl<'a> Outcome<'a> {
    /// The outcome of a trajectory record.
    pub fn of(record: &'a TrajectoryRecord) -> Self {
        Outcome {
            task_id: &record.task_id,
            sampled: !record.stop_reason.is_infra_failure(),
            solved: record.solved,
            final_reward: record.final_reward,
            total_reward: record.total_reward,
            cross_checks: CrossCheckCounts::of(record),
        }
    }
}

/// Cross-checks by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrossCheckCounts {
    pub agree: u64,
    pub disagree: u64,
    pub unavailable: u64,
    pub error: u64,
}

impl CrossCheckCounts {
    /// The cross-checks of `record`'s steps.
    pub fn of(record: &TrajectoryRecord) -> Self {
        let mut counts = CrossCheckCounts::default();
        for check in record
            .turns
            .iter()
            .flat_map(|t| &t.env_steps)
            .filter_map(|s| s.cross_check.as_ref())
        {
            *counts.get_mut(check.outcome) += 1;
        }
        counts
    }

    fn get_mut(&mut self, outcome: CrossCheckOutcome) -> &mut u64 {
        match outcome {
            CrossCheckOutcome::Agree => &mut self.agree,
            CrossCheckOutcome::Disagree => &mut self.disagree,
            CrossCheckOutcome::Unavailable => &mut self.unavailable,
            CrossCheckOutcome::Error => &mut self.error,
        }
    }

    /// The count of `outcome`.
    pub fn get(&self, outcome: CrossCheckOutcome) -> u64 {
        match outcome {
            CrossCheckOutcome::Agree => self.agree,
            CrossCheckOutcome::Disagree => self.disagree,
            CrossCheckOutcome::Unavailable => self.unavailable,
            CrossCheckOutcome::Error => self.error,
        }
    }

    pub fn total(&self) -> u64 {
        self.agree + self.disagree + self.unavailable + self.error
    }

    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &CrossCheckCounts) {
        for o in CrossCheckOutcome::ALL {
            *self.get_mut(o) += other.get(o);
        }
    }
}

impl std::fmt::Display for CrossCheckCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = CrossCheckOutcome::ALL
            .iter()
            .map(|&o| format!("{} {}", o.as_str(), self.get(o)))
            .collect();
        write!(f, "{}", parts.join(", "))
    }
}

/// The numbers of a set of episodes (a run, or one task of it). Serialized under these names in the
/// summary, the report's data and wherever else they are shown.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    /// Episodes (the newest record of each), errored ones included.
    pub episodes: u64,
    /// Episodes that ended in an infrastructure failure (`error`, `cancelled`): not samples.
    #[serde(default)]
    pub errored: u64,
    /// Episodes that count as samples: `episodes - errored`.
    pub sampled_episodes: u64,
    /// Sampled episodes that solved their task.
    pub solved: u64,
    /// `solved / sampled_episodes` (0 without samples).
    pub solved_rate: f64,
    /// `"pass@k"` -> HumanEval's pass@k, for the k every task has samples for (see the module doc).
    #[serde(default)]
    pub pass_at_k: BTreeMap<String, f64>,
    /// Mean `final_reward` (the last step's reward) over sampled episodes.
    #[serde(default)]
    pub mean_final_reward: f64,
    /// Mean `total_reward` (the sum of step rewards) over sampled episodes.
    #[serde(alias = "mean_reward")]
    pub mean_total_reward: f64,
    /// Cross-checks of rewarded programs by outcome, over the steps of sampled episodes (absent
    /// when there were none).
    #[serde(default, skip_serializing_if = "CrossCheckCounts::is_empty")]
    pub cross_checks: CrossCheckCounts,
    /// Tasks where a sampled episode's rewarded program disagreed with the reference.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disagreeing_tasks: Vec<String>,
}

/// One task's numbers, for per-task tables.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskAggregate {
    pub task_id: String,
    #[serde(flatten)]
    pub aggregate: Aggregate,
}

/// Sums of one set of episodes.
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    episodes: u64,
    sampled: u64,
    solved: u64,
    final_reward: f64,
    total_reward: f64,
    cross_checks: CrossCheckCounts,
}

impl Sums {
    fn add(&mut self, o: &Outcome<'_>) {
        self.episodes += 1;
        if o.sampled {
            self.sampled += 1;
            self.solved += u64::from(o.solved);
            self.final_reward += o.final_reward;
            self.total_reward += o.total_reward;
            self.cross_checks.add(&o.cross_checks);
        }
    }

    fn aggregate(&self) -> Aggregate {
        let per_sample = |x: f64| {
            if self.sampled == 0 {
                0.0
            } else {
                x / self.sampled as f64
            }
        };
        Aggregate {
            episodes: self.episodes,
            errored: self.episodes - self.sampled,
            sampled_episodes: self.sampled,
            solved: self.solved,
            solved_rate: per_sample(self.solved as f64),
            pass_at_k: BTreeMap::new(),
            mean_final_reward: per_sample(self.final_reward),
            mean_total_reward: per_sample(self.total_reward),
            cross_checks: self.cross_checks,
            disagreeing_tasks: Vec::new(),
        }
    }
}

/// Outcomes added one at a time (records need not stay in memory), aggregated at the end.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    all: Sums,
    tasks: BTreeMap<String, Sums>,
}

impl Tally {
    /// A tally of `outcomes`.
    pub fn of<'a>(outcomes: impl IntoIterator<Item = Outcome<'a>>) -> Self {
        let mut tally = Tally::default();
        for o in outcomes {
            tally.add(&o);
        }
        tally
    }

    /// A tally of the records (already the newest per episode).
    pub fn of_records(records: &[TrajectoryRecord]) -> Self {
        Tally::of(records.iter().map(Outcome::of))
    }

    pub fn add(&mut self, outcome: &Outcome<'_>) {
        self.all.add(outcome);
        match self.tasks.get_mut(outcome.task_id) {
            Some(sums) => sums.add(outcome),
            None => {
                let mut sums = Sums::default();
                sums.add(outcome);
                self.tasks.insert(outcome.task_id.to_string(), sums);
            }
        }
    }

    /// The aggregate, with pass@k for [`default_ks`].
    pub fn aggregate(&self) -> Aggregate {
        let most = self.tasks.values().map(|s| s.episodes).max().unwrap_or(0);
        self.aggregate_with_ks(&default_ks(most))
    }

    /// The aggregate, with pass@k for the given k (each still withheld unless every task has k
    /// samples).
    pub fn aggregate_with_ks(&self, ks: &[u64]) -> Aggregate {
        let mut aggregate = self.all.aggregate();
        aggregate.disagreeing_tasks = self
            .tasks
            .iter()
            .filter(|(_, s)| s.cross_checks.disagree > 0)
            .map(|(id, _)| id.clone())
            .collect();
        for &k in ks {
            let per_task = self.tasks.values().map(|s| (s.sampled, s.solved));
            if let Some(mean) = crate::mean_pass_at_k(per_task, k) {
                aggregate.pass_at_k.insert(format!("pass@{k}"), mean);
            }
        }
        aggregate
    }

    /// Each task's numbers (without pass@k), by task id.
    pub fn tasks(&self) -> Vec<TaskAggregate> {
        self.tasks
            .iter()
            .map(|(id, sums)| TaskAggregate {
                task_id: id.clone(),
                aggregate: sums.aggregate(),
            })
            .collect()
    }
}

/// The k values reported by default for tasks of up to `samples` episodes: 1, 2, 4, ... below
/// `samples`, and `samples` itself.
pub fn default_ks(samples: u64) -> Vec<u64> {
    let mut ks: Vec<u64> = std::iter::successors(Some(1u64), |k| k.checked_mul(2))
        .take_while(|&k| k < samples)
        .collect();
    if samples >= 1 {
        ks.push(samples);
    }
    ks
}

#[cfg(test)]
mod tests;
