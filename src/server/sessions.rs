//! Sessions: the environments behind unary calls, the global session cap, and the idle reaper.
//!
//! A session's env sits behind a `std::sync::Mutex` that is only ever locked on a blocking-pool
//! thread, never on the async runtime. Calls on one session serialize on that lock; calls on different
//! sessions run in parallel. A poisoned lock means the env panicked: the session is dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use env_core::{DynEnv, EnvSpec};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::State;
use super::status::ServerError;

/// A capacity slot; dropping it frees the slot.
pub type Permit = OwnedSemaphorePermit;

/// One unary session.
pub struct Session {
    pub id: String,
    pub spec: EnvSpec,
    env: Mutex<Option<Box<dyn DynEnv>>>,
    /// Milliseconds since the table's epoch at the last call; read by the reaper.
    last_used: AtomicU64,
    epoch: Instant,
    _permit: Permit,
}

impl Session {
    fn touch(&self) {
        let now = self.epoch.elapsed().as_millis() as u64;
        self.last_used.store(now, Ordering::Relaxed);
    }

    /// Runs `f` on the env on the blocking pool. The session stays usable if the future is dropped
    /// (a client deadline): the call then completes in the background under the lock.
    pub async fn call<T, F>(self: &Arc<Self>, f: F) -> Result<T, ServerError>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn DynEnv) -> env_core::Result<T> + Send + 'static,
    {
        self.touch();
        let me = self.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let mut guard = me.env.lock().map_err(|_| ServerError::EnvPanicked)?;
            let env = guard
                .as_mut()
                .ok_or_else(|| ServerError::SessionNotFound(me.id.clone()))?;
            let out = f(env.as_mut());
            me.touch();
            Ok(out?)
        })
        .await;
        joined.unwrap_or(Err(ServerError::EnvPanicked))
    }

    /// Takes the env out and closes it; later calls see the session as closed.
    async fn close(self: Arc<Self>) -> bool {
        tokio::task::spawn_blocking(move || {
            // A poisoned env is dropped without `close`: its state is unknown.
            let taken = self.env.lock().ok().and_then(|mut g| g.take());
            match taken {
                Some(mut env) => {
                    if let Err(e) = env.close() {
                        tracing::warn!(session_id = %self.id, error = %e, "env close failed");
                    }
                    true
                }
                None => false,
            }
        })
        .await
        .unwrap_or(false)
    }

    fn idle_for(&self) -> Duration {
        let now = self.epoch.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_used.load(Ordering::Relaxed)))
    }
}

/// All unary sessions, plus the capacity semaphore shared with streams.
pub struct SessionTable {
    map: Mutex<HashMap<String, Arc<Session>>>,
    capacity: Arc<Semaphore>,
    max: usize,
    epoch: Instant,
}

impl SessionTable {
    pub fn new(max_sessions: usize) -> Self {
        SessionTable {
            map: Mutex::new(HashMap::new()),
            capacity: Arc::new(Semaphore::new(max_sessions)),
            max: max_sessions,
            epoch: Instant::now(),
        }
    }

    /// Reserves room for one more session (unary or stream).
    pub fn reserve(&self) -> Result<Permit, ServerError> {
        self.capacity
            .clone()
            .try_acquire_owned()
            .map_err(|_| ServerError::TooManySessions(self.max))
    }

    pub fn insert(&self, spec: EnvSpec, env: Box<dyn DynEnv>, permit: Permit) -> Arc<Session> {
        let session = Arc::new(Session {
            id: uuid::Uuid::new_v4().to_string(),
            spec,
            env: Mutex::new(Some(env)),
            last_used: AtomicU64::new(0),
            epoch: self.epoch,
            _permit: permit,
        });
        session.touch();
        self.lock().insert(session.id.clone(), session.clone());
        session
    }

    pub fn get(&self, id: &str) -> Result<Arc<Session>, ServerError> {
        self.lock()
            .get(id)
            .cloned()
            .ok_or_else(|| ServerError::SessionNotFound(id.to_string()))
    }

    /// Removes and closes a session; `false` if it was unknown or already closed.
    pub async fn remove(&self, id: &str) -> bool {
        let session = self.lock().remove(id);
        match session {
            Some(s) => s.close().await,
            None => false,
        }
    }

    /// Closes every session (shutdown). Returns how many were open.
    pub async fn close_all(&self) -> usize {
        let all: Vec<_> = self.lock().drain().map(|(_, s)| s).collect();
        let n = all.len();
        futures::future::join_all(all.into_iter().map(Session::close)).await;
        n
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        // The map is only touched in short, non-panicking critical sections; recover from poison.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn idle(&self, ttl: Duration) -> Vec<String> {
        self.lock()
            .values()
            .filter(|s| s.idle_for() >= ttl && s.env.try_lock().is_ok())
            .map(|s| s.id.clone())
            .collect()
    }
}

/// Closes unary sessions whose clients have vanished (no call for `idle_timeout`).
pub async fn reap_idle(state: Arc<State>) {
    let ttl = state.config.idle_timeout();
    let period = (ttl / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for id in state.sessions.idle(ttl) {
            if state.sessions.remove(&id).await {
                tracing::info!(session_id = %id, idle = ?ttl, "reaped idle session");
            }
        }
    }
}
