//! `RolloutConfig`: everything a rollout run needs, as one serde document (`--config FILE.json`);
//! the CLI maps its flags onto it. Secrets are never part of it: only the *name* of the environment
//! variable holding the API key is, so the config can be written into the dataset's manifest as is.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use env_core::contract::repo::REPO_ENV_ID;
use trajectory::record::{EpisodeMode, OnDisagreement};

use crate::backend::pool::EnvPoolConfig;
// The client owns what it needs (it must not import this module back); a run's config holds it.
pub use crate::client::model::{DEFAULT_BASE_URL, ModelConfig, default_key_env};
// The templates live below both the engine and the env server (which sends the same openings).
pub use prompts::Prompts;

/// A whole rollout run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutConfig {
    /// Environment id (`codegym/Code-v0`).
    pub env_id: String,
    /// Kwargs of `make` (e.g. `{"mode": "session"}`).
    pub env_kwargs: serde_json::Map<String, serde_json::Value>,
    /// Task ids to run; empty means every task the caller resolved from its task set.
    pub tasks: Vec<String>,
    /// Episodes per task (a group).
    pub samples: u32,
    /// Episodes in flight at once.
    pub concurrency: usize,
    /// Run seed; per-episode seeds derive from it, the task id and the sample index.
    pub seed: u64,
    /// Wall-clock limit of one episode, in seconds (model calls and env steps included).
    pub episode_timeout_secs: f64,
    pub model: ModelConfig,
    pub episode: EpisodeConfig,
    /// gRPC addresses of `codegym serve` instances (`http://host:port`; a name with several
    /// addresses is several servers); empty runs environments in-process.
    pub env_servers: Vec<String>,
    /// How the env servers are health-checked, chosen and retried.
    pub env_pool: EnvPoolConfig,
    pub output: OutputConfig,
    /// Cross-checks of rewarded programs against the tasks' references (off by default).
    #[serde(skip_serializing_if = "CrossCheckConfig::is_off")]
    pub cross_check: CrossCheckConfig,
}

impl Default for RolloutConfig {
    fn default() -> Self {
        RolloutConfig {
            env_id: "codegym/Code-v0".to_string(),
            env_kwargs: serde_json::Map::new(),
            tasks: Vec::new(),
            samples: 1,
            concurrency: 64,
            seed: 0,
            episode_timeout_secs: 600.0,
            model: ModelConfig::default(),
            episode: EpisodeConfig::default(),
            env_servers: Vec::new(),
            env_pool: EnvPoolConfig::default(),
            output: OutputConfig::default(),
            cross_check: CrossCheckConfig::default(),
        }
    }
}

/// How one episode is played.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EpisodeConfig {
    pub mode: EpisodeMode,
    /// Model calls per episode at most.
    pub max_turns: u32,
    /// Keep at most this many messages after the system and task messages when calling the model
    /// (the record always keeps the full conversation). `None`: no cap.
    pub max_history_messages: Option<usize>,
    /// Characters of stdout and of stderr shown to the model in feedback (head and tail kept).
    pub feedback_max_chars: usize,
    /// How tools mode asks for tool calls: the endpoint's function calling, or a JSON answer
    /// constrained by `response_format` (models without function calling).
    pub tool_calls: ToolCalls,
    /// A repository episode that ends without the model's `submit` (its turns used up, an answer
    /// without a call, the model's context full) is submitted by the engine: its diff is scored
    /// like a submit, so every such episode has a reward (`repository.auto_submitted` says so).
    pub auto_submit: bool,
    pub prompts: Prompts,
    /// AutoCoder mode (issue 13).
    pub autocoder: AutoCoderConfig,
}

impl Default for EpisodeConfig {
    fn default() -> Self {
        EpisodeConfig {
            mode: EpisodeMode::CodeBlock,
            max_turns: 3,
            max_history_messages: None,
            feedback_max_chars: 2_000,
            tool_calls: ToolCalls::Native,
            auto_submit: true,
            prompts: Prompts::default(),
            autocoder: AutoCoderConfig::default(),
        }
    }
}

/// How tools mode gets the model's calls (`episode::structured_tools`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCalls {
    /// OpenAI function calling: the request's `tools`, the answer's `tool_calls`.
    #[default]
    Native,
    /// The tools described in the task's message, one call per answer as JSON under
    /// `response_format` (a schema an endpoint can enforce), results as user messages.
    Structured,
}

/// AutoCoder mode (issue 13, `episode::autocoder`). There `max_turns` bounds the runs of the
/// model's tests (each run after the first follows a diagnosis and a fix).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AutoCoderConfig {
    /// Requirements added to every run of the model's tests, resolved by the env server's package
    /// cache (pinned: the cache is keyed by the exact strings). Empty: the sandbox interpreter's own
    /// pytest is used.
    pub test_requirements: Vec<String>,
    /// Ask for `response_format: json_schema` first (endpoints that refuse it get fenced JSON).
    pub structured_outputs: bool,
}

