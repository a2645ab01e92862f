//! The flags of every command that scores programs (`serve`, `evaluate`, `tasks check`, `run`):
//! one definition, so that the CLI commands build their scoring engine from the same config file,
//! the same way, as `codegym serve` does.

use std::path::PathBuf;

use anyhow::Context;
use env_coding::{CodingConfig, Scorer};

/// The sandbox flags `serve` and the scoring commands share; they override the config file's
/// `coding` section.
#[derive(Debug, Clone, clap::Args)]
pub struct CodingFlags {
    #[command(flatten)]
    pub isolation: super::isolation::IsolationArg,
    /// Allow task `requirements` (pip, wheels only), cached under `coding.packages.cache_dir`.
    #[arg(long)]
    pub packages: bool,
    /// Install task requirements only from the wheels in DIR, never from an index (air-gapped
    /// clusters); implies --packages.
    #[arg(long, value_name = "DIR")]
    pub wheelhouse: Option<PathBuf>,
    /// Prepare repository tasks in this process only: neither reuse nor keep prepared states in
    /// the store (`coding.prepared.dir`).
    #[arg(long)]
    pub no_prepared_store: bool,
}

impl CodingFlags {
    /// Applies the flags to `coding` (the config file's section, or the defaults).
    pub fn apply(&self, coding: &mut CodingConfig) -> anyhow::Result<()> {
        coding.sandbox.min_isolation = self.isolation.level(coding.sandbox.min_isolation);
        if self.no_prepared_store {
            coding.prepared.enabled = false;
        }
        if self.packages || self.wheelhouse.is_some() {
            coding.packages.enabled = true;
        }
        if let Some(dir) = &self.wheelhouse {
            anyhow::ensure!(
                dir.is_dir(),
                "--wheelhouse {}: not a directory",
                dir.display()
            );
            coding.packages.wheelhouse = Some(dir.clone());
        }
        Ok(())
    }
}

/// `--config` and the flags of the commands that score programs outside a server.
#[derive(Debug, Clone, clap::Args)]
pub struct ScoringArgs {
    /// The `codegym serve` config file (JSON): its `coding` section (sandbox, limits, packages,
    /// per-test budget, verdict cache) is used exactly as `serve` uses it; flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Python interpreter (default: the config's, else the real binary behind `python3`).
    #[arg(long, env = "CODEGYM_PYTHON")]
    pub python: Option<PathBuf>,
    /// Wall-clock budget of each unit test, in ms (default: the config's
    /// `coding.per_test_timeout_ms`, 3000).
    #[arg(long)]
    pub per_test_timeout_ms: Option<u64>,
    #[command(flatten)]
    pub flags: CodingFlags,
}

impl ScoringArgs {
    /// The config file's `coding` section (or the defaults) with the flags applied.
    pub fn coding_config(&self) -> anyhow::Result<CodingConfig> {
        let mut coding = match &self.config {
            Some(path) => codegym::config::load(path)?.coding,
            None => CodingConfig::default(),
        };
        self.flags.apply(&mut coding)?;
        if let Some(python) = &self.python {
            coding.sandbox.python = Some(python.clone());
        }
        if let Some(ms) = self.per_test_timeout_ms {
            coding.per_test_timeout_ms = ms;
        }
        Ok(coding)
    }
}

/// The scoring engine `coding` describes, built off the runtime (probing the sandbox blocks).
pub async fn scorer(coding: CodingConfig) -> anyhow::Result<Scorer> {
    tokio::task::spawn_blocking(move || Scorer::new(&coding))
        .await?
        .context("cannot start the sandbox")
}
