//! The policy: an OpenAI-compatible `/v1/chat/completions` client over reqwest (rustls) with
//! retries, per-endpoint rate limits and several endpoints.
//!
//! The API key is read once from the environment and only ever placed in the `Authorization`
//! header: it is not logged, not part of any record, and never reaches environments.

mod limiter;
pub mod model;
pub mod response;
pub mod retry;

use std::time::{Duration, Instant};

pub use model::{ModelConfig, default_key_env};
pub use response::Completion;
use trajectory::record::{AttemptError, ChatMessage, ErrorKind, ErrorRecord, ModelCall};

/// Response bodies kept in error messages are cut to this many bytes.
const ERROR_BODY_CHARS: usize = 500;

/// A client that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid base URL {0:?}")]
    BaseUrl(String),
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
}

/// An API key; its `Debug` never shows it.
#[derive(Clone)]
struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// One chat request: the conversation, optional tools and the sampling seed.
#[derive(Debug, Clone, Copy)]
pub struct ChatRequest<'a> {
    pub messages: &'a [ChatMessage],
    /// OpenAI tool definitions (`[{"type":"function","function":{...}}]`).
    pub tools: Option<&'a serde_json::Value>,
    pub seed: Option<u64>,
    /// OpenAI `response_format` (AutoCoder's `{"type": "json_schema", ...}`).
    pub response_format: Option<&'a serde_json::Value>,
}

/// The outcome of one call: the record of what happened and, on success, the completion.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    pub call: ModelCall,
    pub completion: Option<Completion>,
}

/// The chat completions client shared by every episode of a run.
#[derive(Debug)]
pub struct ChatClient {
    http: reqwest::Client,
    endpoints: Vec<Endpoint>,
    config: ModelConfig,
}

#[derive(Debug)]
struct Endpoint {
    base_url: String,
    /// The key sent to this endpoint, and only to it.
    key: Option<Secret>,
    completions_url: reqwest::Url,
    limiter: Option<limiter::RateLimiter>,
}

impl ChatClient {
    /// Builds the client; each endpoint's API key comes from the process environment (see
    /// [`ModelConfig::api_key_env`]).
    pub fn new(config: &ModelConfig) -> Result<Self, ClientError> {
        Self::with_env(config, |name| std::env::var(name).ok())
    }

    /// [`ChatClient::new`] reading variables through `env` instead of the process environment.
    pub fn with_env(
        config: &ModelConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ClientError> {
        let key_for = |base: &str| -> Option<Secret> {
            let names: Vec<String> = match &config.api_key_env {
                Some(names) => names.clone(),
                None => vec![default_key_env(base).to_string()],
            };
            names
                .iter()
                .find_map(|name| env(name).filter(|v| !v.trim().is_empty()))
                .map(|v| Secret(v.trim().to_string()))
        };
        let endpoints = config
            .base_urls
            .iter()
            .map(|base| {
                let trimmed = base.trim_end_matches('/');
                let url = reqwest::Url::parse(&format!("{trimmed}/chat/completions"))
                    .map_err(|_| ClientError::BaseUrl(base.clone()))?;
                // Records name the endpoint; credentials embedded in the URL must not go with it.
                let mut shown =
                    reqwest::Url::parse(trimmed).map_err(|_| ClientError::BaseUrl(base.clone()))?;
                let _ = shown.set_username("");
                let _ = shown.set_password(None);
                Ok(Endpoint {
                    base_url: shown.as_str().trim_end_matches('/').to_string(),
                    key: key_for(trimmed),
                    completions_url: url,
                    limiter: config
                        .requests_per_minute
                        .map(limiter::RateLimiter::per_minute),
                })
            })
            .collect::<Result<Vec<_>, ClientError>>()?;
        if endpoints.is_empty() {
            return Err(ClientError::BaseUrl(String::new()));
        }
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs_f64(config.connect_timeout_secs));
        if endpoints
            .iter()
            .all(|e| e.completions_url.scheme() == "http")
        {
            // Local servers (vLLM, SGLang) speak plain HTTP; loading the system's root
            // certificates for them cost 3-5 ms at the start of every run.
            builder = builder.tls_certs_only([]);
        }
        let http = builder
            .build()
            .map_err(|e| ClientError::Http(e.to_string()))?;
        Ok(ChatClient {
            http,
            endpoints,
            config: config.clone(),
        })
    }

    /// Number of endpoints.
    pub fn endpoint_count(&self) -> usize {
        self.endpoints.len()
    }

    /// Base URL of endpoint `i` (modulo the count).
    pub fn endpoint_url(&self, i: usize) -> &str {
        &self.endpoints[i % self.endpoints.len()].base_url
    }

    /// Whether an API key was found for every endpoint.
    pub fn has_api_key(&self) -> bool {
        self.endpoints.iter().all(|e| e.key.is_some())
    }

