//! The run summary: episodes, solved rate, pass@k and mean rewards (the one aggregation,
//! [`trajectory::aggregate`], so `codegym report` shows the same numbers for the same file), tokens,
//! throughput and failures by kind. Printed at the end of a run and written as `FILE.summary.json`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use trajectory::aggregate::{Aggregate, CrossCheckCounts, Outcome, Tally};

use crate::dataset::record::{EpisodeKey, StopReason, TrajectoryRecord, Usage};

/// Version of the summary file's layout.
///
/// - 1: the first layout; `mean_reward` was the mean `total_reward` over sampled episodes.
/// - 2: the counts and means are [`Aggregate`]'s: `mean_reward` became `mean_total_reward` (a
///   version-1 file's `mean_reward` reads as it), `mean_final_reward` and `errored` are new (0 when
///   reading a version-1 file), and pass@k's k values are 1, 2, 4, ... and the largest number of
///   episodes of a task (version 1 used the configured samples).
pub const SUMMARY_FORMAT_VERSION: u32 = 2;

/// What the summary needs of one episode (records themselves are not kept in memory).
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeStats {
    pub solved: bool,
    pub stop_reason: StopReason,
    pub final_reward: f64,
    pub total_reward: f64,
    pub usage: Usage,
    pub error_kind: Option<&'static str>,
    /// Kinds of retried failures, one entry per retry.
    pub retry_kinds: Vec<&'static str>,
    /// Times the episode restarted after losing its env server.
    pub env_restarts: u64,
    /// Its cross-checks by outcome.
    pub cross_checks: CrossCheckCounts,
}

impl EpisodeStats {
    pub fn of(record: &TrajectoryRecord) -> Self {
        EpisodeStats {
            solved: record.solved,
            stop_reason: record.stop_reason,
            final_reward: record.final_reward,
            total_reward: record.total_reward,
            usage: record.usage,
            error_kind: record.error.as_ref().map(|e| e.kind.as_str()),
            retry_kinds: record
                .turns
                .iter()
                .flat_map(|t| t.model_call.retries.iter().map(|r| r.kind.as_str()))
                .collect(),
            env_restarts: record.restarts.len() as u64,
            cross_checks: CrossCheckCounts::of(record),
        }
    }

    /// Whether the episode counts as a sample of the model (not an infrastructure failure).
    pub fn is_sample(&self) -> bool {
        !self.stop_reason.is_infra_failure()
    }

    /// What the aggregation needs of this episode of `task_id`.
    fn outcome<'a>(&self, task_id: &'a str) -> Outcome<'a> {
        Outcome {
            task_id,
            sampled: self.is_sample(),
            solved: self.solved,
            final_reward: self.final_reward,
            total_reward: self.total_reward,
            cross_checks: self.cross_checks,
        }
    }
}

/// The final summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub format_version: u32,
    pub run_id: String,
    /// `tasks x samples`.
    pub expected_episodes: u64,
    /// Episodes, errored, sampled and solved ones, solved rate, pass@k and the mean rewards, by the
    /// one aggregation's rules (errored and cancelled episodes are no samples).
    #[serde(flatten)]
    pub aggregate: Aggregate,
    pub tokens: Usage,
    /// Episodes finished by this invocation (a resumed run counts only its own).
    pub episodes_this_run: u64,
    pub elapsed_secs: f64,
    /// `episodes_this_run / elapsed_secs`.
    pub episodes_per_sec: f64,
    pub stop_reasons: BTreeMap<String, u64>,
    /// Episode-ending failures by kind.
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Retried (recovered or not) request failures by kind.
    pub retries_by_kind: BTreeMap<String, u64>,
    /// Whether the run was interrupted.
    pub interrupted: bool,
    /// Episode restarts after a lost env server (each episode still counted once).
    #[serde(default)]
    pub env_restarts: u64,
}

