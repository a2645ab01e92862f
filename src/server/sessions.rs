//! Sessions: the environments behind unary calls, the global session cap, and which sessions sit
//! idle (the reaper in `state.rs` closes them).
//!
//! A session's env sits behind an async mutex. Each call runs in a task of its own that holds the
//! lock, so calls on one session serialize, calls on different sessions run in parallel, and a call
//! whose client stopped waiting (a deadline) still completes: an env is never left half-stepped. An
//! env that panicked is dropped (it fails that call with INTERNAL; the session is then unknown).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use env_core::{AsyncEnv, EnvError, EnvFuture, EnvSpec};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::clients::ClientSlot;
use super::status::ServerError;

/// A capacity slot; dropping it frees the slot (and the `codegym_sessions_open` gauge follows).
pub struct Permit {
    _slot: OwnedSemaphorePermit,
}

impl Permit {
    fn new(slot: OwnedSemaphorePermit) -> Self {
        crate::metrics::session_slots(1.0);
        Permit { _slot: slot }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        crate::metrics::session_slots(-1.0);
    }
}

/// The capacity one session holds: a slot of the server-wide cap and, when the client is known,
/// one of the client's; dropping it frees both.
pub struct Slot {
    _server: Permit,
    _client: Option<ClientSlot>,
}

impl Slot {
    pub(crate) fn new(server: Permit, client: Option<ClientSlot>) -> Self {
        Slot {
            _server: server,
            _client: client,
        }
    }
}

/// One unary session.
pub struct Session {
    pub id: String,
    pub spec: EnvSpec,
    /// `None` once closed, or after the env panicked.
    env: tokio::sync::Mutex<Option<Box<dyn AsyncEnv>>>,
    /// Milliseconds since the table's epoch at the last call; read by the reaper.
    last_used: AtomicU64,
    epoch: Instant,
    _slot: Slot,
}

impl Session {
    fn touch(&self) {
        let now = self.epoch.elapsed().as_millis() as u64;
        self.last_used.store(now, Ordering::Relaxed);
    }

    /// Runs `f` on the env in a task of its own. The session stays usable if this future is dropped
    /// (a client deadline): the call then completes in the background under the lock.
    pub async fn call<T, F>(self: &Arc<Self>, f: F) -> Result<T, ServerError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Box<dyn AsyncEnv>) -> EnvFuture<'_, T> + Send + 'static,
    {
        self.touch();
        let me = self.clone();
        let task = tokio::spawn(async move {
            let mut slot = me.env.lock().await;
            let env = slot
                .as_mut()
                .ok_or_else(|| ServerError::SessionNotFound(me.id.clone()))?;
            let out = f(env).await;
            if let Err(EnvError::Panicked(_)) = &out {
                // Its state is unknown: later calls find no session.
                *slot = None;
            }
            me.touch();
            Ok(out?)
        });
        task.await.unwrap_or(Err(ServerError::EnvPanicked))
    }

    /// Takes the env out and closes it; later calls see the session as closed.
    async fn close(self: Arc<Self>) -> bool {
        let taken = self.env.lock().await.take();
        match taken {
            Some(mut env) => {
                if let Err(e) = env.close().await {
                    tracing::warn!(session_id = %self.id, error = %e, "env close failed");
                }
                true
            }
            None => false,
        }
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

    /// The session cap.
    pub fn limit(&self) -> usize {
        self.max
    }

    /// Sessions open now, of every kind (unary, stream, HTTP WebSocket).
    pub fn open(&self) -> usize {
        self.max.saturating_sub(self.capacity.available_permits())
    }

    /// Reserves room for one more session (unary, stream or HTTP WebSocket).
    pub fn reserve(&self) -> Result<Permit, ServerError> {
        self.capacity
            .clone()
            .try_acquire_owned()
            .map(Permit::new)
            .map_err(|_| ServerError::TooManySessions(self.max))
    }

    pub fn insert(&self, spec: EnvSpec, env: Box<dyn AsyncEnv>, slot: Slot) -> Arc<Session> {
        let session = Arc::new(Session {
            id: uuid::Uuid::new_v4().to_string(),
            spec,
            env: tokio::sync::Mutex::new(Some(env)),
            last_used: AtomicU64::new(0),
            epoch: self.epoch,
            _slot: slot,
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

    pub(super) fn idle(&self, ttl: Duration) -> Vec<String> {
        self.lock()
            .values()
            .filter(|s| s.idle_for() >= ttl && s.env.try_lock().is_ok())
            .map(|s| s.id.clone())
            .collect()
    }
}
