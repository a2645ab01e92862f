//! `RolloutConfig`: everything a rollout run needs, as one serde document (`--config FILE.json`);
//! the CLI maps its flags onto it. Secrets are never part of it: only the *name* of the environment
//! variable holding the API key is, so the config can be written into the dataset's manifest as is.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::backend::pool::EnvPoolConfig;
use crate::dataset::record::{EpisodeMode, SamplingParams};

/// Default OpenAI-compatible endpoint: the Hugging Face router.
pub const DEFAULT_BASE_URL: &str = "https://router.huggingface.co/v1";

/// A whole rollout run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutConfig {
    /// Environment id (`codegym/Python-v0`).
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
}

impl Default for RolloutConfig {
    fn default() -> Self {
        RolloutConfig {
            env_id: "codegym/Python-v0".to_string(),
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
        }
    }
}

/// The environment variable holding the API key of an endpoint, when `api_key_env` is not set:
/// `HF_TOKEN` for the Hugging Face router (`huggingface.co`, `hf.co` and their subdomains),
/// `OPENAI_API_KEY` for every other endpoint (the OpenAI SDK's variable).
pub fn default_key_env(base_url: &str) -> &'static str {
    let host = url_host(base_url);
    let hugging_face = ["huggingface.co", "hf.co"]
        .iter()
        .any(|d| host == *d || host.ends_with(&format!(".{d}")));
    if hugging_face {
        "HF_TOKEN"
    } else {
        "OPENAI_API_KEY"
    }
}

/// The lower-cased host of a URL as the HTTP client parses it, i.e. the host it connects to
/// (empty when it has none or does not parse).
fn url_host(url: &str) -> String {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| {
            u.host_str()
                .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
        })
        .unwrap_or_default()
}

/// The policy: which model, where, how to sample and how to survive faults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// Model name, passed through untouched (`org/model:provider`, `org/model:fastest`).
    pub model: String,
    /// Base URLs of OpenAI-compatible endpoints (ending in `/v1`). Several are used round-robin,
    /// with each episode (and where possible its group) pinned to one.
    pub base_urls: Vec<String>,
    /// Environment variables to read the API key from, first set one wins, sent to every endpoint.
    /// Empty list: no key. `None` (the default): the key follows the endpoint
    /// ([`default_key_env`]): `HF_TOKEN` only to the Hugging Face router, `OPENAI_API_KEY` only to
    /// other endpoints, so that no key is ever sent to a host it was not made for.
    pub api_key_env: Option<Vec<String>>,
    pub sampling: SamplingParams,
    /// Timeout of one HTTP attempt, in seconds.
    pub request_timeout_secs: f64,
    /// TCP connect timeout, in seconds.
    pub connect_timeout_secs: f64,
    /// Retries of one request (attempts = 1 + this).
    pub max_retries: u32,
    /// Retries allowed over a whole episode, across its requests.
    pub episode_retry_budget: u32,
    /// First backoff step, in milliseconds; doubled per attempt, full jitter.
    pub backoff_initial_ms: u64,
    /// Backoff cap, in milliseconds (also the cap on a server's `retry-after`).
    pub backoff_max_ms: u64,
    /// Requests per minute per endpoint; `None` for no limit.
    pub requests_per_minute: Option<u32>,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            model: String::new(),
            base_urls: vec![DEFAULT_BASE_URL.to_string()],
            api_key_env: None,
            sampling: SamplingParams::default(),
            request_timeout_secs: 600.0,
            connect_timeout_secs: 10.0,
            max_retries: 5,
            episode_retry_budget: 20,
            backoff_initial_ms: 500,
            backoff_max_ms: 60_000,
            requests_per_minute: None,
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
            prompts: Prompts::default(),
            autocoder: AutoCoderConfig::default(),
        }
    }
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

