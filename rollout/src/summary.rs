//! The run summary: episodes, solve rate, pass@k ([`trajectory::mean_pass_at_k`]: HumanEval's
//! estimator and rule), rewards, tokens, throughput and failures by kind. Printed at the end of a run and written as
//! `FILE.summary.json`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::dataset::record::{EpisodeKey, StopReason, TrajectoryRecord, Usage};

/// Version of the summary file's layout.
pub const SUMMARY_FORMAT_VERSION: u32 = 1;

/// What the summary needs of one episode (records themselves are not kept in memory).
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeStats {
    pub solved: bool,
    pub stop_reason: StopReason,
    pub total_reward: f64,
    pub usage: Usage,
    pub error_kind: Option<&'static str>,
    /// Kinds of retried failures, one entry per retry.
    pub retry_kinds: Vec<&'static str>,
    /// Times the episode restarted after losing its env server.
    pub env_restarts: u64,
}

impl EpisodeStats {
    pub fn of(record: &TrajectoryRecord) -> Self {
        EpisodeStats {
            solved: record.solved,
            stop_reason: record.stop_reason,
            total_reward: record.total_reward,
            usage: record.usage,
            error_kind: record.error.as_ref().map(|e| e.kind.as_str()),
            retry_kinds: record
                .turns
                .iter()
                .flat_map(|t| t.model_call.retries.iter().map(|r| r.kind.as_str()))
                .collect(),
            env_restarts: record.restarts.len() as u64,
        }
    }

    /// Whether the episode counts as a sample of the model (not an infrastructure failure).
    pub fn is_sample(&self) -> bool {
        !matches!(self.stop_reason, StopReason::Error | StopReason::Cancelled)
    }
}

/// The final summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub format_version: u32,
    pub run_id: String,
    /// Episodes in the dataset (newest record per episode), errored ones included.
    pub episodes: u64,
    /// `tasks x samples`.
    pub expected_episodes: u64,
    /// Episodes that count as samples: not `error` and not `cancelled`.
    pub sampled_episodes: u64,
    pub solved: u64,
    /// `solved / sampled_episodes`.
    pub solved_rate: f64,
    /// `"pass@k"` -> mean over the tasks of `1 - C(n-c, k) / C(n, k)`, for k = 1, 2, 4, ...,
    /// samples. A k is absent unless every task in the dataset has at least k sampled episodes
    /// (errored and cancelled ones are not samples), as in HumanEval's harness.
    pub pass_at_k: BTreeMap<String, f64>,
    /// Mean `total_reward` over sampled episodes.
    pub mean_reward: f64,
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
    samples: u32,
    episodes_this_run: u64,
    elapsed_secs: f64,
    interrupted: bool,
) -> Summary {
    let mut s = Summary {
        format_version: SUMMARY_FORMAT_VERSION,
        run_id: run_id.to_string(),
        episodes: episodes.len() as u64,
        expected_episodes: expected,
        sampled_episodes: 0,
        solved: 0,
        solved_rate: 0.0,
        pass_at_k: BTreeMap::new(),
        mean_reward: 0.0,
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
    let mut per_task: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut reward_sum = 0.0;
    for (key, e) in episodes {
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
        // Every task with a record counts, so a task whose episodes all errored has 0 samples
        // and withholds pass@k rather than silently leaving the set.
        let t = per_task.entry(&key.task_id).or_default();
        if e.is_sample() {
            s.sampled_episodes += 1;
            s.solved += u64::from(e.solved);
            reward_sum += e.total_reward;
            t.0 += 1;
            t.1 += u64::from(e.solved);
        }
    }
    if s.sampled_episodes > 0 {
        s.solved_rate = s.solved as f64 / s.sampled_episodes as f64;
        s.mean_reward = reward_sum / s.sampled_episodes as f64;
    }
    let mut ks = vec![1u64];
    let mut k = 2;
    while k < u64::from(samples) {
        ks.push(k);
        k *= 2;
    }
    if samples > 1 {
        ks.push(u64::from(samples));
    }
    for k in ks {
        if let Some(mean) = trajectory::mean_pass_at_k(per_task.values().copied(), k) {
            s.pass_at_k.insert(format!("pass@{k}"), mean);
        }
    }
    s
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "episodes: {} of {} ({} this run{})",
            self.episodes,
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
            "solved: {} of {} sampled ({:.1}%)",
            self.solved,
            self.sampled_episodes,
            self.solved_rate * 100.0
        )?;
        for (k, v) in &self.pass_at_k {
            writeln!(f, "{k}: {v:.4}")?;
        }
        writeln!(f, "mean reward: {:.4}", self.mean_reward)?;
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
            total_reward: f64::from(u8::from(solved)),
            usage: Usage::default(),
            error_kind: None,
            retry_kinds: Vec::new(),
            env_restarts: 0,
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
        let s = summarize("run", &episodes, 8, 4, 8, 1.0, false);
        assert_eq!(
            s.pass_at_k.keys().collect::<Vec<_>>(),
            ["pass@1", "pass@2", "pass@4"]
        );
        assert!((s.pass_at_k["pass@1"] - 0.25).abs() < 1e-12);
        assert!((s.pass_at_k["pass@4"] - 0.5).abs() < 1e-12);

        // Task b's last sample errored: 3 samples, so pass@4 is withheld for the whole set.
        episodes.insert(key("b", 3), stats(false, StopReason::Error));
        let s = summarize("run", &episodes, 8, 4, 8, 1.0, false);
        assert!(s.pass_at_k.contains_key("pass@2"));
        assert!(!s.pass_at_k.contains_key("pass@4"));
    }

    #[test]
    fn a_task_without_samples_withholds_pass_at_k() {
        let mut episodes = BTreeMap::new();
        episodes.insert(key("a", 0), stats(true, StopReason::Solved));
        episodes.insert(key("b", 0), stats(false, StopReason::Error));
        let s = summarize("run", &episodes, 2, 1, 2, 1.0, false);
        assert!(s.pass_at_k.is_empty(), "{:?}", s.pass_at_k);
        assert_eq!(s.solved_rate, 1.0);
        assert!(!s.to_string().contains("pass@"));
    }
}
