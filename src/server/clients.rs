//! Sessions per client: with `http.max_sessions_per_client`, one client (one peer IP address) may
//! hold at most that many sessions at once, over every door (gRPC unary and stream, OpenEnv HTTP
//! and WebSocket), so that one runaway trainer cannot take the whole session cap
//! (`server.max_sessions`) from every other client.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Open sessions by client, and the cap.
#[derive(Debug)]
pub(crate) struct ClientSessions {
    max: Option<usize>,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One client's session; dropping it frees the client's slot.
#[derive(Debug)]
pub(crate) struct ClientSlot {
    table: Arc<ClientSessions>,
    ip: IpAddr,
}

impl ClientSessions {
    /// `None`: no per-client cap (only the server's).
    pub fn new(max: Option<usize>) -> Arc<Self> {
        Arc::new(ClientSessions {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// The cap, if any.
    pub fn max(&self) -> Option<usize> {
        self.max
    }

    /// A slot for `ip`, or `None` when it already holds the most it may.
    pub fn acquire(self: &Arc<Self>, ip: IpAddr) -> Option<ClientSlot> {
        let mut open = self.lock();
        let n = open.entry(ip).or_insert(0);
        if self.max.is_some_and(|max| *n >= max) {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            table: self.clone(),
            ip,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        // Short, non-panicking critical sections: recover from poison.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.table.lock();
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_gets_its_own_cap_and_slots_come_back() {
        let table = ClientSessions::new(Some(2));
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let a1 = table.acquire(a).expect("first");
        let _a2 = table.acquire(a).expect("second");
        assert!(table.acquire(a).is_none(), "a third for the same client");
        assert!(table.acquire(b).is_some(), "another client is not affected");
        drop(a1);
        assert!(table.acquire(a).is_some(), "a freed slot is reusable");
        let unlimited = ClientSessions::new(None);
        let slots: Vec<_> = (0..100).filter_map(|_| unlimited.acquire(a)).collect();
        assert_eq!(slots.len(), 100);
    }
}
