//! `codegym tasks ...`.

use std::process::ExitCode;

#[derive(Debug, clap::Subcommand)]
pub enum Command {}

pub async fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {}
}
