//! The compiled-artifact cache: one compile per (language, toolchain, flags, source), however many
//! runs need it (a GRPO group's identical completions, the many tests of one submission).
//!
//! Keyed by the whole key, not a digest of it, so two sources can never share an entry; the map's
//! hash only finds the bucket. Concurrent requests for one key wait for a single compile
//! (`OnceCell`); a compile that fails as machinery (a sandbox error) leaves the entry empty so the
//! next caller retries, while a compile *error* of the program is an outcome and is cached like a
//! success. Entries are bounded by total artifact bytes, the least recently used evicted first;
//! runs receive copies of the bytes (written into their own work dir), so nothing a run does can
//! change the cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use env_core::ExecutionResult;
use tokio::sync::OnceCell;

use super::Language;

/// What identifies one compile.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub language: Language,
    /// [`super::toolchain::Toolchain::id`].
    pub toolchain: String,
    /// The compile argv and environment, flags included.
    pub flags: String,
    pub source: String,
}

/// One compile's outcome: its own result, and on success the artifacts (relative paths under the
/// artifact dir, bytes).
#[derive(Debug, Clone)]
pub struct Compiled {
    pub result: ExecutionResult,
    pub ok: bool,
    pub artifacts: Vec<(String, Vec<u8>)>,
}

impl Compiled {
    fn bytes(&self) -> u64 {
        let a: usize = self.artifacts.iter().map(|(p, b)| p.len() + b.len()).sum();
        (a + self.result.stdout.len() + self.result.stderr.len()) as u64
    }
}

struct Slot {
    cell: Arc<OnceCell<Arc<Compiled>>>,
    /// Logical clock of the last use (for LRU eviction).
    used: u64,
    /// Bytes accounted once the compile finished.
    bytes: u64,
}

#[derive(Default)]
struct State {
    slots: HashMap<Arc<CacheKey>, Slot>,
    clock: u64,
    bytes: u64,
    hits: u64,
    misses: u64,
}

/// A bounded, concurrency-safe artifact cache.
pub struct ArtifactCache {
    max_bytes: u64,
    state: Mutex<State>,
}

/// Counters for tests, benchmarks and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    pub entries: usize,
    pub bytes: u64,
    /// Lookups answered by a finished or in-flight compile.
    pub hits: u64,
    /// Lookups that started a compile.
    pub misses: u64,
}

impl ArtifactCache {
    /// A cache holding at most `max_bytes` of artifacts (one entry larger than that is still
    /// returned to its callers, just not kept).
    pub fn new(max_bytes: u64) -> Self {
        ArtifactCache {
            max_bytes,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the map inconsistent (plain inserts).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The compile of `key`, running `compile` only if no finished or in-flight compile has it.
    pub async fn get_or_compile<F, Fut, E>(
        &self,
        key: CacheKey,
        compile: F,
    ) -> Result<Arc<Compiled>, E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Compiled, E>>,
    {
        let key = Arc::new(key);
        let cell = {
            let mut st = self.lock();
            st.clock += 1;
            let now = st.clock;
            match st.slots.get_mut(&key) {
                Some(slot) => {
                    slot.used = now;
                    slot.cell.clone()
                }
                None => {
                    let cell = Arc::new(OnceCell::new());
                    st.slots.insert(
                        key.clone(),
                        Slot {
                            cell: cell.clone(),
                            used: now,
                            bytes: 0,
                        },
                    );
                    cell
                }
            }
        };
        let mut ran = false;
        let compiled = cell
            .get_or_try_init(|| {
                ran = true;
                async { compile().await.map(Arc::new) }
            })
            .await?
            .clone();
        let mut st = self.lock();
        if ran {
            st.misses += 1;
            let size = compiled.bytes();
            if let Some(slot) = st.slots.get_mut(&key)
                && Arc::ptr_eq(&slot.cell, &cell)
            {
                slot.bytes = size;
                st.bytes += size;
            }
            self.evict(&mut st);
        } else {
            // A finished compile, or another caller's in-flight one we waited for.
            st.hits += 1;
        }
        Ok(compiled)
    }

    /// Drops least recently used finished entries until the budget holds.
    fn evict(&self, st: &mut State) {
        while st.bytes > self.max_bytes {
            let victim = st
                .slots
                .iter()
                .filter(|(_, s)| s.cell.initialized() && s.bytes > 0)
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone());
            let Some(k) = victim else { break };
            if let Some(s) = st.slots.remove(&k) {
                st.bytes -= s.bytes;
            }
        }
    }

    pub fn stats(&self) -> CacheStats {
        let st = self.lock();
        CacheStats {
            entries: st.slots.len(),
            bytes: st.bytes,
            hits: st.hits,
            misses: st.misses,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn key(src: &str) -> CacheKey {
        CacheKey {
            language: Language::Cpp,
            toolchain: "t".into(),
            flags: "-O2".into(),
            source: src.into(),
        }
    }

    fn compiled(n: usize) -> Compiled {
        Compiled {
            result: ExecutionResult::default(),
            ok: true,
            artifacts: vec![("main".into(), vec![0u8; n])],
        }
    }

    #[tokio::test]
    async fn concurrent_identical_keys_compile_once_and_distinct_keys_do_not_share() {
        let cache = ArtifactCache::new(1 << 20);
        let calls = AtomicUsize::new(0);
        let one = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            Ok::<_, ()>(compiled(10))
        };
        let futs: Vec<_> = (0..8)
            .map(|_| cache.get_or_compile(key("a"), one))
            .collect();
        let got = futures::future::join_all(futs).await;
        assert!(got.iter().all(|r| r.is_ok()));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let b = cache
            .get_or_compile(key("b"), || async { Ok::<_, ()>(compiled(20)) })
            .await
            .unwrap();
        assert_eq!(b.artifacts[0].1.len(), 20);
        let s = cache.stats();
        assert_eq!((s.entries, s.misses, s.hits), (2, 2, 7));
    }

    #[tokio::test]
    async fn machinery_errors_are_not_cached_and_the_budget_evicts_lru() {
        let cache = ArtifactCache::new(100);
        let e = cache
            .get_or_compile(key("x"), || async { Err::<Compiled, _>("boom") })
            .await;
        assert!(e.is_err());
        let ok = cache
            .get_or_compile(key("x"), || async { Ok::<_, &str>(compiled(60)) })
            .await;
        assert!(ok.is_ok());
        cache
            .get_or_compile(key("y"), || async { Ok::<_, &str>(compiled(60)) })
            .await
            .unwrap();
        // x (older) was evicted to fit y.
        let s = cache.stats();
        assert_eq!(s.entries, 1);
        assert!(s.bytes <= 100);
        let mut recompiled = false;
        cache
            .get_or_compile(key("y"), || async {
                recompiled = true;
                Ok::<_, &str>(compiled(60))
            })
            .await
            .unwrap();
        assert!(!recompiled);
    }
}
