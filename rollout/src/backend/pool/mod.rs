//! A pool of `codegym serve` processes behind one rollout: the remote backend's engine.
//!
//! - [`discovery`]: servers from `http://host:port` targets, a name resolving to several addresses
//!   (a Kubernetes headless Service) giving several servers, re-resolved periodically.
//! - [`health`]: `grpc.health.v1` checks; only SERVING servers get new sessions.
//! - [`placement`]: a new session goes to the least-loaded eligible server.
//! - [`retry`]: UNAVAILABLE, RESOURCE_EXHAUSTED, broken connections and deadlines move the
//!   session to another server, with backoff; every other answer is final.
//! - [`session`]: the episode's `Session` stream, pinned to its server for the episode's life.
//!
//! An episode whose server is lost mid-episode is restarted by the episode loop (see
//! `episode::run_episode`), from its first turn with the same seed, on another server.

mod discovery;
mod health;
mod placement;
mod retry;
pub mod session;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use env_core::{EnvError, Kwargs};
use serde::{Deserialize, Serialize};
use tokio_util::sync::{CancellationToken, DropGuard};
use tonic::transport::{Channel, Endpoint};

use discovery::{Target, resolve_all};
use placement::{Health, Server, Servers};
use retry::OpenFailure;
pub use session::PooledSession;

/// How the remote backend uses its env servers. Every field has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvPoolConfig {
    /// Seconds between `grpc.health.v1` checks of every server.
    pub health_interval_secs: f64,
    /// Deadline of one health check, in seconds.
    pub health_timeout_secs: f64,
    /// Seconds between resolutions of the servers' names.
    pub resolve_interval_secs: f64,
    /// Deadline of one env call (opening a session, make, reset, step, close), in seconds. A
    /// server that does not answer in time is taken for lost. Must exceed the longest step (the
    /// sandbox's wall-clock limit, tests included).
    pub call_timeout_secs: f64,
    /// TCP connect timeout, in seconds.
    pub connect_timeout_secs: f64,
    /// How long placing one session may keep trying (no server healthy, all full), in seconds.
    pub place_timeout_secs: f64,
    /// First backoff step between placement attempts, in milliseconds (doubled, full jitter).
    pub backoff_initial_ms: u64,
    /// Backoff cap, in milliseconds.
    pub backoff_max_ms: u64,
    /// How long a server that answered RESOURCE_EXHAUSTED gets no new sessions, in milliseconds.
    pub busy_cool_down_ms: u64,
    /// Restarts of one episode after losing its server; then the episode is an error (re-run by
    /// `--resume`).
    pub max_restarts: u32,
}

impl Default for EnvPoolConfig {
    fn default() -> Self {
        EnvPoolConfig {
            health_interval_secs: 1.0,
            health_timeout_secs: 2.0,
            resolve_interval_secs: 10.0,
            call_timeout_secs: 300.0,
            connect_timeout_secs: 5.0,
            place_timeout_secs: 120.0,
            backoff_initial_ms: 50,
            backoff_max_ms: 2_000,
            busy_cool_down_ms: 1_000,
            max_restarts: 3,
        }
    }
}

impl EnvPoolConfig {
    /// Checks the durations (positive and finite).
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("health_interval_secs", self.health_interval_secs),
            ("health_timeout_secs", self.health_timeout_secs),
            ("resolve_interval_secs", self.resolve_interval_secs),
            ("call_timeout_secs", self.call_timeout_secs),
            ("connect_timeout_secs", self.connect_timeout_secs),
            ("place_timeout_secs", self.place_timeout_secs),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!(
                    "env_pool.{name} must be a positive number, got {v}"
                ));
            }
        }
        Ok(())
    }

    fn secs(v: f64) -> Duration {
        Duration::from_secs_f64(v)
    }
}

/// The pool; cheap to share (`Arc`). Its background task (health checks and re-resolution) stops
/// when the last handle is dropped.
#[derive(Debug)]
pub struct Pool {
    servers: Arc<Servers>,
    config: EnvPoolConfig,
    _maintenance: DropGuard,
}

impl Pool {
    /// Resolves `addresses` (`http://host:port`), checks every server's health once, and starts
    /// the periodic checks. Fails on a malformed address or a name that does not resolve; servers
    /// that are not healthy yet are not an error (they may still be starting).
    pub async fn connect(addresses: &[String], config: EnvPoolConfig) -> Result<Pool, EnvError> {
        if addresses.is_empty() {
            return Err(EnvError::InvalidKwargs("no env server address".into()));
        }
        config.validate().map_err(EnvError::InvalidKwargs)?;
        let targets = addresses
            .iter()
            .map(|a| Target::parse(a))
            .collect::<Result<Vec<_>, _>>()?;
        let addrs = resolve_all(&targets)
            .await
            .map_err(EnvError::InvalidKwargs)?;
        let servers = Arc::new(Servers::default());
        let connect_timeout = EnvPoolConfig::secs(config.connect_timeout_secs);
        servers.replace(&addrs, |a| Server::new(a, channel(a, connect_timeout)));
        let health_timeout = EnvPoolConfig::secs(config.health_timeout_secs);
        health::check_all(&servers.snapshot(), health_timeout).await;
        if !servers.any_serving() {
            tracing::warn!(servers = ?addrs, "no env server is serving yet; sessions wait for one");
        }
        let stop = CancellationToken::new();
        tokio::spawn(maintain(
            servers.clone(),
            targets,
            config.clone(),
            stop.clone(),
        ));
        Ok(Pool {
            servers,
            config,
            _maintenance: stop.drop_guard(),
        })
    }

    /// Servers known now (after resolution).
    pub fn servers(&self) -> Vec<SocketAddr> {
        self.servers.snapshot().iter().map(|s| s.addr).collect()
    }

