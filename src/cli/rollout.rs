//! `codegym rollout`: maps flags (over an optional `--config FILE.json`) onto
//! `rollout::RolloutConfig`, sets up the environment backend, and runs until done or interrupted
//! (SIGINT/SIGTERM stop admission and mark in-flight episodes cancelled; a second signal exits at
//! once).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::ValueEnum;
use rollout::config::{ProgressMode, RolloutConfig, ToolCalls};
use rollout::dataset::record::EpisodeMode;
use rollout::{EnvBackend, backend::RemoteBackend};
use tokio_util::sync::CancellationToken;

use super::rollout_tasks::RolloutTasks;

#[derive(Debug, clap::Args)]
pub struct Args {
    // Boxed: the flags are many, and `Command` should stay small.
    #[command(flatten)]
    flags: Box<Flags>,
}

#[derive(Debug, clap::Args)]
struct Flags {
    /// JSON `RolloutConfig`; flags given on the command line override its fields.
    #[arg(long)]
    config: Option<PathBuf>,
    /// With the environment in process (no --env-server).
    #[command(flatten)]
    isolation: super::isolation::IsolationArg,
    /// Model name, passed through untouched (`org/model:provider`, `org/model:fastest`).
    #[arg(long)]
    model: Option<String>,
    /// OpenAI-compatible base URL (repeat for several endpoints; default: OPENAI_BASE_URL when set,
    /// as in the OpenAI SDK, else the Hugging Face router).
    #[arg(long = "base-url")]
    base_urls: Vec<String>,
    /// Serve this GGUF model with llama.cpp's `llama-server` for the run: on a free loopback port,
    /// one slot per episode in flight (`--concurrency`), stopped when the run ends. Replaces
    /// --base-url; the model name defaults to the file's stem, --concurrency to 4. The server's
    /// output goes to `OUT.llama-server.log` beside the dataset.
    #[arg(long, value_name = "FILE.gguf", conflicts_with = "base_urls")]
    local_model: Option<PathBuf>,
    /// The `llama-server` binary for --local-model (default: `llama-server` on PATH).
    #[arg(long, value_name = "BIN", requires = "local_model")]
    llama_server: Option<PathBuf>,
    /// Environment variable holding the API key, sent to every endpoint (repeatable; first set one
    /// wins). Default: the key follows the endpoint, HF_TOKEN for the Hugging Face router and
    /// OPENAI_API_KEY for any other; no key is ever sent to another endpoint.
    #[arg(long = "api-key-env")]
    api_key_env: Vec<String>,
    /// Task file (native JSONL, HumanEval, MBPP) or `builtin:examples`; with `--env-id
    /// codegym/Repo-v0` a repository task file (with --env-server: in a `--tasks-dir` of every
    /// server, at the same path).
    #[arg(long, default_value = "builtin:examples")]
    tasks: String,
    /// Only these task ids (comma-separated); default: every task in the file.
    #[arg(long, value_delimiter = ',')]
    task_ids: Vec<String>,
    /// Episodes per task (a group).
    #[arg(long)]
    samples: Option<u32>,
    /// Episodes in flight.
    #[arg(long)]
    concurrency: Option<usize>,
    /// Run seed (per-episode seeds derive from it, the task id and the sample index).
    #[arg(long)]
    seed: Option<u64>,
    /// How the model acts.
    #[arg(long, value_enum)]
    mode: Option<ModeArg>,
    /// Environment execution mode: `script` (fresh process per step) or `session` (persistent
    /// interpreter; enables write_file/read_file tools).
    #[arg(long)]
    env_mode: Option<String>,
    /// Environment id.
    #[arg(long)]
    env_id: Option<String>,
    /// Tools mode: `native` function calling, or `structured` (the tools described in the
    /// prompt, each answer one JSON call under `response_format`: models without function calling).
    #[arg(long, value_enum)]
    tool_calls: Option<ToolCallsArg>,
    /// Repository episodes: leave an episode the model ends without `submit` (turns used up, an
    /// answer without a call) unscored, instead of scoring its diff as a submit would.
    #[arg(long)]
    no_auto_submit: bool,
    /// Model calls per episode at most (autocoder mode: runs of the model's tests at most).
    #[arg(long)]
    max_turns: Option<u32>,
    /// Messages kept after the system and task messages when calling the model.
    #[arg(long)]
    max_history_messages: Option<usize>,
    #[arg(long)]
    temperature: Option<f64>,
    #[arg(long)]
    top_p: Option<f64>,
    #[arg(long)]
    max_tokens: Option<u32>,
    /// Stop sequence (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Ask for per-token logprobs.
    #[arg(long)]
    logprobs: bool,
    #[arg(long)]
    top_logprobs: Option<u8>,
    /// Extra JSON object merged into every request body (e.g. '{"return_token_ids": true}').
    #[arg(long)]
    extra_body: Option<String>,
    /// Timeout of one HTTP attempt, seconds.
    #[arg(long)]
    request_timeout: Option<f64>,
    /// Wall-clock limit of one episode, seconds.
    #[arg(long)]
    episode_timeout: Option<f64>,
    /// Retries of one request.
    #[arg(long)]
    max_retries: Option<u32>,
    /// Retries over a whole episode.
    #[arg(long)]
    retry_budget: Option<u32>,
    /// Requests per minute per endpoint.
    #[arg(long)]
    rpm: Option<u32>,
    /// `codegym serve` address (`http://host:port`, repeatable; a name with several addresses is
    /// several servers); default: environments in-process. Sessions go to the least-loaded healthy
    /// server and tasks are sent inline, so the servers need no task files (repository tasks are
    /// not: see --tasks).
    #[arg(long = "env-server")]
    env_servers: Vec<String>,
    /// The JSONL dataset to write (`FILE.manifest.json` and `FILE.summary.json` go beside it).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue an existing dataset: skip finished episodes, re-run errored and cancelled ones.
    #[arg(long)]
    resume: bool,
    /// Progress display.
    #[arg(long, value_enum)]
    progress: Option<ProgressArg>,
    /// Serve Prometheus metrics (episodes, model calls, tokens, env calls) at `http://ADDR/metrics`
    /// while the run lasts; port 0 picks a free port (logged as `metrics listening on ADDR` on stderr).
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Export the run's traces (a span per episode, child spans per model and env call) to this
    /// OTLP/gRPC endpoint, e.g. `http://127.0.0.1:4317`.
    #[arg(long, value_name = "URL", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    #[command(flatten)]
    cross_check: super::cross_check::CrossCheckArgs,
    /// Cross-checks in flight at most, so they cannot starve the episodes' own scoring (default:
    /// one per CPU).
    #[arg(long, value_name = "N")]
    cross_check_concurrency: Option<usize>,
}

