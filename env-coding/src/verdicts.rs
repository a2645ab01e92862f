//! Group-aware judging: one verdict for identical submissions.
//!
//! A GRPO group often holds identical completions, and trainers re-score the same programs across
//! batches. For a deterministic task, the verdict of a program is a function of (task, submission,
//! scoring options), so the scoring engine (`scoring.rs`) scores each distinct triple once:
//! concurrent identical submissions wait for the one run in flight (within a batch, across
//! concurrent batches and across surfaces), and finished verdicts stay in a bounded cache. What is
//! shared is the whole verdict (observation and reward outcome); the engine tells each caller
//! whether its verdict was shared (`cache_hit`, which the env reports in `info.cache_hit`).
//!
//! The key is a SHA-256 over the task's fingerprint (`Task::fingerprint`: its full in-memory
//! description, tests and expected outputs included, so fields added later are covered without
//! touching this file; data files by a digest of their bytes), the submission (its kind, and the
//! program's source, files, language, data and reported vars) and the scoring options. The cache lives in memory, so the `Debug` text only has to be stable within
//! one process; where it is not (hash-map order), the result is a miss, never a wrong hit. Tasks
//! that declare `"deterministic": false` are never cached, nor are programs with host tools (their
//! answers come from the caller, outside the key); nor are machinery failures (an error is never a
//! verdict), nor verdicts with a timeout that may be the machine's load rather than the program's
//! (`timeouts.rs`: a wall-clock timeout under the CPU limit that a re-run did not settle).

use std::sync::Arc;

use env_core::{EnvError, ExecutionResult};
use moka::future::Cache;
use sha2::{Digest, Sha256};

use crate::reward::RewardOutcome;
use crate::reward::run::EvalOptions;
use crate::tasks::Task;
use trajectory::record::Provenance;

/// A verdict's identity: SHA-256 of (task, submission, scoring options).
pub(crate) type VerdictKey = [u8; 32];

/// What a scoring produced: the observation and the reward outcome.
#[derive(Debug, Clone)]
pub(crate) struct Verdict {
    pub execution: ExecutionResult,
    pub outcome: RewardOutcome,
    /// What produced it (a shared verdict keeps its run's).
    pub provenance: Provenance,
}

/// The verdicts of one scoring engine (shared by every surface that scores through it).
pub(crate) struct VerdictCache {
    /// `None` when disabled (`verdict_cache_mib = 0`): every submission runs.
    cache: Option<Cache<VerdictKey, Arc<Verdict>>>,
}

impl VerdictCache {
    /// A cache holding about `mib` MiB of verdicts (0 disables sharing altogether).
    pub fn new(mib: u64) -> Self {
        let cache = (mib > 0).then(|| {
            Cache::builder()
                .max_capacity(mib.saturating_mul(1 << 20))
                .weigher(|_, v: &Arc<Verdict>| weight(v))
                .build()
        });
        VerdictCache { cache }
    }

    /// Whether verdicts are shared at all (a disabled cache needs no keys).
    pub fn enabled(&self) -> bool {
        self.cache.is_some()
    }

    /// The key of scoring `submission` (its `Debug` text: kind, program, files, language, data,
    /// reported vars) for `task` (whose [`Task::fingerprint`] is `fingerprint`), or `None` when the
    /// task opts out of sharing. Host tools are the scorer's to rule out (they make any submission
    /// unshareable).
    pub fn key(
        task: &Task,
        fingerprint: &[u8; 32],
        submission: &impl std::fmt::Debug,
        options: &EvalOptions,
    ) -> Option<VerdictKey> {
        if !task.deterministic {
            return None;
        }
        let mut h = Sha256::new();
        h.update(fingerprint);
        // Length-prefixed parts, so that no two different pairs hash the same byte stream.
        for part in [format!("{submission:?}"), format!("{options:?}")] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        Some(h.finalize().into())
    }

    /// The verdict for `key` and whether it was shared: the cached one, the one in flight, or
    /// `score`'s (which is then shared). `key = None` or a disabled cache always scores.
    pub async fn get_or_score<F>(
        &self,
        key: Option<VerdictKey>,
        score: F,
    ) -> Result<(Arc<Verdict>, bool), EnvError>
    where
        F: Future<Output = Result<Verdict, EnvError>>,
    {
        let (Some(cache), Some(key)) = (&self.cache, key) else {
            return Ok((Arc::new(score.await?), false));
        };
        let entry = cache
            .entry(key)
            .or_try_insert_with(async { score.await.map(Arc::new) })
            .await
            .map_err(|e: Arc<EnvError>| (*e).clone())?;
        let fresh = entry.is_fresh();
        let verdict = entry.into_value();
        if fresh && verdict.outcome.has_unproven_timeout() {
            // Load is not a property of the submission: callers already waiting on this run
            // share it (same moment, same load), later ones score their own (`timeouts.rs`).
            cache.invalidate(&key).await;
        }
        Ok((verdict, !fresh))
    }
}

/// Bytes a cached verdict holds, roughly: its output dominates.
fn weight(v: &Verdict) -> u32 {
    let output = v.execution.stdout.len() + v.execution.stderr.len();
    u32::try_from(output + 1024).unwrap_or(u32::MAX)
}