impl Default for AutoCoderConfig {
    fn default() -> Self {
        AutoCoderConfig {
            test_requirements: vec!["pytest==8.3.5".to_string()],
            structured_outputs: true,
        }
    }
}

/// Cross-checks of rewarded programs (`crate::cross_check`): a fraction of the env steps that
/// earned a reward have their program compared with the task's reference on inputs derived from
/// the task's tests, and the outcome recorded on the step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CrossCheckConfig {
    /// Fraction of rewarded steps checked, 0 to 1 (0: none), sampled by a stable hash of the
    /// episode's seed and the step's index.
    pub fraction: f64,
    /// What a disagreement does: `keep` (recorded only), `flag` (the episode no longer counts as
    /// solved), `zero` (the step's reward becomes 0).
    pub on_disagreement: OnDisagreement,
    /// Checks in flight at most (0: one per CPU).
    pub concurrency: usize,
}

impl CrossCheckConfig {
    /// Whether no step is checked.
    pub fn is_off(&self) -> bool {
        self.fraction <= 0.0
    }

    /// Checks in flight at most.
    pub fn in_flight(&self) -> usize {
        match self.concurrency {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}

/// Where the dataset goes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputConfig {
    /// The JSONL dataset; `FILE.manifest.json` and `FILE.summary.json` are written beside it.
    pub out: PathBuf,
    /// Continue an existing dataset: skip finished episodes, re-run errored and cancelled ones.
    pub resume: bool,
    /// Console output.
    pub progress: ProgressMode,
    /// Interval of log lines in `log` progress mode, in seconds (0 means 10).
    pub log_interval_secs: f64,
}

/// How progress is shown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgressMode {
    /// A progress bar when stderr is a terminal, log lines otherwise.
    #[default]
    Auto,
    Bar,
    Log,
    Off,
}

/// A config that cannot run.
#[derive(Debug, thiserror::Error)]
#[error("invalid rollout config: {0}")]
pub struct ConfigError(pub String);

impl RolloutConfig {
    /// Checks values that serde accepts but the run cannot use.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError(m.to_string()));
        if self.model.model.trim().is_empty() {
            return bad("model name is empty");
        }
        if self.model.base_urls.is_empty() {
            return bad("no base URL");
        }
        if self.samples == 0 {
            return bad("samples must be at least 1");
        }
        if self.concurrency == 0 {
            return bad("concurrency must be at least 1");
        }
        if self.episode.max_turns == 0 {
            return bad("max_turns must be at least 1");
        }
        for (name, v) in [
            ("episode_timeout_secs", self.episode_timeout_secs),
            ("request_timeout_secs", self.model.request_timeout_secs),
            ("connect_timeout_secs", self.model.connect_timeout_secs),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(ConfigError(format!("{name} must be a positive number")));
            }
        }
        let f = self.cross_check.fraction;
        if !(f.is_finite() && (0.0..=1.0).contains(&f)) {
            return bad("cross_check.fraction must be between 0 and 1");
        }
        if self.model.requests_per_minute == Some(0) {
            return bad("requests_per_minute must be at least 1");
        }
        self.env_pool.validate().map_err(ConfigError)?;
        if self.output.out.as_os_str().is_empty() {
            return bad("no output file");
        }
        // The repository env's actions are its tool calls, and its answer is a diff: no code
        // block to extract, no program to cross-check against a reference.
        if self.env_id == REPO_ENV_ID {
            if self.episode.mode != EpisodeMode::Tools {
                return Err(ConfigError(format!(
                    "{REPO_ENV_ID} is played in tools mode (--mode tools): its actions are tool \
                     calls, not {} answers",
                    serde_json::to_value(self.episode.mode)
                        .ok()
                        .and_then(|m| m.as_str().map(str::to_string))
                        .unwrap_or_default()
                )));
            }
            // Its only kwarg is the task file (the caller's `tasks`): a coding env's `mode`
            // (--env-mode) would fail every episode's make instead of the run.
            if let Some(k) = self.env_kwargs.keys().find(|k| *k != "tasks") {
                return Err(ConfigError(format!(
                    "{REPO_ENV_ID} takes no env kwarg {k:?} (--env-mode is the coding envs'): its \
                     only kwarg is the repository task file (--tasks)"
                )));
            }
            if !self.cross_check.is_off() {
                return Err(ConfigError(format!(
                    "{REPO_ENV_ID} has no cross-check (--cross-check): a repository answer is a \
                     diff scored by the task's hidden tests, with no reference program to compare"
                )));
            }
        }
        // Issue 12: the engine serves host tools only to the envs it makes in process.
        if self.episode.mode == EpisodeMode::ProgramOfThought && !self.env_servers.is_empty() {
            return bad(
                "program-of-thought mode needs the engine's host tools, which it serves only to \
                 in-process envs: run without env servers (--env-server)",
            );
        }
        Ok(())
    }
}