impl Args {
    /// The OTLP endpoint traces go to, if any (the subscriber is set up before the command runs).
    pub fn otlp_endpoint(&self) -> Option<&str> {
        self.flags.otlp_endpoint.as_deref()
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ToolCallsArg {
    Native,
    Structured,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ModeArg {
    CodeBlock,
    Tools,
    /// Code runs in session mode with the task's context as `context`, `llm_query`
    /// host tools, ends on `FINAL(answer)` (in-process envs only).
    ProgramOfThought,
    /// Plan, solution, model-written tests, diagnose-and-fix loop.
    Autocoder,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ProgressArg {
    Auto,
    Bar,
    Log,
    Off,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let args = *args.flags;
    let mut config: RolloutConfig = match &args.config {
        Some(path) => codegym::config::load_json(path)?,
        None => RolloutConfig::default(),
    };
    apply_flags(&args, &mut config)?;
    let task_set = RolloutTasks::load(&config.env_id, &args.tasks)?;
    if config.tasks.is_empty() {
        config.tasks = task_set.ids();
    } else if let Some(missing) = config.tasks.iter().find(|t| !task_set.contains(t)) {
        anyhow::bail!("task {missing:?} is not in {}", args.tasks);
    }
    let remote = !config.env_servers.is_empty();
    if let Some(path) = task_set.env_file(&args.tasks, remote) {
        // The env loads the same file.
        config.env_kwargs.insert(
            "tasks".into(),
            serde_json::json!(path.display().to_string()),
        );
    }
    config.validate()?;
    // Dropped (the server killed) when this function returns, however it returns.
    let local_model = match &args.local_model {
        Some(model) => Some(start_local_model(&args, model, &mut config).await?),
        None => None,
    };
    if let Some(addr) = args.metrics_addr {
        let local = super::metrics::install(addr, || {
            rollout::metrics::describe();
            codegym_sandbox::metrics::describe();
        })
        .await?;
        eprintln!("metrics listening on {local}");
    }
    // The scorer of the in-process envs: cross-checks run in their sandbox.
    let (backend, scorer) = if config.env_servers.is_empty() {
        // In process the task file is the user's own: allow its directory.
        let mut coding = env_coding::CodingConfig::default();
        coding.sandbox.min_isolation = args.isolation.level(coding.sandbox.min_isolation);
        if let Some(dir) = config
            .env_kwargs
            .get("tasks")
            .and_then(|t| t.as_str())
            .and_then(|t| std::path::Path::new(t).parent())
        {
            coding.task_dirs.push(dir.to_path_buf());
        }
        // AutoCoder mode: the model's tests need pytest and its own requirements from
        // the package cache; in process the machine is the user's own, as with `serve --packages`.
        // A repository task's requirements (its test runner) come from the package cache too.
        if config.episode.mode == EpisodeMode::Autocoder
            || matches!(task_set, RolloutTasks::Repository(..))
        {
            coding.packages.enabled = true;
        }
        // Probing the sandbox blocks for tens of milliseconds: not on the runtime.
        let (registry, scorer) =
            tokio::task::spawn_blocking(move || codegym::registry_and_scorer(coding))
                .await?
                .context("cannot set up the environments")?;
        (EnvBackend::in_process(Arc::new(registry)), Some(scorer))
    } else {
        let pool = RemoteBackend::connect(&config.env_servers, config.env_pool.clone())
            .await
            .context("cannot set up the env servers")?;
        let pool = task_set
            .remote(pool, &config.tasks, &config.env_id, &config.env_kwargs)
            .await?;
        (EnvBackend::Remote(pool), None)
    };
    let checker = if config.cross_check.is_off() {
        None
    } else {
        // Remote envs score elsewhere; the checks run here, in a sandbox of the defaults.
        let scorer = match scorer {
            Some(scorer) => scorer,
            None => {
                let mut coding = env_coding::CodingConfig::default();
                coding.sandbox.min_isolation = args.isolation.level(coding.sandbox.min_isolation);
                Arc::new(super::scoring::scorer(coding).await?)
            }
        };
        // `validate` refused cross-checks of repository tasks.
        let set = task_set
            .coding()
            .context("cross-checks need coding tasks")?
            .clone();
        Some(super::cross_check::EnvChecker::shared(scorer, set))
    };
    let cancel = CancellationToken::new();
    tokio::spawn(watch_signals(cancel.clone()));
    let summary = rollout::run_checked(config.clone(), backend, checker, cancel).await?;
    drop(local_model);
    println!("{summary}");
    println!("dataset: {}", config.output.out.display());
    Ok(if summary.interrupted {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}

/// --concurrency with --local-model when neither the flag nor the config file set it.
const LOCAL_CONCURRENCY: usize = 4;

/// Starts `llama-server` on `model` for the run and points the config's model at it.
async fn start_local_model(
    args: &Flags,
    model: &std::path::Path,
    config: &mut RolloutConfig,
) -> anyhow::Result<super::local_model::LocalModel> {
    let server = match &args.llama_server {
        Some(bin) => bin.clone(),
        None => super::local_model::find_on_path().context(
            "--local-model needs llama.cpp's llama-server: none on PATH; name one with --llama-server",
        )?,
    };
    let mut log = config.output.out.clone().into_os_string();
    log.push(".llama-server.log");
    if let Some(dir) = config
        .output
        .out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let local =
        super::local_model::LocalModel::start(&server, model, config.concurrency, log.into())
            .await?;
    eprintln!(
        "llama-server (pid {}) serving {} at {} with {} slots",
        local.pid(),
        model.display(),
        local.base_url,
        config.concurrency
    );
    config.model.base_urls = vec![local.base_url.clone()];
    // Every completion token's id (llama.cpp's `__verbose.tokens`, and only that of its debug
    // fields): its logprob entries merge the tokens of a character split over several.
    let extra = &mut config.model.sampling.extra_body;
    for (key, value) in [
        ("return_tokens", serde_json::json!(true)),
        ("verbose", serde_json::json!(true)),
        ("response_fields", serde_json::json!(["tokens"])),
    ] {
        extra.entry(key).or_insert(value);
    }
    Ok(local)
}

fn apply_flags(a: &Flags, c: &mut RolloutConfig) -> anyhow::Result<()> {
    fn set<T: Clone>(dst: &mut T, v: &Option<T>) {
        if let Some(v) = v {
            *dst = v.clone();
        }
    }
    set(&mut c.model.model, &a.model);
    if let Some(file) = a.local_model.as_ref().filter(|_| c.model.model.is_empty()) {
        c.model.model = super::local_model::alias(file);
    }
    if !a.base_urls.is_empty() {
        c.model.base_urls.clone_from(&a.base_urls);
    } else if c.model.base_urls == [rollout::config::DEFAULT_BASE_URL] {
        // As the OpenAI SDK: OPENAI_BASE_URL names the endpoint (whose key is OPENAI_API_KEY).
        if let Some(url) = std::env::var("OPENAI_BASE_URL")
            .ok()
            .filter(|u| !u.trim().is_empty())
        {
            c.model.base_urls = vec![url.trim().to_string()];
        }
    }
    if !a.api_key_env.is_empty() {
        c.model.api_key_env = Some(a.api_key_env.clone());
    }
    if !a.task_ids.is_empty() {
        c.tasks.clone_from(&a.task_ids);
    }
    set(&mut c.samples, &a.samples);
    set(&mut c.concurrency, &a.concurrency);
    if a.local_model.is_some()
        && a.concurrency.is_none()
        && c.concurrency == RolloutConfig::default().concurrency
    {
        // Every slot of a local server holds its own context: 64 of them would not fit a laptop.
        c.concurrency = LOCAL_CONCURRENCY;
    }
    set(&mut c.seed, &a.seed);
    set(&mut c.env_id, &a.env_id);
    if let Some(m) = a.mode {
        c.episode.mode = match m {
            ModeArg::CodeBlock => EpisodeMode::CodeBlock,
            ModeArg::Tools => EpisodeMode::Tools,
            ModeArg::ProgramOfThought => EpisodeMode::ProgramOfThought,
            ModeArg::Autocoder => EpisodeMode::Autocoder,
        };
    }
    if let Some(m) = &a.env_mode {
        c.env_kwargs.insert("mode".into(), serde_json::json!(m));
    }
    if let Some(t) = a.tool_calls {
        c.episode.tool_calls = match t {
            ToolCallsArg::Native => ToolCalls::Native,
            ToolCallsArg::Structured => ToolCalls::Structured,
        };
    }
    if a.no_auto_submit {
        c.episode.auto_submit = false;
    }
    set(&mut c.episode.max_turns, &a.max_turns);
    if a.max_history_messages.is_some() {
        c.episode.max_history_messages = a.max_history_messages;
    }
    let s = &mut c.model.sampling;
    for (dst, v) in [(&mut s.temperature, a.temperature), (&mut s.top_p, a.top_p)] {
        if v.is_some() {
            *dst = v;
        }
    }
    if a.max_tokens.is_some() {
        s.max_tokens = a.max_tokens;
    }
    if !a.stop.is_empty() {
        s.stop = Some(a.stop.clone());
    }
    if a.logprobs {
        s.logprobs = Some(true);
    }
    if a.top_logprobs.is_some() {
        s.top_logprobs = a.top_logprobs;
    }
    if let Some(extra) = &a.extra_body {
        let value: serde_json::Value =
            serde_json::from_str(extra).context("--extra-body is not JSON")?;
        let serde_json::Value::Object(map) = value else {
            anyhow::bail!("--extra-body must be a JSON object");
        };
        s.extra_body.extend(map);
    }
    set(&mut c.model.request_timeout_secs, &a.request_timeout);
    set(&mut c.episode_timeout_secs, &a.episode_timeout);
    set(&mut c.model.max_retries, &a.max_retries);
    set(&mut c.model.episode_retry_budget, &a.retry_budget);
    if a.rpm.is_some() {
        c.model.requests_per_minute = a.rpm;
    }
    if !a.env_servers.is_empty() {
        c.env_servers.clone_from(&a.env_servers);
    }
    if let Some(f) = a.cross_check.fraction()? {
        c.cross_check.fraction = f;
    }
    if let Some(p) = a.cross_check.on_disagreement {
        c.cross_check.on_disagreement = p.into();
    }
    set(&mut c.cross_check.concurrency, &a.cross_check_concurrency);
    set(&mut c.output.out, &a.out);
    if a.resume {
        c.output.resume = true;
    }
    if let Some(p) = a.progress {
        c.output.progress = match p {
            ProgressArg::Auto => ProgressMode::Auto,
            ProgressArg::Bar => ProgressMode::Bar,
            ProgressArg::Log => ProgressMode::Log,
            ProgressArg::Off => ProgressMode::Off,
        };
    }
    Ok(())
}

/// First SIGINT/SIGTERM: graceful stop. Second: exit immediately (the dataset stays consistent:
/// resume repairs a torn last line).
async fn watch_signals(cancel: CancellationToken) {
    let mut signals = match super::signal::ShutdownSignals::install() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot install signal handlers");
            return;
        }
    };
    signals.next().await;
    eprintln!("interrupted: finishing up (signal again to exit at once)");
    cancel.cancel();
    signals.next().await;
    std::process::exit(130);
}
