//! Group-relative advantages (GRPO, Dr. GRPO, RLOO, plain return) computed with ndarray from raw
//! episode rewards grouped by task/group.
//!
//! Why groups: every estimator here uses the other samples of the same prompt as the baseline, so a
//! group whose rewards are all equal carries no learning signal. Such groups are flagged (and dropped
//! on request), since many trainers waste a step on them otherwise.
//!
//! Only *scored* samples make a group: an infrastructure failure
//! ([`EpisodeStatus::InfraFailure`]) has no reward at all, so it is never in a group's mean, std or
//! leave-one-out baseline, whatever the estimator, and is never trained on. (A reward of 0 in its
//! place would teach the model that a quota error or a lost server was its fault.) A group with
//! fewer than two scored samples has no baseline: its samples get advantage 0 and `zero_variance`
//! (the raw reward under [`Estimator::Return`], which needs none).

use std::collections::HashMap;

use ndarray::Array1;
use serde::{Deserialize, Serialize};

/// Which advantage estimator to use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Estimator {
    /// `(r - mean_group) / (std_group + eps)`.
    #[default]
    Grpo,
    /// `r - mean_group` (Dr. GRPO: no std normalisation, which biases towards easy/hard prompts).
    DrGrpo,
    /// `r_i - mean(r_j for j != i)`: the leave-one-out baseline.
    Rloo,
    /// The raw reward, no baseline.
    Return,
}

/// Which standard deviation GRPO divides by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StdKind {
    /// Bessel-corrected (n - 1), what `torch.std` computes and so what TRL and verl use.
    #[default]
    Sample,
    /// Divides by n.
    Population,
}

/// What to do with a truncated episode (an outcome of the model, unlike an infrastructure failure,
/// which is never a reward: [`EpisodeStatus::InfraFailure`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskPolicy {
    /// Use it like any other episode.
    Keep,
    /// Leave it out of the group statistics and mask it out of training (advantage 0).
    Exclude,
    /// Keep it in training, but with its reward replaced by 0 (a penalty for running out of time).
    ZeroReward,
}

/// How an episode ended, as far as advantages care.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeStatus {
    /// Terminated by the environment (solved or not).
    #[default]
    Completed,
    /// Cut short: max turns, max tokens, context length or time limit.
    Truncated,
    /// The machinery failed (the model endpoint, the environment or its sandbox, a lost server, an
    /// interrupted run: `StopReason::is_infra_failure`): not a sample of the model, so it has no
    /// reward, takes no part in its group's statistics and is masked out of training.
    InfraFailure,
}

/// Advantage settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdvantageConfig {
    pub estimator: Estimator,
    /// Added to the std in GRPO so that near-constant groups do not explode.
    pub eps: f64,
    pub std: StdKind,
    /// Mask out every member of a group whose (used) rewards are all equal.
    pub drop_zero_variance: bool,
    pub truncated: MaskPolicy,
    /// The `errored` policy of earlier versions, refused when present with the reason and its
    /// replacement ([`ERRORED_REPLACED`]) rather than serde's bare "unknown field".
    #[doc(hidden)]
    #[serde(default, skip_serializing, deserialize_with = "refuse_errored")]
    pub errored: Removed,
}

/// Why the `errored` setting (`--errored keep|exclude|zero-reward`) is gone, and what replaces it.
pub const ERRORED_REPLACED: &str = "`errored` was replaced by `on_infra_error` (`mask` or `drop`; \
     `--on-infra-error` on the command line): an infrastructure failure is never a reward, neither \
     kept as one nor zeroed; `errored: exclude` is `on_infra_error: drop`";

/// A removed setting's place in a config struct (only its absence deserializes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Removed;

fn refuse_errored<'de, D: serde::Deserializer<'de>>(_: D) -> Result<Removed, D::Error> {
    Err(serde::de::Error::custom(ERRORED_REPLACED))
}

impl Default for AdvantageConfig {
    fn default() -> Self {
        Self {
            estimator: Estimator::Grpo,
            eps: 1e-6,
            std: StdKind::Sample,
            drop_zero_variance: false,
            truncated: MaskPolicy::Keep,
            errored: Removed,
        }
    }
}

/// One episode's input to [`compute`].
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    /// Episodes with the same group share a baseline (same task, sampled together).
    pub group: &'a str,
    pub reward: f64,
    pub status: EpisodeStatus,
}