/// Builds the summary from the newest stats of every episode.
pub fn summarize(
    run_id: &str,
    episodes: &BTreeMap<EpisodeKey, EpisodeStats>,
    expected: u64,
    episodes_this_run: u64,
    elapsed_secs: f64,
    interrupted: bool,
) -> Summary {
    let mut s = Summary {
        format_version: SUMMARY_FORMAT_VERSION,
        run_id: run_id.to_string(),
        expected_episodes: expected,
        aggregate: Tally::of(episodes.iter().map(|(k, e)| e.outcome(&k.task_id))).aggregate(),
        tokens: Usage::default(),
        episodes_this_run,
        elapsed_secs,
        episodes_per_sec: if elapsed_secs > 0.0 {
            episodes_this_run as f64 / elapsed_secs
        } else {
            0.0
        },
        stop_reasons: BTreeMap::new(),
        errors_by_kind: BTreeMap::new(),
        retries_by_kind: BTreeMap::new(),
        interrupted,
        env_restarts: 0,
    };
    for e in episodes.values() {
        s.tokens.add(&e.usage);
        s.env_restarts += e.env_restarts;
        *s.stop_reasons
            .entry(e.stop_reason.as_str().to_string())
            .or_default() += 1;
        if let Some(kind) = e.error_kind {
            *s.errors_by_kind.entry(kind.to_string()).or_default() += 1;
        }
        for kind in &e.retry_kinds {
            *s.retries_by_kind.entry((*kind).to_string()).or_default() += 1;
        }
    }
    s
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let a = &self.aggregate;
        writeln!(
            f,
            "episodes: {} of {} ({} this run{})",
            a.episodes,
            self.expected_episodes,
            self.episodes_this_run,
            if self.interrupted {
                ", interrupted"
            } else {
                ""
            }
        )?;
        writeln!(
            f,
            "solved: {} of {} sampled ({:.1}%; {} errored, not samples)",
            a.solved,
            a.sampled_episodes,
            a.solved_rate * 100.0,
            a.errored
        )?;
        let mut pass_at_k: Vec<_> = a.pass_at_k.iter().collect();
        pass_at_k.sort_by_key(|(k, _)| k.trim_start_matches("pass@").parse::<u64>().ok());
        for (k, v) in pass_at_k {
            writeln!(f, "{k}: {v:.4}")?;
        }
        writeln!(
            f,
            "mean final reward: {:.4}, mean total reward: {:.4} (over sampled episodes)",
            a.mean_final_reward, a.mean_total_reward
        )?;
        if !a.cross_checks.is_empty() {
            writeln!(f, "cross-checks: {}", a.cross_checks)?;
        }
        if !a.disagreeing_tasks.is_empty() {
            writeln!(
                f,
                "disagreeing with the reference: {}",
                a.disagreeing_tasks.join(", ")
            )?;
        }
        if self.env_restarts > 0 {
            writeln!(
                f,
                "env restarts: {} (episodes replayed after losing their env server)",
                self.env_restarts
            )?;
        }
        writeln!(
            f,
            "tokens: {} prompt + {} completion = {}",
            self.tokens.prompt_tokens, self.tokens.completion_tokens, self.tokens.total_tokens
        )?;
        writeln!(
            f,
            "throughput: {:.2} episodes/s over {:.1} s",
            self.episodes_per_sec, self.elapsed_secs
        )?;
        let join = |m: &BTreeMap<String, u64>| {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        writeln!(f, "stop reasons: {}", join(&self.stop_reasons))?;
        if !self.errors_by_kind.is_empty() {
            writeln!(f, "errors: {}", join(&self.errors_by_kind))?;
        }
        if !self.retries_by_kind.is_empty() {
            writeln!(f, "retries: {}", join(&self.retries_by_kind))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(solved: bool, stop_reason: StopReason) -> EpisodeStats {
        EpisodeStats {
            solved,
            stop_reason,
            final_reward: f64::from(u8::from(solved)),
            total_reward: f64::from(u8::from(solved)),
            usage: Usage::default(),
            error_kind: None,
            retry_kinds: Vec::new(),
            env_restarts: 0,
            cross_checks: CrossCheckCounts::default(),
        }
    }

    fn key(task: &str, sample_index: u32) -> EpisodeKey {
        EpisodeKey {
            task_id: task.into(),
            sample_index,
        }
    }

    #[test]
    fn pass_at_k_is_over_every_task_with_k_samples() {
        let mut episodes = BTreeMap::new();
        for i in 0..4 {
            episodes.insert(key("a", i), stats(i < 2, StopReason::MaxTurns));
            episodes.insert(key("b", i), stats(false, StopReason::MaxTurns));
        }
        let s = summarize("run", &episodes, 8, 8, 1.0, false);
        assert_eq!(
            s.aggregate.pass_at_k.keys().collect::<Vec<_>>(),
            ["pass@1", "pass@2", "pass@4"]
        );
        assert!((s.aggregate.pass_at_k["pass@1"] - 0.25).abs() < 1e-12);
        assert!((s.aggregate.pass_at_k["pass@4"] - 0.5).abs() < 1e-12);

        // Task b's last sample errored: 3 samples, so pass@4 is withheld for the whole set.
        episodes.insert(key("b", 3), stats(false, StopReason::Error));
        let s = summarize("run", &episodes, 8, 8, 1.0, false);
        assert!(s.aggregate.pass_at_k.contains_key("pass@2"));
        assert!(!s.aggregate.pass_at_k.contains_key("pass@4"));
    }

    #[test]
    fn a_task_without_samples_withholds_pass_at_k() {
        let mut episodes = BTreeMap::new();
        episodes.insert(key("a", 0), stats(true, StopReason::Solved));
        episodes.insert(key("b", 0), stats(false, StopReason::Error));
        let s = summarize("run", &episodes, 2, 2, 1.0, false);
        assert!(
            s.aggregate.pass_at_k.is_empty(),
            "{:?}",
            s.aggregate.pass_at_k
        );
        assert_eq!(s.aggregate.solved_rate, 1.0);
        assert!(!s.to_string().contains("pass@"));
    }
}
