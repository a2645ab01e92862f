//! `codegym envs`: list the registered environments.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the specs as JSON lines instead of a table.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let registry = codegym::registry(Default::default())?;
    for spec in registry.specs() {
        if args.json {
            println!("{}", serde_json::to_string(spec)?);
        } else {
            let steps = spec
                .max_episode_steps
                .map_or("-".to_string(), |n| n.to_string());
            let evaluate = if registry.supports_evaluate(&spec.id)? {
                "evaluate"
            } else {
                ""
            };
            println!(
                "{:<24} max_steps={:<5} {:<9} {}",
                spec.id, steps, evaluate, spec.description
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
