//! The command line of `codegym-bench`: one subcommand per benchmark (plus the rollout benchmark's
//! fake model), each printing the Markdown table recorded in `BENCHMARKS.md`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, clap::Parser)]
#[command(
    name = "codegym-bench",
    version,
    about = "Benchmarks of codegym whose numbers go into BENCHMARKS.md"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Step round trips over gRPC (unary, stream, Evaluate) at several client counts.
    Grpc {
        /// Comma-separated concurrent client counts.
        #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
        clients: Vec<usize>,
        /// Seconds measured per row.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Measure an already running server instead of an in-process one.
        #[arg(long)]
        addr: Option<SocketAddr>,
        /// The environment under load.
        #[arg(long, value_enum, default_value_t = crate::grpc::BenchEnv::Cartpole)]
        env: crate::grpc::BenchEnv,
        /// Items per `Evaluate` call (`--env python`).
        #[arg(long, default_value_t = 64)]
        batch: usize,
    },
    /// G copies of one prepared repository task at once: codegym's copy-on-write workspaces,
    /// one podman container per sample and a bare fork+exec, round by round (needs root).
    RepoCopies {
        /// Copies (samples of one GRPO group) at once.
        #[arg(long, default_value_t = 16)]
        copies: usize,
        /// Rounds; each runs codegym, podman and the floor in turn.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// A repository task set (default: the shipped one); its first task is used.
        #[arg(long)]
        tasks: Option<PathBuf>,
        /// podman's image (default: the newest `localhost/codegym-base:bookworm-toolchains-*`).
        #[arg(long)]
        image: Option<String>,
        /// Measure codegym and the floor only.
        #[arg(long)]
        no_podman: bool,
    },
    /// Sandboxed executions in process: env steps and batch evaluation vs a naive `python3 -c`.
    Exec {
        /// Comma-separated concurrent caller counts.
        #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
        callers: Vec<usize>,
        /// Seconds measured per row.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Python interpreter (default: the real binary behind `python3`).
        #[arg(long)]
        python: Option<PathBuf>,
        /// How scripts start: auto, warm_fork or fresh (the sandbox's `backend` setting).
        #[arg(long, default_value = "auto", value_parser = parse_backend)]
        backend: codegym_sandbox::Backend,
        /// Comma-separated workloads: `print`, `humaneval`.
        #[arg(long, value_delimiter = ',', default_value = "print,humaneval")]
        workloads: Vec<String>,
        /// Comma-separated paths: `step`, `batch`, `naive`.
        #[arg(long, value_delimiter = ',', default_value = "step,batch,naive")]
        paths: Vec<String>,
    },
    /// Rollout throughput against 1, 2, 3... local `codegym serve` processes (the remote pool).
    Pool {
        /// Comma-separated server counts, one row each.
        #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
        servers: Vec<usize>,
        /// Samples of each bundled example task.
        #[arg(long, default_value_t = 16)]
        samples: u32,
        /// Model turns per episode (the fake model's program fails, so every episode takes all).
        #[arg(long, default_value_t = 2)]
        turns: u32,
        /// Fake model latency per request, in milliseconds.
        #[arg(long, default_value_t = 50)]
        latency_ms: u64,
        /// Episodes in flight.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// The `codegym` binary to run as servers (default: the one beside this binary).
        #[arg(long)]
        codegym_bin: Option<PathBuf>,
        /// A `codegym serve --config` file for every server.
        #[arg(long)]
        server_config: Option<PathBuf>,
    },
    /// Executions/s per language (trivial program, 10-test stdin/stdout problem), compile
    /// cache warm and cold, vs naive subprocesses.
    Lang {
        /// Concurrent callers.
        #[arg(long, default_value_t = 4)]
        callers: usize,
        /// Seconds measured per row.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Comma-separated languages of the trivial-program rows (default: all).
        #[arg(long, value_delimiter = ',')]
        languages: Vec<String>,
    },
    /// The latency a host tool call adds, measured inside the sandbox.
    Tools {
        /// Timed calls per row (the gRPC rows take at most 200, the env's cap per step being 256).
        #[arg(long, default_value_t = 200)]
        calls: u32,
        /// How scripts start: auto, warm_fork or fresh.
        #[arg(long, default_value = "auto", value_parser = parse_backend)]
        backend: codegym_sandbox::Backend,
    },
    /// Rollout engine overhead against the ideal schedule, with the fake LLM server.
    Rollout {
        /// Episodes of the throughput run.
        #[arg(long, default_value_t = 2_000)]
        episodes: usize,
        /// Model turns per episode.
        #[arg(long, default_value_t = 3)]
        turns: u32,
        /// Fake model latency per request, in milliseconds.
        #[arg(long, default_value_t = 50)]
        latency_ms: u64,
        /// Episodes in flight in the throughput run.
        #[arg(long, default_value_t = 256)]
        concurrency: usize,
        /// Episodes all in flight at once in the memory run.
        #[arg(long, default_value_t = 4_000)]
        memory_episodes: usize,
        /// Where the fake model server runs.
        #[arg(long, value_enum, default_value_t = crate::rollout::FakeServerPlace::Process)]
        fake_server: crate::rollout::FakeServerPlace,
        /// Runtime threads of the fake model in its own process.
        #[arg(long, default_value_t = crate::rollout::FAKE_WORKERS)]
        fake_workers: usize,
        /// What the instant env's spec declares: `cheap` (calls run in place, as CartPole's) or
        /// `blocking` (calls on blocking threads, as the coding env's).
        #[arg(long, value_enum, default_value_t = crate::rollout::EnvCalls::Cheap)]
        env_calls: crate::rollout::EnvCalls,
    },
    /// SandboxFusion `POST /run_code` against gRPC `Evaluate`, same server, same run.
    Http {
        /// Comma-separated concurrent client counts.
        #[arg(long, value_delimiter = ',', default_value = "64")]
        clients: Vec<usize>,
        /// Seconds measured per row.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
    },
    /// `Evaluate` on GRPO-shaped batches (groups of identical programs), verdict sharing on vs off.
    Grpo {
        /// Items per `Evaluate` call.
        #[arg(long, default_value_t = 64)]
        batch: usize,
        /// Identical programs per group.
        #[arg(long, default_value_t = 8)]
        group: usize,
        /// Concurrent clients.
        #[arg(long, default_value_t = 2)]
        clients: usize,
        /// Alternating rounds (each measures both servers).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Seconds measured per cell.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
    },
    /// GRPO groups of HumanEval+-style completions, the reference's outputs computed
    /// (first group of a task) vs cached (later groups).
    Evalplus {
        /// Distinct completions per group, scored at once.
        #[arg(long, default_value_t = 16)]
        group: usize,
        /// Base + plus inputs of each task.
        #[arg(long, default_value_t = 200)]
        inputs: usize,
        /// Tasks (each a cold group, then the warm ones).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Warm groups per task.
        #[arg(long, default_value_t = 3)]
        warm_groups: usize,
    },
    /// Correct references judged time-limit-exceeded under an overloaded `Evaluate`, with the
    /// re-run of false timeouts off and on (two `codegym serve` processes, interleaved).
    FalseTimeouts(crate::false_timeouts::FalseTimeoutsArgs),
    /// Serve the rollout benchmark's fake model (prints `listening on URL`; stops at stdin EOF).
    FakeLlm {
        /// Latency per request, in milliseconds.
        #[arg(long, default_value_t = 50)]
        latency_ms: u64,
        /// A `FakeScript` JSON file (rules matched against prompts) instead of the rollout
        /// benchmark's one answer.
        #[arg(long, value_name = "FILE.json")]
        script: Option<std::path::PathBuf>,
        /// Runtime threads (1: one thread, no cross-thread wake-ups).
        #[arg(long, default_value_t = crate::rollout::FAKE_WORKERS)]
        workers: usize,
    },
}

