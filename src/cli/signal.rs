//! SIGINT and SIGTERM: the one way the CLI's long-running commands learn that they should stop.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// Handlers for SIGINT and SIGTERM, installed once so that no signal falls between two waits.
pub struct ShutdownSignals {
    term: Signal,
    int: Signal,
}

impl ShutdownSignals {
    /// Installs the handlers; from here on the signals no longer kill the process.
    pub fn install() -> std::io::Result<Self> {
        Ok(ShutdownSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the next SIGINT or SIGTERM and returns its name.
    pub async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// Installs the handlers now and returns a future that resolves on the first SIGINT or SIGTERM (a
/// graceful stop). Installing at the call, not at the first poll, means a signal that arrives after
/// the caller announced itself (`listening on ...`) is never the default kill. When the handlers
/// cannot be installed it logs why and the future never resolves.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    let installed = ShutdownSignals::install();
    async move {
        match installed {
            Ok(mut signals) => {
                let name = signals.next().await;
                tracing::info!("{name} received");
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot install signal handlers; stop with SIGKILL");
                std::future::pending::<()>().await;
            }
        }
    }
}
