//! Host tools the rollout engine serves itself (issue 12): it owns its in-process sessions, so the
//! programs they run can call back into the engine. `llm_query(prompt)` and
//! `llm_query_batched(prompts)` are answered by the policy's own endpoint through the run's
//! [`ChatClient`] (its retries and rate limiter), and every sub-call is logged so the episode can
//! record it under the turn that made it; `FINAL(answer)` records the program's final answer.
//!
//! Only the in-process backend can serve them: the tool handler is a task-local that
//! `host_tool_calls::with_handler` sets around `make`. A remote `codegym serve` would
//! forward the calls over its `Session` stream, which the remote backend does not answer yet, so
//! [`make_with_tools`] refuses it with a clear error.

use std::sync::{Arc, Mutex};

use env_core::{EnvError, Kwargs};
use futures::FutureExt;
use host_tool_calls::{HostToolCall, ToolHandler};
use serde_json::{Value, json};

use crate::backend::{EnvBackend, EnvSession};
use crate::client::{ChatClient, ChatRequest};
use trajectory::record::{ChatMessage, ModelCall, Role, SubCallRecord};

/// Most prompts one `llm_query_batched` call may carry.
pub const MAX_BATCH: usize = 32;

/// The engine's tools, as the coding env's `tools` kwarg declares them.
pub fn declarations() -> Value {
    json!([
        {"name": "llm_query",
         "description": "Ask the language model a question; returns its answer as a string.",
         "parameters": {"type": "object", "properties": {"prompt": {"type": "string"}},
                        "required": ["prompt"]}},
        {"name": "llm_query_batched",
         "description": "Ask several questions at once; returns the answers in order.",
         "parameters": {"type": "object",
                        "properties": {"prompts": {"type": "array", "items": {"type": "string"}}},
                        "required": ["prompts"]}},
        {"name": "FINAL",
         "description": "Give the final answer; the episode ends after this cell.",
         "parameters": {"type": "object", "properties": {"answer": {}}, "required": ["answer"]}}
    ])
}

/// What the tools of one episode share with the episode: the sub-call log, the final answer and
/// the retry budget of the sub-calls.
#[derive(Debug, Clone)]
pub struct PolicyTools {
    client: Arc<ChatClient>,
    endpoint: usize,
    shared: Arc<Mutex<Shared>>,
}

#[derive(Debug, Default)]
struct Shared {
    calls: Vec<SubCallRecord>,
    final_answer: Option<Value>,
    retry_budget: u32,
}

impl PolicyTools {
    /// Tools answered by endpoint `endpoint` of `client`; the sub-calls together may retry
    /// `retry_budget` times.
    pub fn new(client: Arc<ChatClient>, endpoint: usize, retry_budget: u32) -> Self {
        PolicyTools {
            client,
            endpoint,
            shared: Arc::new(Mutex::new(Shared {
                retry_budget,
                ..Shared::default()
            })),
        }
    }

    /// The handler to make the env with.
    pub fn handler(&self) -> ToolHandler {
        let this = self.clone();
        Arc::new(move |call: HostToolCall| {
            let this = this.clone();
            async move { this.answer(call).await }.boxed()
        })
    }

    /// The sub-calls finished since the last take, in the order they finished.
    pub fn take_calls(&self) -> Vec<SubCallRecord> {
        std::mem::take(&mut self.lock().calls)
    }

    /// The answer given to `FINAL`, if the program gave one.
    pub fn final_answer(&self) -> Option<Value> {
        self.lock().final_answer.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        // A panic while holding this lock loses at most a log entry: keep going.
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One tool call; an `Err` is raised in the program as an exception.
    async fn answer(&self, call: HostToolCall) -> Result<Value, String> {
        let arg = |key: &str| call.kwargs.get(key).or(call.args.first()).cloned();
        match call.name.as_str() {
            "llm_query" => {
                let prompt = string_arg(arg("prompt"), "llm_query", "prompt")?;
                self.query("llm_query", prompt).await.map(Value::String)
            }
            "llm_query_batched" => {
                let prompts = match arg("prompts") {
                    Some(Value::Array(items)) => items
                        .into_iter()
                        .map(|p| string_arg(Some(p), "llm_query_batched", "prompts[i]"))
                        .collect::<Result<Vec<_>, _>>()?,
                    _ => return Err("llm_query_batched: prompts must be a list of strings".into()),
                };
                if prompts.len() > MAX_BATCH {
                    return Err(format!(
                        "llm_query_batched: {} prompts, at most {MAX_BATCH}",
                        prompts.len()
                    ));
                }
                let answers = futures::future::join_all(
                    prompts
                        .into_iter()
                        .map(|p| self.query("llm_query_batched", p)),
                )
                .await;
                answers
                    .into_iter()
                    .map(|a| a.map(Value::String))
                    .collect::<Result<Vec<_>, _>>()
                    .map(Value::Array)
            }
            "FINAL" => {
                let answer = arg("answer").ok_or("FINAL: missing the answer")?;
                self.lock().final_answer = Some(answer);
                Ok(Value::Null)
            }
            other => Err(format!("unknown host tool {other:?}")),
        }
    }

    /// One policy call with `prompt` as the only user message; logged whatever its outcome.
    async fn query(&self, tool: &str, prompt: String) -> Result<String, String> {
        let messages = [ChatMessage::text(Role::User, prompt.clone())];
        let request = ChatRequest {
            messages: &messages,
            tools: None,
            seed: None,
            response_format: None,
        };
        // Concurrent sub-calls each start from the budget left now and give back what they used.
        let before = self.lock().retry_budget;
        let mut budget = before;
        let outcome = self.client.chat(self.endpoint, &request, &mut budget).await;
        let answer = outcome
            .completion
            .as_ref()
            .map(|c| c.message.content.clone().unwrap_or_default());
        let result = match (&answer, &outcome.call.error) {
            (Some(a), _) => Ok(a.clone()),
            (None, Some(e)) => Err(format!("llm_query failed: {}", e.message)),
            (None, None) => Err("llm_query failed: no completion".to_string()),
        };
        let mut shared = self.lock();
        shared.retry_budget = shared.retry_budget.saturating_sub(before - budget);
        shared
            .calls
            .push(record(tool, prompt, answer, outcome.call));
        result
    }
}

fn record(tool: &str, prompt: String, answer: Option<String>, call: ModelCall) -> SubCallRecord {
    SubCallRecord {
        tool: tool.to_string(),
        prompt,
        answer,
        call,
    }
}

fn string_arg(v: Option<Value>, tool: &str, name: &str) -> Result<String, String> {
    match v {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!("{tool}: {name} must be a string, got {other}")),
        None => Err(format!("{tool}: missing argument {name}")),
    }
}

/// Makes a session of `env_id` whose host-tool calls `tools` answers. In-process only.
pub async fn make_with_tools(
    backend: &EnvBackend,
    env_id: &str,
    kwargs: &Kwargs,
    tools: &PolicyTools,
) -> Result<EnvSession, EnvError> {
    match backend {
        EnvBackend::InProcess(registry) => {
            let env =
                host_tool_calls::with_handler(tools.handler(), registry.make_async(env_id, kwargs))
                    .await?;
            Ok(EnvSession::Local(env))
        }
        EnvBackend::Remote(_) => Err(EnvError::Unsupported(
            "program-of-thought mode needs host tools, which the engine serves only to in-process \
             envs: run without --env-server"
                .into(),
        )),
    }
}
