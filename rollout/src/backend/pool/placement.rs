//! The pool's servers and where a new session goes: the least-loaded healthy server.
//!
//! Load is what this client knows: the sessions it has open on each server (a [`Lease`] per
//! session). A server is eligible when its last health check said SERVING, it has not answered
//! RESOURCE_EXHAUSTED within its cool-down, and the caller has not already tried it for this
//! session. Ties rotate, so equally loaded servers take turns instead of the first one taking all.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tonic::transport::Channel;

/// What the pool knows of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Health {
    /// Not checked yet.
    Unknown = 0,
    Serving = 1,
    /// It answered, but not SERVING (draining, or not serving the env service).
    NotServing = 2,
    /// No answer: connection refused or broken, or the check's deadline passed.
    Down = 3,
}

impl Health {
    pub fn from_u8(v: u8) -> Health {
        match v {
            1 => Health::Serving,
            2 => Health::NotServing,
            3 => Health::Down,
            _ => Health::Unknown,
        }
    }
}

/// One `codegym serve` process (one address).
#[derive(Debug)]
pub(crate) struct Server {
    pub addr: SocketAddr,
    /// Shared by every session and health check of this server: one HTTP/2 connection.
    pub channel: Channel,
    health: AtomicU8,
    load: AtomicUsize,
    busy_until: Mutex<Option<Instant>>,
}

impl Server {
    pub fn new(addr: SocketAddr, channel: Channel) -> Self {
        Server {
            addr,
            channel,
            health: AtomicU8::new(Health::Unknown as u8),
            load: AtomicUsize::new(0),
            busy_until: Mutex::new(None),
        }
    }

    pub fn health(&self) -> Health {
        Health::from_u8(self.health.load(Ordering::Relaxed))
    }

    pub fn set_health(&self, health: Health) {
        let old = Health::from_u8(self.health.swap(health as u8, Ordering::Relaxed));
        if old != health {
            tracing::info!(server = %self.addr, from = ?old, to = ?health, "env server health changed");
        }
    }

    /// Sessions this client has open on the server.
    pub fn load(&self) -> usize {
        self.load.load(Ordering::Relaxed)
    }

    /// The server said it is full: no new sessions for `cool_down`.
    pub fn mark_busy(&self, cool_down: Duration) {
        *lock(&self.busy_until) = Some(Instant::now() + cool_down);
    }

    fn is_busy(&self, now: Instant) -> bool {
        lock(&self.busy_until).is_some_and(|until| until > now)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data is plain values; a panic elsewhere cannot leave it inconsistent.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A session's claim on a server's load; released on drop.
#[derive(Debug)]
pub(crate) struct Lease {
    server: Arc<Server>,
}

impl Lease {
    pub fn server(&self) -> &Arc<Server> {
        &self.server
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.server.load.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The servers currently known (discovery replaces the list; sessions keep their `Arc`).
#[derive(Debug, Default)]
pub(crate) struct Servers {
    list: Mutex<Vec<Arc<Server>>>,
    turn: AtomicUsize,
}

impl Servers {
    pub fn snapshot(&self) -> Vec<Arc<Server>> {
        lock(&self.list).clone()
    }

    /// Keeps the servers at `addrs` (existing ones keep their state), adding new ones with `make`.
    pub fn replace(&self, addrs: &[SocketAddr], make: impl Fn(SocketAddr) -> Server) {
        let mut list = lock(&self.list);
        let kept: Vec<Arc<Server>> = addrs
            .iter()
            .map(|a| match list.iter().find(|s| s.addr == *a) {
                Some(s) => s.clone(),
                None => {
                    tracing::info!(server = %a, "env server discovered");
                    Arc::new(make(*a))
                }
            })
            .collect();
        for gone in list.iter().filter(|s| !addrs.contains(&s.addr)) {
            tracing::info!(server = %gone.addr, "env server no longer listed; open sessions stay");
        }
        *list = kept;
    }

    /// Leases the least-loaded eligible server, or `None` when none is eligible.
    pub fn pick(&self, exclude: &HashSet<SocketAddr>) -> Option<Lease> {
        let now = Instant::now();
        // Under the list's lock, so that concurrent picks see each other's leases.
        let list = lock(&self.list);
        let eligible: Vec<&Arc<Server>> = list
            .iter()
            .filter(|s| s.health() == Health::Serving && !s.is_busy(now))
            .filter(|s| !exclude.contains(&s.addr))
            .collect();
        let least = eligible.iter().map(|s| s.load()).min()?;
        let tied: Vec<&&Arc<Server>> = eligible.iter().filter(|s| s.load() == least).collect();
        let server = (*tied[self.turn.fetch_add(1, Ordering::Relaxed) % tied.len()]).clone();
        server.load.fetch_add(1, Ordering::Relaxed);
        Some(Lease { server })
    }

    /// Leases `server` itself, whatever its load and health (a check that must reach each server).
    pub fn lease(server: &Arc<Server>) -> Lease {
        server.load.fetch_add(1, Ordering::Relaxed);
        Lease {
            server: server.clone(),
        }
    }

    /// Whether any server is eligible apart from `exclude` (so that trying again is useful).
    pub fn any_serving(&self) -> bool {
        lock(&self.list)
            .iter()
            .any(|s| s.health() == Health::Serving)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(n: u16) -> Servers {
        let s = Servers::default();
        let addrs: Vec<SocketAddr> = (0..n)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], 7000 + i)))
            .collect();
        s.replace(&addrs, |a| {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{a}"))
                .unwrap()
                .connect_lazy();
            Server::new(a, channel)
        });
        for server in s.snapshot() {
            server.set_health(Health::Serving);
        }
        s
    }

    #[tokio::test]
    async fn new_sessions_go_to_the_least_loaded_healthy_server() {
        let s = servers(3);
        let all = s.snapshot();
        // Three leases spread one per server.
        let leases: Vec<Lease> = (0..3).map(|_| s.pick(&HashSet::new()).unwrap()).collect();
        assert!(all.iter().all(|srv| srv.load() == 1));
        // A server that is down, or full, gets nothing; the others share the rest.
        all[0].set_health(Health::NotServing);
        all[1].mark_busy(Duration::from_secs(60));
        let more: Vec<Lease> = (0..4).map(|_| s.pick(&HashSet::new()).unwrap()).collect();
        assert_eq!((all[0].load(), all[1].load(), all[2].load()), (1, 1, 5));
        // Excluding the only eligible server leaves nothing.
        assert!(s.pick(&HashSet::from([all[2].addr])).is_none());
        drop(more);
        drop(leases);
        assert!(all.iter().all(|srv| srv.load() == 0));
    }

    #[tokio::test]
    async fn replacing_the_list_keeps_known_servers_and_their_state() {
        let s = servers(2);
        let before = s.snapshot();
        let lease = s.pick(&HashSet::new()).unwrap();
        let kept = lease.server().addr;
        s.replace(&[kept], |_| unreachable!("no new server"));
        let after = s.snapshot();
        assert_eq!(after.len(), 1);
        assert!(Arc::ptr_eq(
            &after[0],
            before.iter().find(|b| b.addr == kept).unwrap()
        ));
        assert_eq!(after[0].load(), 1);
    }
}