/// The result, aligned with the input samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Advantages {
    /// 0 where `mask` is false (meaningless there: see `mask`).
    pub advantage: Array1<f64>,
    /// `true`: train on this sample. `false`: an infrastructure failure, excluded by the truncated
    /// policy, or in a dropped group.
    pub mask: Array1<bool>,
    /// The sample's group had fewer than two scored samples or all scored rewards equal.
    pub zero_variance: Array1<bool>,
    /// The reward after the truncated policy (0 for `ZeroReward`), what the advantage was computed
    /// from; 0 where the sample was not scored.
    pub reward: Array1<f64>,
}

impl Advantages {
    /// Number of samples masked in.
    pub fn kept(&self) -> usize {
        self.mask.iter().filter(|m| **m).count()
    }
}

/// Why advantages could not be computed.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AdvantageError {
    #[error("sample {index} (group {group:?}) has a non-finite reward {reward}")]
    NonFiniteReward {
        index: usize,
        group: String,
        reward: f64,
    },
    #[error("invalid advantage config: eps must be finite and >= 0, got {0}")]
    InvalidEps(f64),
}

/// Computes advantages for `samples`, grouping by [`Sample::group`].
pub fn compute(
    samples: &[Sample<'_>],
    config: &AdvantageConfig,
) -> Result<Advantages, AdvantageError> {
    if !config.eps.is_finite() || config.eps < 0.0 {
        return Err(AdvantageError::InvalidEps(config.eps));
    }
    let n = samples.len();
    let mut reward = Array1::<f64>::zeros(n);
    let mut used = vec![false; n];
    // Group members in first-seen order, so results do not depend on hash order.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_index: HashMap<&str, usize> = HashMap::new();
    for (i, s) in samples.iter().enumerate() {
        let policy = match s.status {
            EpisodeStatus::Completed => MaskPolicy::Keep,
            EpisodeStatus::Truncated => config.truncated,
            // Never a sample: whatever reward the record holds is not the model's.
            EpisodeStatus::InfraFailure => MaskPolicy::Exclude,
        };
        let r = match policy {
            MaskPolicy::Keep => s.reward,
            MaskPolicy::ZeroReward => 0.0,
            MaskPolicy::Exclude => continue,
        };
        if !r.is_finite() {
            return Err(AdvantageError::NonFiniteReward {
                index: i,
                group: s.group.to_string(),
                reward: r,
            });
        }
        reward[i] = r;
        used[i] = true;
        let g = *group_index.entry(s.group).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(i);
    }

    let mut advantage = Array1::<f64>::zeros(n);
    let mut mask = Array1::from_vec(used);
    let mut zero_variance = Array1::from_elem(n, false);
    for members in &groups {
        let r: Array1<f64> = members.iter().map(|&i| reward[i]).collect();
        let flat = r.len() < 2 || r.iter().all(|&x| x == r[0]);
        // A flat group has no baseline signal; computing it anyway would give 0/0 when eps is 0.
        let adv = if flat && config.estimator != Estimator::Return {
            Array1::zeros(r.len())
        } else {
            group_advantages(&r, config)
        };
        for (k, &i) in members.iter().enumerate() {
            advantage[i] = adv[k];
            zero_variance[i] = flat;
            if flat && config.drop_zero_variance {
                mask[i] = false;
                advantage[i] = 0.0;
            }
        }
    }
    tracing::debug!(samples = n, groups = groups.len(), "computed advantages");
    Ok(Advantages {
        advantage,
        mask,
        zero_variance,
        reward,
    })
}

/// Advantages of one group's rewards (non-empty).
fn group_advantages(r: &Array1<f64>, config: &AdvantageConfig) -> Array1<f64> {
    let n = r.len() as f64;
    let mean = r.mean().unwrap_or(0.0);
    match config.estimator {
        Estimator::Return => r.clone(),
        Estimator::DrGrpo => r - mean,
        Estimator::Grpo => {
            let ddof = match config.std {
                StdKind::Sample if r.len() > 1 => 1.0,
                _ => 0.0,
            };
            let std = r.std(ddof);
            (r - mean) / (std + config.eps)
        }
        Estimator::Rloo => {
            if r.len() < 2 {
                return Array1::zeros(r.len());
            }
            let sum = r.sum();
            // r_i - (sum - r_i) / (n - 1)
            r.mapv(|x| x - (sum - x) / (n - 1.0))
        }
    }
}

#[cfg(test)]
mod tests;
