//! `codegym-bench lang` (issue 14): executions per second of every installed language through the
//! sandbox, for a trivial program and for a 10-test stdin/stdout problem judged in C++ and Python,
//! with the compile cache warm (every call submits the same source) and cold (every call a new
//! source, so every call compiles), beside a naive baseline: plain subprocesses that compile (C++)
//! and run once per test, with no isolation and no cache.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use codegym_sandbox::lang::Language;
use codegym_sandbox::{ExecRequest, Sandbox, SandboxConfig};
use env_coding::judge::{Checker, JudgeSpec, TestCase, judge};

use crate::exec::closed_loop;

/// What to measure.
#[derive(Debug, Clone)]
pub struct LangBenchArgs {
    pub callers: usize,
    pub duration: Duration,
    /// Languages of the trivial-program rows (default: every installed one).
    pub languages: Vec<Language>,
}

fn hello(l: Language) -> &'static str {
    match l {
        Language::Python => "print('hello')\n",
        Language::Cpp => "#include <cstdio>\nint main(){puts(\"hello\");}\n",
        Language::C => "#include <stdio.h>\nint main(void){puts(\"hello\");return 0;}\n",
        Language::Rust => "fn main(){println!(\"hello\");}\n",
        Language::Go => "package main\nimport \"fmt\"\nfunc main(){fmt.Println(\"hello\")}\n",
        Language::Java => {
            "public class Main { public static void main(String[] a){ System.out.println(\"hello\"); } }\n"
        }
        Language::NodeJs | Language::TypeScript => "console.log('hello');\n",
        Language::Bash => "echo hello\n",
        Language::Ruby => "puts 'hello'\n",
        Language::Php => "<?php echo \"hello\\n\";\n",
        Language::Lua => "print('hello')\n",
        Language::Perl => "print \"hello\\n\";\n",
    }
}

/// A comment that makes a source unique (a cold compile) without changing its behaviour.
fn comment(l: Language, n: u64) -> String {
    match l {
        Language::Python | Language::Bash | Language::Ruby | Language::Perl => format!("\n# {n}\n"),
        Language::Php => format!("\n// {n}\n"),
        Language::Lua => format!("\n-- {n}\n"),
        _ => format!("\n// {n}\n"),
    }
}

const CPP_SUM: &str =
    "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<\"\\n\";}\n";
const PY_SUM: &str = "a, b = map(int, input().split())\nprint(a + b)\n";

fn ten_tests() -> Vec<TestCase> {
    (0..10)
        .map(|i| TestCase {
            input: format!("{i} {}\n", i * 7),
            output: format!("{}\n", i * 8),
        })
        .collect()
}