    /// The JSON body of a request: model, messages, sampling params, tools, then extra fields (which
    /// replace a standard field of the same name). Serialized once per call straight from the
    /// borrowed conversation, and reused by every retry.
    pub fn request_body(&self, req: &ChatRequest<'_>) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(&RequestBody { client: self, req })
    }

    /// Sends one request to endpoint `endpoint`, retrying per the SDK convention while
    /// `retry_budget` (the episode's remaining retries) lasts. One `model_call` span and one
    /// count in the model-call metrics per call, retries included.
    #[tracing::instrument(
        name = "model_call",
        level = "debug",
        skip_all,
        fields(endpoint, attempts = tracing::field::Empty, outcome = tracing::field::Empty)
    )]
    pub async fn chat(
        &self,
        endpoint: usize,
        req: &ChatRequest<'_>,
        retry_budget: &mut u32,
    ) -> CallOutcome {
        let out = self.chat_with_retries(endpoint, req, retry_budget).await;
        crate::metrics::model_call(&out.call);
        let span = tracing::Span::current();
        span.record("attempts", out.call.attempts);
        span.record(
            "outcome",
            out.call.error.as_ref().map_or("ok", |e| e.kind.as_str()),
        );
        out
    }

    async fn chat_with_retries(
        &self,
        endpoint: usize,
        req: &ChatRequest<'_>,
        retry_budget: &mut u32,
    ) -> CallOutcome {
        let ep = &self.endpoints[endpoint % self.endpoints.len()];
        let start = Instant::now();
        let cap = Duration::from_millis(self.config.backoff_max_ms);
        let initial = Duration::from_millis(self.config.backoff_initial_ms);
        let mut call = ModelCall {
            latency_ms: 0,
            attempts: 0,
            request_seed: req.seed,
            finish_reason: None,
            usage: None,
            served_model: None,
            retries: Vec::new(),
            error: None,
            tokens: None,
        };
        let body = match self.request_body(req) {
            Ok(body) => bytes::Bytes::from(body),
            Err(e) => {
                call.error = Some(ErrorRecord {
                    kind: ErrorKind::BadRequest,
                    status: None,
                    message: format!("cannot encode the request: {e}"),
                });
                return CallOutcome {
                    call,
                    completion: None,
                };
            }
        };
        loop {
            call.attempts += 1;
            if let Some(l) = &ep.limiter {
                l.acquire().await;
            }
            let failure = match self.attempt(ep, &body).await {
                Ok(completion) => {
                    call.finish_reason = completion.finish_reason.clone();
                    call.usage = completion.usage;
                    call.served_model = completion.served_model.clone();
                    call.tokens = completion.tokens.clone();
                    call.latency_ms = millis(start.elapsed());
                    return CallOutcome {
                        call,
                        completion: Some(completion),
                    };
                }
                Err(f) => f,
            };
            let retry = failure
                .should_retry
                .unwrap_or_else(|| retry::is_retryable(failure.error.kind));
            let out_of_attempts = call.attempts > self.config.max_retries;
            if !retry || out_of_attempts || *retry_budget == 0 {
                let mut error = failure.error;
                if retry && !out_of_attempts {
                    error.message = format!(
                        "episode retry budget used up; last error: {}",
                        error.message
                    );
                    error.kind = ErrorKind::RetryBudgetExhausted;
                }
                tracing::debug!(kind = error.kind.as_str(), status = ?error.status, "model call failed");
                call.error = Some(error);
                call.latency_ms = millis(start.elapsed());
                return CallOutcome {
                    call,
                    completion: None,
                };
            }
            *retry_budget -= 1;
            let (delay, server_delay) = match failure.server_delay {
                Some(d) => (d, true),
                None => (retry::backoff(call.attempts, initial, cap), false),
            };
            tracing::debug!(
                kind = failure.error.kind.as_str(),
                attempt = call.attempts,
                delay_ms = millis(delay),
                "retrying model call"
            );
            call.retries.push(AttemptError {
                attempt: call.attempts,
                kind: failure.error.kind,
                status: failure.error.status,
                message: failure.error.message,
                backoff_ms: millis(delay),
                server_delay,
            });
            tokio::time::sleep(delay).await;
        }
    }

    async fn attempt(&self, ep: &Endpoint, body: &bytes::Bytes) -> Result<Completion, Failure> {
        let mut request = self
            .http
            .post(ep.completions_url.clone())
            .timeout(Duration::from_secs_f64(self.config.request_timeout_secs))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.clone()); // a shared buffer: retries do not copy it
        if let Some(key) = &ep.key {
            request = request.bearer_auth(&key.0);
        }
        let response = request.send().await.map_err(Failure::transport)?;
        let status = response.status();
        // Retry headers matter only for failures: no copy on the common path.
        let headers = (!status.is_success()).then(|| response.headers().clone());
        let text = response.text().await.map_err(Failure::transport)?;
        if status.is_success() {
            return response::parse_completion(&text).map_err(|(kind, message)| Failure {
                error: ErrorRecord {
                    kind,
                    status: Some(status.as_u16()),
                    message,
                },
                // A 2xx that is not a completion is recorded, not retried: the server answered.
                should_retry: Some(false),
                server_delay: None,
            });
        }
        let cap = Duration::from_millis(self.config.backoff_max_ms);
        Err(Failure {
            error: ErrorRecord {
                kind: retry::classify_status(status, &text),
                status: Some(status.as_u16()),
                message: format!("HTTP {status}: {}", cut(&text, ERROR_BODY_CHARS)),
            },
            should_retry: headers.as_ref().and_then(retry::should_retry_header),
            server_delay: headers.as_ref().and_then(|h| retry::server_delay(h, cap)),
        })
    }
}

