//! `codegym doctor`: probes the sandbox once and prints which isolation layers this machine
//! provides (and why a layer is missing), and which languages it runs (and which Debian packages
//! the missing ones need); `--json` for machines, a non-zero exit below the required level.

use std::path::PathBuf;
use std::process::ExitCode;

use codegym_sandbox::lang::Language;
use codegym_sandbox::{IsolationLevel, Sandbox, SandboxConfig};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    isolation: super::isolation::IsolationArg,
    /// The same as `--isolation strict` (the default): exit non-zero below strict.
    #[arg(long, conflicts_with = "isolation")]
    require_isolation: bool,
    /// Print one JSON object (python, isolation level, required level, backend, layers,
    /// languages, package cache) instead of text.
    #[arg(long)]
    json: bool,
    /// Python interpreter to check (default: the real binary behind `python3`).
    #[arg(long, env = "CODEGYM_PYTHON")]
    python: Option<PathBuf>,
    /// The task package cache to report (default: the configured default dir).
    #[arg(long, value_name = "DIR")]
    package_cache: Option<PathBuf>,
}

/// Probes the sandbox and reports it; exits non-zero when it is below the required level (by
/// default strict), as `codegym serve` would refuse to start.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let required = match args.require_isolation {
        true => IsolationLevel::Strict,
        false => args.isolation.level(IsolationLevel::Strict),
    };
    let config = SandboxConfig {
        python: args.python,
        // Probe whatever the machine offers; the verdict against `required` is ours.
        min_isolation: IsolationLevel::None,
        ..SandboxConfig::default()
    };
    // Probing spawns processes and blocks for tens of milliseconds.
    let sandbox = tokio::task::spawn_blocking(move || Sandbox::new(config)).await??;
    let packages = codegym_sandbox::packages::PackagesConfig {
        cache_dir: args
            .package_cache
            .unwrap_or_else(|| codegym_sandbox::packages::PackagesConfig::default().cache_dir),
        ..Default::default()
    };
    let cache =
        codegym_sandbox::packages::PackageCache::new(packages, sandbox.python().to_path_buf());
    let packages = tokio::task::spawn_blocking(move || cache.report()).await?;
    let mut info = sandbox.info();
    info.required_level = required;
    let level = info.isolation_level;
    if args.json {
        let languages: Vec<serde_json::Value> = Language::ALL
            .iter()
            .map(|l| match sandbox.supports(*l) {
                Ok(()) => serde_json::json!({"name": l.name(), "available": true}),
                Err(e) => serde_json::json!({"name": l.name(), "available": false, "reason": e.to_string()}),
            })
            .collect();
        let out = serde_json::json!({
            "python": sandbox.python(),
            "isolation_level": level,
            "required_level": required,
            "meets_required_level": level >= required,
            "backend": info.backend,
            "layers": info.layers,
            "languages": languages,
            "package_cache": packages,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("python: {}", sandbox.python().display());
        print!("{}", sandbox.isolation());
        print!("{packages}");
        print!("{}", languages_report(&sandbox));
    }
    if level < required {
        eprintln!(
            "error: isolation level {level} is below the required {required} ({}); `--isolation {level}` accepts it",
            IsolationLevel::REQUIRES
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per language: its toolchain, or why it is missing.
fn languages_report(sandbox: &Sandbox) -> String {
    use codegym_sandbox::lang::toolchain;
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