/// Runs every row and returns the Markdown table.
pub async fn run(args: LangBenchArgs) -> anyhow::Result<String> {
    let sandbox = tokio::task::spawn_blocking(|| Sandbox::new(SandboxConfig::default())).await??;
    let sandbox = Arc::new(sandbox);
    let mut table = format!(
        "Sandbox isolation: {}; Python backend: {}; {} callers, {:?} per row\n\n\
         | workload | language | path | calls/s | p50 (ms) | p99 (ms) |\n|---|---|---|---:|---:|---:|\n",
        sandbox.isolation().level,
        sandbox.backend(),
        args.callers,
        args.duration
    );
    let counter = Arc::new(AtomicU64::new(0));
    for &l in &args.languages {
        if sandbox.supports(l).is_err() {
            table.push_str(&format!("| hello | {l} | not installed | | | |\n"));
            continue;
        }
        let paths: &[(&str, bool)] = if l.is_compiled() {
            &[
                ("sandbox, cache warm", false),
                ("sandbox, cache cold", true),
            ]
        } else {
            &[("sandbox", false)]
        };
        for &(path, cold) in paths {
            let sb = sandbox.clone();
            let counter = counter.clone();
            let (rate, lat) = closed_loop(args.callers, args.duration, move |_| {
                let sb = sb.clone();
                let mut source = hello(l).to_string();
                if cold {
                    source.push_str(&comment(l, counter.fetch_add(1, Ordering::Relaxed)));
                }
                async move {
                    let req = ExecRequest {
                        source,
                        language: l,
                        ..ExecRequest::default()
                    };
                    let o = sb.run(req).await?;
                    anyhow::ensure!(o.stdout == "hello\n", "{l}: {o:?}");
                    Ok(())
                }
            })
            .await?;
            table.push_str(&row("hello", l, path, rate, lat));
        }
    }
    for (l, src) in [(Language::Cpp, CPP_SUM), (Language::Python, PY_SUM)] {
        let spec = Arc::new(JudgeSpec {
            tests: ten_tests(),
            checker: Checker::Tokens,
            time_limit_ms: 2_000,
            memory_limit_mb: None,
            partial: true,
            weight: 1.0,
            driver: None,
        });
        let paths: &[(&str, bool)] = if l.is_compiled() {
            &[("judge, cache warm", false), ("judge, cache cold", true)]
        } else {
            &[("judge", false)]
        };
        for &(path, cold) in paths {
            let sb = sandbox.clone();
            let spec = spec.clone();
            let counter = counter.clone();
            let (rate, lat) = closed_loop(args.callers, args.duration, move |_| {
                let sb = sb.clone();
                let spec = spec.clone();
                let mut source = src.to_string();
                if cold {
                    source.push_str(&comment(l, counter.fetch_add(1, Ordering::Relaxed)));
                }
                async move {
                    let base = *sb.limits();
                    let r = judge(&sb, l, &source, &[], &spec, base, Default::default()).await?;
                    anyhow::ensure!(r.passed() == 10, "{l}: {r:?}");
                    Ok(())
                }
            })
            .await?;
            table.push_str(&row("10-test stdin/stdout", l, path, rate, lat));
        }
        let counter = counter.clone();
        let python = sandbox.python().display().to_string();
        let (rate, lat) = closed_loop(args.callers, args.duration, move |_| {
            let n = counter.fetch_add(1, Ordering::Relaxed);
            baseline(l, src, n, python.clone())
        })
        .await?;
        table.push_str(&row(
            "10-test stdin/stdout",
            l,
            "naive subprocesses (no isolation, no cache)",
            rate,
            lat,
        ));
    }
    Ok(table)
}

fn row(workload: &str, l: Language, path: &str, rate: f64, lat: crate::latency::Latency) -> String {
    format!(
        "| {workload} | {l} | {path} | {rate:.1} | {:.1} | {:.1} |\n",
        lat.p50_us / 1000.0,
        lat.p99_us / 1000.0
    )
}

/// The naive judge: a temp dir, `g++` (C++) once, then one plain subprocess per test with the
/// test's stdin, output compared as tokens. What the sandbox and its cache replace.
async fn baseline(l: Language, src: &'static str, n: u64, python: String) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let run_argv: Vec<String> = match l {
        Language::Cpp => {
            let file = dir.path().join("main.cpp");
            tokio::fs::write(&file, format!("{src}\n// {n}\n")).await?;
            let exe = dir.path().join("main");
            // The benchmark's naive, unsandboxed baseline: exactly what the sandbox replaces.
            #[allow(clippy::disallowed_methods)]
            let out = tokio::process::Command::new("/usr/bin/g++")
                .args(["-std=c++17", "-O2", "-pipe", "-o"])
                .arg(&exe)
                .arg(&file)
                .kill_on_drop(true)
                .output()
                .await?;
            anyhow::ensure!(out.status.success(), "g++ failed");
            vec![exe.display().to_string()]
        }
        _ => {
            let file = dir.path().join("main.py");
            tokio::fs::write(&file, src).await?;
            vec![python, "-I".into(), "-S".into(), file.display().to_string()]
        }
    };
    for t in ten_tests() {
        use tokio::io::AsyncWriteExt;
        // The naive baseline again (see above).
        #[allow(clippy::disallowed_methods)]
        let mut child = tokio::process::Command::new(&run_argv[0])
            .args(&run_argv[1..])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(t.input.as_bytes()).await?;
        }
        let out = child.wait_with_output().await?;
        let got = String::from_utf8_lossy(&out.stdout);
        anyhow::ensure!(
            got.split_whitespace().eq(t.output.split_whitespace()),
            "baseline: wrong answer"
        );
    }
    Ok(())
}
