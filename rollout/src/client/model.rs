//! The policy's settings ([`ModelConfig`]): which model, at which endpoints, how it is sampled and
//! how its requests survive faults. It lives with the client that reads it; the run's config
//! ([`crate::config::RolloutConfig`]) holds one.

use serde::{Deserialize, Serialize};
use trajectory::record::SamplingParams;

/// Default OpenAI-compatible endpoint: the Hugging Face router.
pub const DEFAULT_BASE_URL: &str = "https://router.huggingface.co/v1";

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
