//! The report's numbers, computed once from the records: what the page shows besides the
//! trajectories themselves. The counts, solved rates, pass@k and mean rewards are the one
//! aggregation's ([`trajectory::aggregate`]), under the same names as in the rollout's
//! `summary.json`; the page's script only displays them.

use std::collections::BTreeMap;

use serde::Serialize;
use trajectory::TrajectoryRecord;
use trajectory::aggregate::{Aggregate, Outcome, Tally, TaskAggregate};

/// Everything the page draws, serialized into it as JSON.
#[derive(Debug, Clone, Serialize)]
pub struct ReportData {
    pub title: String,
    pub generator: String,
    /// Episodes, errored, sampled and solved ones, solved rate, pass@k and mean rewards.
    #[serde(flatten)]
    pub aggregate: Aggregate,
    pub models: Vec<String>,
    /// The same numbers per task (without pass@k), by task id.
    pub tasks: Vec<TaskAggregate>,
    pub final_reward: Histogram,
    pub stop_reasons: Vec<(String, u64)>,
    /// Model turns per episode: `(turns, episodes)`.
    pub turns: Vec<(u64, u64)>,
    pub episode_seconds: Histogram,
    pub model_call_seconds: Histogram,
    pub completion_tokens: Histogram,
    pub prompt_tokens_total: u64,
    pub completion_tokens_total: u64,
    /// Errors by kind: episode errors, and failed model-call attempts that were retried.
    pub errors: Vec<(String, u64)>,
    /// The records, without token ids and logprobs (they are not shown and can be large).
    pub records: Vec<TrajectoryRecord>,
    /// Each record's seed as text: JavaScript numbers lose the digits of a u64 above 2^53.
    pub seeds: Vec<String>,
    /// Whether each record is a sample (not an infrastructure failure), by the aggregation's rule:
    /// the page's "errored" filter shows the episodes the `errored` count counts.
    pub sampled: Vec<bool>,
}

/// Counts in equal-width bins over `[min, max]` (one bin when every value is the same).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Histogram {
    /// `counts.len() + 1` bin edges.
    pub edges: Vec<f64>,
    pub counts: Vec<u64>,
}

impl Histogram {
    /// At most `bins` bins over the values.
    pub fn of(values: &[f64], bins: usize) -> Histogram {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let (Some(min), Some(max)) = (
            finite.iter().copied().reduce(f64::min),
            finite.iter().copied().reduce(f64::max),
        ) else {
            return Histogram::default();
        };
        let bins = if max > min { bins.max(1) } else { 1 };
        let width = if max > min {
            (max - min) / bins as f64
        } else {
            1.0
        };
        let mut counts = vec![0u64; bins];
        for v in finite {
            let i = (((v - min) / width) as usize).min(bins - 1);
            counts[i] += 1;
        }
        let edges = (0..=bins).map(|i| min + width * i as f64).collect();
        Histogram { edges, counts }
    }
}

/// Computes the report of `records` (already deduplicated by episode).
pub fn build(title: &str, records: &[TrajectoryRecord]) -> ReportData {
    let tally = Tally::of_records(records);
    let count = |keys: &mut dyn Iterator<Item = String>| {
        let mut m: BTreeMap<String, u64> = BTreeMap::new();
        for k in keys {
            *m.entry(k).or_default() += 1;
        }
        let mut v: Vec<(String, u64)> = m.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    };
    let stop_reasons = count(&mut records.iter().map(|r| r.stop_reason.as_str().to_string()));
    let errors = count(&mut records.iter().flat_map(|r| {
        let retried = r
            .turns
            .iter()
            .flat_map(|t| t.model_call.retries.iter())
            .map(|a| format!("retried: {}", a.kind.as_str()));
        let ended = r.error.iter().map(|e| e.kind.as_str().to_string());
        retried.chain(ended).collect::<Vec<_>>()
    }));
    let mut turns: BTreeMap<u64, u64> = BTreeMap::new();
    for r in records {
        *turns.entry(r.turns.len() as u64).or_default() += 1;
    }
    let mut models: Vec<String> = records.iter().map(|r| r.model.requested.clone()).collect();
    models.sort();
    models.dedup();
    let episode_secs: Vec<f64> = records
        .iter()
        .map(|r| r.timings.wall_ms as f64 / 1e3)
        .collect();
    let call_secs: Vec<f64> = records
        .iter()
        .flat_map(|r| r.turns.iter().map(|t| t.model_call.latency_ms as f64 / 1e3))
        .collect();
    let completion: Vec<f64> = records
        .iter()
        .map(|r| r.usage.completion_tokens as f64)
        .collect();
    let rewards: Vec<f64> = records.iter().map(|r| r.final_reward).collect();
    let mut shown = records.to_vec();
    for r in &mut shown {
        for t in &mut r.turns {
            t.model_call.tokens = None;
        }
    }
    ReportData {
        title: title.to_string(),
        generator: format!("codegym {}", env!("CARGO_PKG_VERSION")),
        aggregate: tally.aggregate(),
        models,
        tasks: tally.tasks(),
        final_reward: Histogram::of(&rewards, 10),
        stop_reasons,
        turns: turns.into_iter().collect(),
        episode_seconds: Histogram::of(&episode_secs, 12),
        model_call_seconds: Histogram::of(&call_secs, 12),
        completion_tokens: Histogram::of(&completion, 12),
        prompt_tokens_total: records.iter().map(|r| r.usage.prompt_tokens).sum(),
        completion_tokens_total: records.iter().map(|r| r.usage.completion_tokens).sum(),
        errors,
        seeds: records.iter().map(|r| r.seed.to_string()).collect(),
        sampled: records.iter().map(|r| Outcome::of(r).sampled).collect(),
        records: shown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_bins_cover_min_and_max_and_a_constant_is_one_bin() {
        let h = Histogram::of(&[0.0, 0.5, 1.0, 1.0, f64::NAN], 4);
        assert_eq!(h.counts, vec![1, 0, 1, 2]);
        assert_eq!(h.edges.len(), 5);
        let c = Histogram::of(&[2.0, 2.0], 10);
        assert_eq!(c.counts, vec![2]);
        assert!(Histogram::of(&[], 3).counts.is_empty());
    }
}
