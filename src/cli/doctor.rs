//! `codegym doctor`: probes the sandbox once and prints which isolation layers this machine
//! provides (and why a layer is missing), and which languages it runs (and which Debian packages
//! the missing ones need).

use std::path::PathBuf;
use std::process::ExitCode;

use codegym_sandbox::{IsolationLevel, Sandbox, SandboxConfig};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Exit non-zero unless every layer needed for the `strict` level is available.
    #[arg(long)]
    require_isolation: bool,
    /// Python interpreter to check (default: the real binary behind `python3`).
    #[arg(long, env = "CODEGYM_PYTHON")]
    python: Option<PathBuf>,
    /// The task package cache to report (issue 13; default: the configured default dir).
    #[arg(long, value_name = "DIR")]
    package_cache: Option<PathBuf>,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = SandboxConfig {
        python: args.python,
        ..SandboxConfig::default()
    };
    // Probing spawns processes and blocks for tens of milliseconds.
    let sandbox = tokio::task::spawn_blocking(move || Sandbox::new(config)).await??;
    println!("python: {}", sandbox.python().display());
    print!("{}", sandbox.isolation());
    // Data tasks (issue 13): what the task package cache holds.
    let packages = codegym_sandbox::packages::PackagesConfig {
        cache_dir: args
            .package_cache
            .unwrap_or_else(|| codegym_sandbox::packages::PackagesConfig::default().cache_dir),
        ..Default::default()
    };
    let cache =
        codegym_sandbox::packages::PackageCache::new(packages, sandbox.python().to_path_buf());
    let report = tokio::task::spawn_blocking(move || cache.report()).await?;
    print!("{report}");
    // Issue 14: languages.
    print!("{}", languages_report(&sandbox));
    let level = sandbox.isolation().level;
    if args.require_isolation && level < IsolationLevel::Strict {
        eprintln!("error: isolation level {level} is below strict (--require-isolation)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per language: its toolchain, or why it is missing.
fn languages_report(sandbox: &Sandbox) -> String {
    use codegym_sandbox::lang::{Language, toolchain};
    let mut out = String::from("languages:\n");
    for l in Language::ALL {
        let line = match (l, toolchain::get(l)) {
            (Language::Python, _) => format!("[x] {:<10} {}", l.name(), sandbox.python().display()),
            (_, Ok(t)) => {
                let tools: Vec<String> = t
                    .compiler
                    .iter()
                    .chain(t.runtime.iter())
                    .map(|p| p.display().to_string())
                    .collect();
                let kind = if l.is_compiled() {
                    "compiled"
                } else {
                    "interpreted"
                };
                format!("[x] {:<10} {kind}: {}", l.name(), tools.join(", "))
            }
            (_, Err(m)) => format!("[ ] {:<10} {}", l.name(), m.reason),
        };
        out.push_str("  ");
        out.push_str(&line);
        out.push('\n');
    }
    out
}
