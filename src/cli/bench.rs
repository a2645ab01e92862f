//! `codegym bench`.

use std::process::ExitCode;

#[derive(Debug, clap::Subcommand)]
pub enum Command {}

pub async fn run(_cmd: Command) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`codegym bench` is being built")
}