fn seconds(s: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(s).map_err(|e| anyhow::anyhow!("--seconds {s}: {e}"))
}

pub async fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    let table = match cmd {
        Command::Grpc {
            clients,
            seconds: s,
            addr,
            env,
            batch,
        } => {
            let duration = seconds(s)?;
            crate::grpc::run(crate::grpc::GrpcBenchArgs {
                clients,
                duration,
                addr,
                env,
                batch,
            })
            .await?
        }
        Command::Tools { calls, backend } => crate::tools::run(calls, backend).await?,
        Command::RepoCopies {
            copies,
            rounds,
            tasks,
            image,
            no_podman,
        } => {
            anyhow::ensure!(
                copies > 0 && rounds > 0,
                "--copies and --rounds must be positive"
            );
            crate::repo_copies::run(copies, rounds, tasks, image, !no_podman).await?
        }
        Command::Exec {
            callers,
            seconds: s,
            python,
            backend,
            workloads,
            paths,
        } => {
            let duration = seconds(s)?;
            crate::exec::run(crate::exec::ExecBenchArgs {
                callers,
                duration,
                python,
                backend,
                workloads,
                paths,
            })
            .await?
        }
        Command::Lang {
            callers,
            seconds: s,
            languages,
        } => {
            let duration = seconds(s)?;
            let languages = if languages.is_empty() {
                codegym_sandbox::lang::Language::ALL.to_vec()
            } else {
                languages
                    .iter()
                    .map(|l| codegym_sandbox::lang::Language::parse(l))
                    .collect::<Result<Vec<_>, _>>()?
            };
            crate::lang::run(crate::lang::LangBenchArgs {
                callers,
                duration,
                languages,
            })
            .await?
        }
        Command::Rollout {
            episodes,
            turns,
            latency_ms,
            concurrency,
            memory_episodes,
            fake_server,
            fake_workers,
            env_calls,
        } => {
            let args = crate::rollout::RolloutBenchArgs {
                episodes,
                turns,
                latency: Duration::from_millis(latency_ms),
                concurrency,
                memory_episodes,
                fake_server,
                fake_workers,
                env_calls,
            };
            crate::rollout::run(args).await?
        }
        Command::Pool {
            servers,
            samples,
            turns,
            latency_ms,
            concurrency,
            codegym_bin,
            server_config,
        } => {
            crate::pool::run(crate::pool::PoolBenchArgs {
                servers,
                samples,
                turns,
                latency: Duration::from_millis(latency_ms),
                concurrency,
                codegym_bin,
                server_config,
            })
            .await?
        }
        Command::Http {
            clients,
            seconds: s,
        } => crate::http::run(&clients, seconds(s)?).await?,
        Command::Grpo {
            batch,
            group,
            clients,
            rounds,
            seconds: s,
        } => {
            let args = crate::grpo::GrpoBenchArgs {
                batch,
                group,
                clients,
                rounds,
                duration: seconds(s)?,
            };
            crate::grpo::run(args).await?
        }
        Command::Evalplus {
            group,
            inputs,
            rounds,
            warm_groups,
        } => {
            crate::evalplus::run(crate::evalplus::EvalPlusBenchArgs {
                group,
                inputs,
                rounds,
                warm_groups,
            })
            .await?
        }
        Command::FalseTimeouts(args) => crate::false_timeouts::run(args).await?,
        Command::FakeLlm {
            latency_ms,
            script,
            workers,
        } => {
            crate::rollout::serve_fake_llm(
                Duration::from_millis(latency_ms),
                script.as_deref(),
                workers,
            )
            .await?;
            return Ok(ExitCode::SUCCESS);
        }
    };
    println!("{table}");
    Ok(ExitCode::SUCCESS)
}

/// The sandbox's own (serde) names, so the flag and the config file agree.
fn parse_backend(s: &str) -> Result<codegym_sandbox::Backend, String> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|_| format!("unknown backend `{s}` (expected auto, warm_fork or fresh)"))
}
