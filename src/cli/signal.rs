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

/// Resolves on the first SIGINT or SIGTERM (a graceful stop). When the handlers cannot be installed
/// it logs why and never resolves.
pub async fn shutdown_signal() {
    match ShutdownSignals::install() {
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