/// A failed attempt.
struct Failure {
    error: ErrorRecord,
    /// `x-should-retry` or a decision made while classifying; `None`: decide by kind.
    should_retry: Option<bool>,
    server_delay: Option<Duration>,
}

impl Failure {
    fn transport(e: reqwest::Error) -> Self {
        let kind = if e.is_timeout() {
            ErrorKind::RequestTimeout
        } else {
            ErrorKind::Connect
        };
        // Without the URL: it is ours, and keeping messages short keeps records small.
        let message = format!("{}", e.without_url());
        Failure {
            error: ErrorRecord {
                kind,
                status: None,
                message,
            },
            should_retry: None,
            server_delay: None,
        }
    }
}

/// A duration in whole milliseconds, as records keep them (saturating).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The first `max` bytes of `s`, cut at a character boundary.
pub(crate) fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The request body, serialized straight from borrowed data (no intermediate `serde_json::Value`).
struct RequestBody<'a> {
    client: &'a ChatClient,
    req: &'a ChatRequest<'a>,
}

impl serde::Serialize for RequestBody<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let config = &self.client.config;
        let s = &config.sampling;
        let extra = &s.extra_body;
        let mut map = serializer.serialize_map(None)?;
        macro_rules! put {
            ($key:literal, $value:expr) => {
                if !extra.contains_key($key) {
                    map.serialize_entry($key, $value)?;
                }
            };
        }
        put!("model", &config.model);
        put!("messages", self.req.messages);
        if let Some(v) = &s.temperature {
            put!("temperature", v);
        }
        if let Some(v) = &s.top_p {
            put!("top_p", v);
        }
        if let Some(v) = &s.max_tokens {
            put!("max_tokens", v);
        }
        if let Some(v) = &s.stop {
            put!("stop", v);
        }
        if let Some(v) = &s.logprobs {
            put!("logprobs", v);
        }
        if let Some(v) = &s.top_logprobs {
            put!("top_logprobs", v);
        }
        if let Some(seed) = &self.req.seed {
            put!("seed", seed);
        }
        if let Some(tools) = self.req.tools {
            put!("tools", tools);
        }
        if let Some(format) = self.req.response_format {
            put!("response_format", format);
        }
        for (k, v) in extra {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trajectory::record::Role;

    #[test]
    fn request_body_carries_everything_once_and_extra_fields_win() {
        let mut config = ModelConfig {
            model: "org/model:fastest".into(),
            base_urls: vec!["http://127.0.0.1:9/v1".into()],
            api_key_env: Some(Vec::new()),
            ..ModelConfig::default()
        };
        config.sampling.temperature = Some(0.5);
        config.sampling.max_tokens = Some(64);
        config.sampling.extra_body = serde_json::json!({"temperature": 0.9, "top_k": 5})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let client = ChatClient::new(&config).expect("client");
        let messages = [
            ChatMessage::text(Role::System, "be brief"),
            ChatMessage::text(Role::User, "say \"hi\"\n"),
        ];
        let tools = serde_json::json!([{"type": "function", "function": {"name": "run_python"}}]);
        let req = ChatRequest {
            messages: &messages,
            tools: Some(&tools),
            seed: Some(7),
            response_format: None,
        };
        let bytes = client.request_body(&req).expect("encode");
        let text = String::from_utf8(bytes.clone()).expect("utf-8");
        assert_eq!(text.matches("\"temperature\"").count(), 1, "{text}");
        let body: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(body["model"], "org/model:fastest");
        assert_eq!(body["temperature"], 0.9);
        assert_eq!(body["top_k"], 5);
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["seed"], 7);
        assert_eq!(body["tools"], tools);
        assert_eq!(
            body["messages"],
            serde_json::to_value(messages).expect("messages")
        );
        assert!(body.get("top_p").is_none(), "unset params are not sent");
    }
}