    /// The configuration.
    pub fn config(&self) -> &EnvPoolConfig {
        &self.config
    }

    /// Opens a session of `env_id` on the least-loaded healthy server, avoiding `avoid` (the
    /// server a restarted episode just lost) while another one is eligible. Servers that are full
    /// or unreachable are skipped, with backoff, until `place_timeout_secs` has passed.
    pub async fn open(
        &self,
        env_id: &str,
        kwargs: &Kwargs,
        avoid: Option<SocketAddr>,
    ) -> Result<PooledSession, EnvError> {
        let c = &self.config;
        let started = tokio::time::Instant::now();
        let give_up = started + EnvPoolConfig::secs(c.place_timeout_secs);
        let call_timeout = EnvPoolConfig::secs(c.call_timeout_secs);
        let (initial, cap) = (
            Duration::from_millis(c.backoff_initial_ms),
            Duration::from_millis(c.backoff_max_ms),
        );
        let mut tried: HashSet<SocketAddr> = avoid.into_iter().collect();
        let mut last = String::from("no env server is serving");
        for attempt in 1u32.. {
            let lease = match self.servers.pick(&tried) {
                Some(lease) => Some(lease),
                // Everything eligible was tried (or avoided): start over rather than give up.
                None if !tried.is_empty() => {
                    tried.clear();
                    self.servers.pick(&tried)
                }
                None => None,
            };
            if let Some(lease) = lease {
                let server = lease.server().clone();
                match PooledSession::open(lease, env_id, kwargs, call_timeout).await {
                    Ok(session) => return Ok(session),
                    Err(OpenFailure::Fatal(e)) => return Err(e),
                    Err(OpenFailure::Busy(why)) => {
                        tracing::debug!(server = %server.addr, %why, "env server full; trying another");
                        crate::metrics::env_server_retry("busy");
                        server.mark_busy(Duration::from_millis(c.busy_cool_down_ms));
                        last = format!("{} is full: {why}", server.addr);
                    }
                    Err(OpenFailure::Unavailable(why)) => {
                        tracing::info!(server = %server.addr, %why, "env server unavailable; trying another");
                        crate::metrics::env_server_retry("unavailable");
                        server.set_health(Health::Down);
                        last = format!("{} is unavailable: {why}", server.addr);
                    }
                }
                tried.insert(server.addr);
            }
            let pause = retry::backoff(attempt, initial, cap);
            if tokio::time::Instant::now() + pause >= give_up {
                break;
            }
            tokio::time::sleep(pause).await;
        }
        Err(EnvError::Infrastructure(format!(
            "no env server took the session within {:?} (last: {last})",
            started.elapsed()
        )))
    }

    /// Makes `env_id` with `kwargs` on every server known now, and closes it again: whether each
    /// server can (a run whose every episode needs a file on the servers checks it before it
    /// starts). A server that refuses the make itself is the error, with its address; one that is
    /// unreachable or full now is skipped, as the run's placement would skip it.
    pub async fn make_on_each(
        &self,
        env_id: &str,
        kwargs: &Kwargs,
    ) -> Result<(), (SocketAddr, EnvError)> {
        let call_timeout = EnvPoolConfig::secs(self.config.call_timeout_secs);
        for server in self.servers.snapshot() {
            let lease = Servers::lease(&server);
            match PooledSession::open(lease, env_id, kwargs, call_timeout).await {
                Ok(session) => {
                    if let Err(e) = session.close().await {
                        tracing::debug!(server = %server.addr, error = %e, "closing a checked session");
                    }
                }
                Err(OpenFailure::Fatal(e)) => return Err((server.addr, e)),
                Err(OpenFailure::Busy(why) | OpenFailure::Unavailable(why)) => {
                    tracing::warn!(server = %server.addr, %why, "env server not checked now");
                }
            }
        }
        Ok(())
    }
}

/// A lazily connected channel to one server. Keep-alive pings find a peer that vanished without
/// closing its connection (a host gone, a network partition) while a step runs.
fn channel(addr: SocketAddr, connect_timeout: Duration) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("a socket address is a valid URI")
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true)
        .connect_lazy()
}

/// The background task: health checks every `health_interval_secs`, re-resolution every
/// `resolve_interval_secs` (a failed one keeps the current servers).
async fn maintain(
    servers: Arc<Servers>,
    targets: Vec<Target>,
    config: EnvPoolConfig,
    stop: CancellationToken,
) {
    let mut health_tick = tokio::time::interval(EnvPoolConfig::secs(config.health_interval_secs));
    let mut resolve_tick = tokio::time::interval(EnvPoolConfig::secs(config.resolve_interval_secs));
    health_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    resolve_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Both ran once in `connect`.
    health_tick.tick().await;
    resolve_tick.tick().await;
    let health_timeout = EnvPoolConfig::secs(config.health_timeout_secs);
    let connect_timeout = EnvPoolConfig::secs(config.connect_timeout_secs);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = health_tick.tick() => {
                health::check_all(&servers.snapshot(), health_timeout).await;
            }
            _ = resolve_tick.tick() => match resolve_all(&targets).await {
                Ok(addrs) => {
                    servers.replace(&addrs, |a| Server::new(a, channel(a, connect_timeout)));
                    // New servers get checked now rather than at the next tick.
                    let unknown: Vec<_> = servers
                        .snapshot()
                        .into_iter()
                        .filter(|s| s.health() == Health::Unknown)
                        .collect();
                    health::check_all(&unknown, health_timeout).await;
                }
                Err(e) => tracing::warn!(error = %e, "re-resolving the env servers failed; keeping the current ones"),
            },
        }
    }
}
