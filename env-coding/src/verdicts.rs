//! Group-aware judging: one verdict for identical submissions.
//!
//! A GRPO group often holds identical completions, and trainers re-score the same programs across
//! batches. For a deterministic task, the verdict of a program is a function of (task, program,
//! scoring options), so `Evaluate` scores each distinct triple once: concurrent identical items wait
//! for the one run in flight (within a batch and across concurrent batches), and finished verdicts
//! stay in a bounded cache. What is shared is the whole step (observation, reward, info), marked
//! `info.cache_hit = true` for every item that did not run its own program.
//!
//! The key is a SHA-256 over the task's full in-memory description (`Debug`: every field, tests and
//! expected outputs included, so fields added later are covered without touching this file), the
//! program (source, files, language) and the scoring options. The cache lives in memory, so the `Debug` text only has to be
//! stable within one process; where it is not (hash-map order), the result is a miss, never a wrong
//! hit. Tasks that declare `"deterministic": false` are never cached; nor are machinery failures
//! (an error is never a verdict).

use std::sync::Arc;

use env_core::{EnvError, Step, Value};
use moka::future::Cache;
use sha2::{Digest, Sha256};

use crate::reward::run::{EvalOptions, Program};
use crate::tasks::Task;

/// A verdict's identity: SHA-256 of (task, program, scoring options).
pub(crate) type VerdictKey = [u8; 32];

/// The verdicts of one registration (shared by every `Evaluate` call of the server).
pub(crate) struct VerdictCache {
    /// `None` when disabled (`verdict_cache_mib = 0`): every item runs.
    cache: Option<Cache<VerdictKey, Arc<Step<Value>>>>,
}

impl VerdictCache {
    /// A cache holding about `mib` MiB of verdicts (0 disables sharing altogether).
    pub fn new(mib: u64) -> Self {
        let cache = (mib > 0).then(|| {
            Cache::builder()
                .max_capacity(mib.saturating_mul(1 << 20))
                .weigher(|_, step: &Arc<Step<Value>>| weight(step))
                .build()
        });
        VerdictCache { cache }
    }

    /// The key of scoring `program` (`None`: no code) for `task`, or `None` when the task opts out
    /// of sharing. The program's `Debug` covers its source, files, language and data.
    pub fn key(
        task: &Task,
        program: Option<&Program>,
        options: &EvalOptions,
    ) -> Option<VerdictKey> {
        if !task.deterministic {
            return None;
        }
        let mut h = Sha256::new();
        // Length-prefixed parts, so that no two different triples hash the same byte stream.
        for part in [
            format!("{task:?}"),
            format!("{program:?}"),
            format!("{options:?}"),
        ] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        Some(h.finalize().into())
    }

    /// The verdict for `key`: the cached one, the one in flight, or `score`'s (which is then
    /// shared). `key = None` or a disabled cache always scores.
    pub async fn get_or_score<F>(
        &self,
        key: Option<VerdictKey>,
        score: F,
    ) -> Result<Step<Value>, EnvError>
    where
        F: Future<Output = Result<Step<Value>, EnvError>>,
    {
        let (Some(cache), Some(key)) = (&self.cache, key) else {
            let mut step = score.await?;
            step.info
                .insert("cache_hit".into(), serde_json::Value::Bool(false));
            return Ok(step);
        };
        let entry = cache
            .entry(key)
            .or_try_insert_with(async { score.await.map(Arc::new) })
            .await
            .map_err(|e: Arc<EnvError>| (*e).clone())?;
        let fresh = entry.is_fresh();
        let mut step = Step::clone(entry.value());
        step.info
            .insert("cache_hit".into(), serde_json::Value::Bool(!fresh));
        Ok(step)
    }
}

/// Bytes a cached step holds, roughly: its output dominates.
fn weight(step: &Step<Value>) -> u32 {
    let output = match &step.obs {
        Value::Execution(r) => r.stdout.len() + r.stderr.len(),
        _ => 0,
    };
    u32::try_from(output + 1024).unwrap_or(u32::MAX)
}
