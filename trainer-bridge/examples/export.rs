//! Library use of the exporter: `cargo run -p trainer-bridge --example export -- IN OUT [rl|sft|dpo]`.

use std::path::Path;
use std::process::ExitCode;

use trainer_bridge::{ExportConfig, ExportFormat};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(input), Some(output)) = (args.first(), args.get(1)) else {
        eprintln!("usage: export IN.jsonl OUT.(jsonl|parquet) [rl|sft|dpo]");
        return ExitCode::FAILURE;
    };
    let format = match args.get(2).map(String::as_str) {
        None | Some("rl") => ExportFormat::Rl,
        Some("sft") => ExportFormat::Sft,
        Some("dpo") => ExportFormat::Dpo,
        Some(other) => {
            eprintln!("unknown format {other}");
            return ExitCode::FAILURE;
        }
    };
    let config = ExportConfig {
        format,
        ..ExportConfig::default()
    };
    match trainer_bridge::export(Path::new(input), Path::new(output), &config) {
        Ok(summary) => {
            println!(
                "wrote {} rows from {} episodes",
                summary.rows, summary.episodes
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