/// Prompt templates. Placeholders in braces are replaced: `{prompt}` (the task's observation text),
/// in the task template also `{data_context}` (issue 13: the summary of a data task's CSV/JSON files
/// from `reset`'s info, empty for other tasks), and in feedback `{exit_code}`, `{stdout}`, `{stderr}`, `{status}`, `{reward}`.
/// Issue 14: `{language}` in the code-block system prompt and feedback is the episode's language
/// (SandboxFusion's name from `reset`'s info, e.g. `cpp`; `python` when the env names none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Prompts {
    /// System prompt of code-block mode.
    pub system: String,
    /// System prompt of tools mode.
    pub tools_system: String,
    /// System prompt of AutoCoder mode (issue 13; the stage instructions follow it).
    pub autocoder_system: String,
    /// First user message.
    pub task: String,
    /// User message after each execution in code-block mode (tools mode answers with tool
    /// messages holding the same fields).
    pub feedback: String,
    /// Issue 12: system prompt of program-of-thought mode.
    pub pot_system: String,
}

impl Default for Prompts {
    fn default() -> Self {
        Prompts {
            system:
                "You are an expert programmer. Solve the task in {language}. Put your complete \
                     solution in a single ```{language} fenced code block; it is executed and \
                     checked. If it fails you will see the output and may try again."
                    .to_string(),
            tools_system: "You are an expert programmer. Solve the task in {language} using the \
                           tools: the run tool executes your complete program and checks it. When \
                           the checks pass, or you are done, answer without calling a tool."
                .to_string(),
            autocoder_system:
                "You are an expert Python programmer. You solve the task in stages: a \
                               plan, a solution, then pytest tests for it; failing tests are \
                               diagnosed and fixed. Answer every stage with one JSON object in the \
                               requested shape."
                    .to_string(),
            task: "{prompt}".to_string(),
            feedback: "Your code was executed: {status}.\nexit code: {exit_code}\n\nstdout:\n\
                       {stdout}\n\nstderr:\n{stderr}\n\nFix the problem and answer with the \
                       complete corrected program in one ```{language} block."
                .to_string(),
            // Issue 12: program-of-thought mode.
            pot_system: crate::episode::pot::SYSTEM_PROMPT.to_string(),
        }
    }
}

impl Prompts {
    /// The opening of every episode: the system prompt of `mode` and the first user message, the
    /// task template rendered over the task's prompt. `ListTasks` sends the same opening, so that
    /// trainers prompt the model exactly as rollouts do.
    pub fn opening(&self, mode: EpisodeMode, task_prompt: &str) -> (String, String) {
        self.opening_with_data(mode, task_prompt, "")
    }

    /// [`Prompts::opening`] with a data task's context for `{data_context}` (issue 13).
    pub fn opening_with_data(
        &self,
        mode: EpisodeMode,
        task_prompt: &str,
        data_context: &str,
    ) -> (String, String) {
        self.opening_in(mode, task_prompt, data_context, "python")
    }

    /// Issue 14: [`Prompts::opening_with_data`] for an episode in `language` (`{language}`).
    pub fn opening_in(
        &self,
        mode: EpisodeMode,
        task_prompt: &str,
        data_context: &str,
        language: &str,
    ) -> (String, String) {
        let system = match mode {
            EpisodeMode::CodeBlock => &self.system,
            EpisodeMode::Tools => &self.tools_system,
            // Issue 12.
            EpisodeMode::ProgramOfThought => &self.pot_system,
            EpisodeMode::Autocoder => &self.autocoder_system,
        };
        (
            crate::episode::format::render(system, &[("language", language)]),
            crate::episode::format::render(
                &self.task,
                &[("prompt", task_prompt), ("data_context", data_context)],
            ),
        )
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
        if self.model.requests_per_minute == Some(0) {
            return bad("requests_per_minute must be at least 1");
        }
        self.env_pool.validate().map_err(ConfigError)?;
        if self.output.out.as_os_str().is_empty() {
            return bad("no output file");
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

#[cfg(test)]
mod data_context_tests {
    // Issue 13: `{data_context}` in the task template.
    use super::*;

    #[test]
    fn task_template_can_include_the_data_context() {
        let prompts = Prompts {
            task: "{prompt}\n\nData:\n{data_context}".into(),
            ..Prompts::default()
        };
        let (_, user) = prompts.opening_with_data(
            EpisodeMode::CodeBlock,
            "Sum it.",
            "File a.csv: 2 rows, 1 columns",
        );
        assert_eq!(user, "Sum it.\n\nData:\nFile a.csv: 2 rows, 1 columns");
        let (_, plain) = Prompts::default().opening(EpisodeMode::CodeBlock, "Sum it.");
        assert_eq!(plain, "Sum it.");
    }
}
