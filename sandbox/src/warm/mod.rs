//! The warm backend: scripts fork from a pre-started interpreter instead of starting Python from
//! scratch. The default where the server is root with PID and mount namespaces.
//!
//! - `server.rs` + `server.py`: the long-lived fork server of one sandbox ([`server::ForkServer`]),
//!   spawned like any sandboxed process; it never sees tests or expected outputs (children could
//!   find its objects through `gc`).
//! - `run.rs`: one script run of it ([`run::WarmRun`]), supervised like a fresh execution.
//! - here: [`WarmBackend`], the sandbox's live server, replaced when it dies; a run that finds it
//!   dead is retried once on the new one, and so is a run it died under (`Sandbox::run_admitted`).

mod run;
mod server;

use std::sync::{Arc, Mutex};

pub(crate) use run::WarmRun;
use server::ForkServer;

use super::cgroup::CellPool;
use super::config::{Backend, Limits};
use super::isolation::Layer;
use super::prepare::{Inner, RunLayout};
use super::request::{ReportSpec, SandboxError, ToolHost};
use super::supervise::Started;

/// The warm backend of one sandbox: its live fork server.
pub(crate) struct WarmBackend {
    /// Declared first, so dropped first: the server's cgroup and work dir live under the roots
    /// `inner`'s drop removes (and `inner` cannot go before: this holds an `Arc` of it).
    server: Mutex<Option<Arc<ForkServer>>>,
    /// The runs' own groups, kept across servers; under the cgroup root `inner`'s drop removes.
    cells: Option<Arc<CellPool>>,
    inner: Arc<Inner>,
}

/// Why the warm backend cannot be used on this machine, if it cannot.
fn unavailable(inner: &Inner) -> Option<&'static str> {
    let l = &inner.layers;
    let needed = (libc::CLONE_NEWPID | libc::CLONE_NEWNS) as u64;
    if l.clone_flags & needed != needed {
        Some("needs PID and mount namespaces")
    } else if !l.drop_uid {
        Some("needs a per-run uid (the server must run as root)")
    } else {
        None
    }
}

/// Starts the first fork server when the configuration asks for it and the machine allows it
/// (`None`: the configuration wants fresh interpreters). Blocking; [`adopt`] reports the outcome.
pub(crate) fn launch(inner: &Inner) -> Option<Result<ForkServer, String>> {
    if inner.config.backend == Backend::Fresh {
        return None;
    }
    let cells = inner
        .layers
        .cgroup
        .clone()
        .map(|root| Arc::new(CellPool::new(root)));
    Some(match unavailable(inner) {
        Some(why) => Err(why.to_string()),
        None => ForkServer::start(inner, cells).map_err(|e| e.to_string()),
    })
}

/// Reports what [`launch`] gave as a layer (a missing one is logged like any other). `Ok(None)`:
/// scripts start fresh interpreters.
pub(crate) fn adopt(
    inner: &mut Inner,
    launched: Option<Result<ForkServer, String>>,
) -> Result<Option<ServerStarted>, SandboxError> {
    let Some(started) = launched else {
        return Ok(None);
    };
    let wanted = inner.config.backend;
    let layer = |active, detail: String| Layer {
        name: "warm fork",
        active,
        detail,
    };
    match started {
        Ok(server) => {
            let own = match server.cells() {
                Some(_) => "namespaces and cgroups",
                None => "namespaces",
            };
            inner.report.layers.push(layer(
                true,
                format!("scripts fork from a pre-started interpreter, each into its own {own}"),
            ));
            Ok(Some(ServerStarted(server)))
        }
        Err(why) if wanted == Backend::WarmFork => Err(SandboxError::Setup {
            stage: "warm fork",
            source: std::io::Error::other(why),
        }),
        Err(why) => {
            tracing::warn!(reason = %why, "warm-fork backend not available; every script starts a fresh interpreter");
            inner
                .report
                .layers
                .push(layer(false, format!("fresh interpreter per script: {why}")));
            Ok(None)
        }
    }
}

/// Whether a run failed because its fork server died under it (killed from outside: the OOM
/// killer, an operator): the run's tree died with the server, through no doing of its program.
pub(crate) fn server_died(e: &SandboxError) -> bool {
    matches!(e, SandboxError::Setup { stage, .. } if *stage == run::SERVER_DIED)
}

/// A first server, started before the sandbox's state is shared ([`launch`], [`adopt`]).
pub(crate) struct ServerStarted(ForkServer);

impl WarmBackend {
    pub fn new(inner: Arc<Inner>, first: ServerStarted) -> WarmBackend {
        WarmBackend {
            cells: first.0.cells().cloned(),
            server: Mutex::new(Some(Arc::new(first.0))),
            inner,
        }
    }

    /// Starts a script run, on a new server if the last one died. A server that died since the
    /// last run is noticed when asked to fork: the run is then retried once on a new server
    /// instead of failing; so is a run whose process died before its program started.
    pub async fn start_run(
        self: &Arc<Self>,
        layout: &RunLayout<'_>,
        limits: &Limits,
        with_stdin: bool,
        report: Option<(&ReportSpec, Option<&ToolHost>)>,
    ) -> Result<Started<WarmRun>, SandboxError> {
        let mut attempts = 0;
        loop {
            let id = self.inner.next_id();
            let server = self.server().await?;
            attempts += 1;
            match run::start(
                &self.inner,
                server.clone(),
                id,
                layout,
                limits,
                with_stdin,
                report,
            )
            .await
            {
                Err(_) if attempts == 1 && !server.is_alive() => continue,
                Err(SandboxError::Setup { stage, .. })
                    if attempts == 1 && stage == run::NOT_STARTED =>
                {
                    continue;
                }
                started => return started,
            }
        }
    }

    /// One run as execution `id` on the current server, without retry (the start-up self-test).
    pub async fn start_run_as(
        &self,
        id: u64,
        layout: &RunLayout<'_>,
        limits: &Limits,
    ) -> Result<Started<WarmRun>, SandboxError> {
        let server = self
            .server
            .lock()
            .map_err(|_| SandboxError::Closed)?
            .clone()
            .ok_or(SandboxError::Closed)?;
        run::start(&self.inner, server, id, layout, limits, false, None).await
    }

    /// The live fork server, restarted if it died.
    async fn server(self: &Arc<Self>) -> Result<Arc<ForkServer>, SandboxError> {
        if let Some(server) = self
            .server
            .lock()
            .map_err(|_| SandboxError::Closed)?
            .as_ref()
            && server.is_alive()
        {
            return Ok(server.clone());
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut slot = this.server.lock().map_err(|_| SandboxError::Closed)?;
            // Another run may have restarted it while this one waited for the lock.
            if let Some(server) = slot.as_ref()
                && server.is_alive()
            {
                return Ok(server.clone());
            }
            tracing::warn!("the fork server exited; starting a new one");
            super::metrics::fork_server_restarted();
            let server = Arc::new(ForkServer::start(&this.inner, this.cells.clone())?);
            *slot = Some(server.clone());
            Ok(server)
        })
        .await
        .map_err(|_| SandboxError::Closed)?
    }
}
