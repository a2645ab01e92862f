//! Test support, which no production crate depends on: a fake OpenAI-compatible LLM server for the
//! rollout engine's tests, the CLI's end-to-end tests and the rollout benchmark (`codegym-bench`).
//!
//! A real HTTP server (axum) on 127.0.0.1:0 serving `/v1/chat/completions` and `/v1/models`,
//! scripted by [`FakeScript`]: rule-based replies, latency, and injected faults (429 with retry
//! headers, 5xx, hangs, malformed bodies, empty choices, context-length errors), with logprobs and
//! token ids on request, JSON replies that follow the request's `response_format` (bare JSON) or not
//! (a fenced ```json block), and endpoints that refuse `response_format`. Its latency is exact: an
//! absolute `timerfd` deadline from the request's arrival, the answer prepared meanwhile.
//!
//! It is the only fake in the project: it stands in for a remote paid service, everything else in
//! rollout tests is real.

mod script;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::sync::watch;

pub use script::{FakeScript, Fault, FaultRule, Reply, Rule};

/// A running fake server; stops when dropped.
#[derive(Debug)]
pub struct FakeLlm {
    addr: SocketAddr,
    state: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    script: FakeScript,
    requests: AtomicU64,
    faults: AtomicU64,
    rng: std::sync::Mutex<rand::rngs::StdRng>,
    recorded: std::sync::Mutex<Vec<Value>>,
    authorization: std::sync::Mutex<Option<String>>,
    shutdown: watch::Receiver<bool>,
}

impl FakeLlm {
    /// Binds 127.0.0.1:0 and serves `script` on the current tokio runtime.
    pub async fn start(script: FakeScript) -> std::io::Result<Self> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        // A deep backlog: benchmarks open thousands of connections at once, and a dropped SYN costs
        // a one-second retransmission.
        let listener = socket.listen(8192)?;
        let addr = listener.local_addr()?;
        let (tx, rx) = watch::channel(false);
        let state = Arc::new(Shared {
            rng: std::sync::Mutex::new(rand::rngs::StdRng::seed_from_u64(script.fault_seed)),
            script,
            requests: AtomicU64::new(0),
            faults: AtomicU64::new(0),
            recorded: std::sync::Mutex::new(Vec::new()),
            authorization: std::sync::Mutex::new(None),
            shutdown: rx.clone(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/models", get(models))
            .with_state(state.clone());
        let mut stop = rx;
        let task = tokio::spawn(async move {
            // Without TCP_NODELAY, Nagle's algorithm and delayed ACKs add tens of milliseconds to
            // some responses, which would be charged to the engine under test.
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            let server = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            });
            if let Err(e) = server.await {
                tracing::warn!(error = %e, "fake LLM server stopped");
            }
        });
        Ok(FakeLlm {
            addr,
            state,
            shutdown: tx,
            task,
        })
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Chat completion requests received so far.
    pub fn request_count(&self) -> u64 {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Requests answered with a fault.
    pub fn fault_count(&self) -> u64 {
        self.state.faults.load(Ordering::SeqCst)
    }

    /// The `Authorization` header of the latest chat request, if it had one.
    pub fn last_authorization(&self) -> Option<String> {
        self.state.authorization.lock().ok().and_then(|a| a.clone())
    }

    /// Request bodies received, when the script records them.
    pub fn recorded_requests(&self) -> Vec<Value> {
        self.state
            .recorded
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        // Hanging handlers wait on the same signal, so graceful shutdown cannot stall on them.
        let _ = self.shutdown.send(true);
        self.task.abort();
    }
}

async fn models(State(state): State<Arc<Shared>>) -> Response {
    let id = state
        .script
        .served_model
        .clone()
        .unwrap_or_else(|| "fake/model".into());
    axum::Json(
        json!({"object": "list", "data": [{"id": id, "object": "model", "owned_by": "codegym"}]}),
    )
    .into_response()
}

/// The configured latency is the server's whole time per request: the answer is prepared at once
/// and sent when it is due, so the fake's own parsing and encoding (~0.1 ms on our VM) are not
/// charged to the client under test.
async fn chat(State(state): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let due = Due::after(Duration::from_millis(state.script.latency_ms));
    let response = answer(&state, &headers, &body).await;
    if let Some(due) = due {
        due.wait().await;
    }
    response
}

async fn answer(state: &Shared, headers: &HeaderMap, body: &Bytes) -> Response {
    let index = state.requests.fetch_add(1, Ordering::SeqCst);
    if let Ok(mut a) = state.authorization.lock() {
        *a = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
    }
    let script = &state.script;
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "body is not JSON",
        );
    };
    if script.record_requests
        && let Ok(mut r) = state.recorded.lock()
    {
        r.push(request.clone());
    }
    if let Some(fault) = pick_fault(state, index) {
        state.faults.fetch_add(1, Ordering::SeqCst);
        return fault_response(state, fault).await;
    }
    if script.reject_response_format && request.get("response_format").is_some() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "response_format is not supported by this model",
        );
    }
    let messages: &[Value] = request
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let role_is = |m: &Value, r: &str| m.get("role").and_then(Value::as_str) == Some(r);
    let user_texts: Vec<&str> = messages
        .iter()
        .filter(|m| role_is(m, "user"))
        .filter_map(|m| m.get("content").and_then(Value::as_str))
        .collect();
    let turn = messages.iter().filter(|m| role_is(m, "assistant")).count();
    let reply = script
        .rules
        .iter()
        .find(|r| r.matches(&user_texts, turn))
        .map_or(&script.default_reply, |r| &r.reply);
    axum::Json(completion(script, &request, messages, reply, index)).into_response()
}

/// When an answer is due: a fixed time after its request arrived, to within the kernel's timer
/// slack (tens of microseconds). tokio's timer wheel has millisecond ticks and rounds up: its
/// `sleep(50 ms)` answered after 52.3 ms at p50 on our 2-core VM, and benchmarks charged those
/// 2 ms per request to the engine under test.
struct Due {
    /// `CLOCK_MONOTONIC` time for a timerfd; `None` if the clock could not be read.
    at: Option<nix::sys::time::TimeSpec>,
    fallback: tokio::time::Instant,
}

impl Due {
    /// `latency` from now; `None` for no latency.
    fn after(latency: Duration) -> Option<Due> {
        if latency.is_zero() {
            return None;
        }
        let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).ok();
        Some(Due {
            at: now.map(|t| t + nix::sys::time::TimeSpec::from_duration(latency)),
            fallback: tokio::time::Instant::now() + latency,
        })
    }

    async fn wait(self) {
        match self.at.map(one_shot_timer) {
            // Readable once the timer expired (at once if it already has); the fd is closed on
            // drop, so no read is needed.
            Some(Ok(timer)) => {
                let _ = timer.readable().await;
            }
            _ => tokio::time::sleep_until(self.fallback).await,
        }
    }
}

fn one_shot_timer(
    at: nix::sys::time::TimeSpec,
) -> std::io::Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
    let timer = TimerFd::new(
        ClockId::CLOCK_MONOTONIC,
        TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
    )?;
    timer.set(
        Expiration::OneShot(at),
        TimerSetTimeFlags::TFD_TIMER_ABSTIME,
    )?;
    let fd = std::os::fd::OwnedFd::from(timer);
    // SAFETY: the AsyncFd owns the OwnedFd, so the descriptor stays open and the same until the
    // AsyncFd is dropped.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
            .map_err(std::io::Error::from)
    }
}

fn pick_fault(state: &Shared, index: u64) -> Option<Fault> {
    state.script.faults.iter().find_map(|f| {
        let fires = f.at_requests.contains(&index)
            || (f.rate > 0.0
                && state
                    .rng
                    .lock()
                    .map(|mut r| r.random_bool(f.rate.min(1.0)))
                    .unwrap_or(false));
        fires.then(|| f.fault.clone())
    })
}

async fn fault_response(state: &Shared, fault: Fault) -> Response {
    match fault {
        Fault::RateLimited {
            retry_after_secs,
            retry_after_ms,
        } => {
            let mut r = error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_exceeded",
                "slow down",
            );
            let h = r.headers_mut();
            if let Some(s) = retry_after_secs {
                h.insert("retry-after", HeaderValue::from(s));
            }
            if let Some(ms) = retry_after_ms {
                h.insert("retry-after-ms", HeaderValue::from(ms));
            }
            r
        }
        Fault::QuotaExceeded => error(
            StatusCode::TOO_MANY_REQUESTS,
            "insufficient_quota",
            "You exceeded your current quota, please check your plan and billing details.",
        ),
        Fault::Status(code) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            error(status, "server_error", "injected failure")
        }
        Fault::ContextLength => error(
            StatusCode::BAD_REQUEST,
            "context_length_exceeded",
            "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.",
        ),
        Fault::Unauthorized => error(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "Invalid credentials",
        ),
        Fault::Hang => {
            let mut stop = state.shutdown.clone();
            let _ = stop.wait_for(|s| *s).await;
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutdown",
                "server stopping",
            )
        }
        Fault::Malformed => (
            StatusCode::OK,
            [("content-type", "application/json")],
            "{\"choices\": [",
        )
            .into_response(),
        Fault::EmptyChoices => {
            axum::Json(json!({"id": "x", "object": "chat.completion", "choices": []}))
                .into_response()
        }
        Fault::NoRetryHeader => {
            let mut r = error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "do not retry",
            );
            r.headers_mut()
                .insert("x-should-retry", HeaderValue::from_static("false"));
            r
        }
    }
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let body =
        json!({"error": {"message": message, "type": "invalid_request_error", "code": code}});
    (status, HeaderMap::new(), axum::Json(body)).into_response()
}

/// Builds the completion body for `reply`.
fn completion(
    script: &FakeScript,
    request: &Value,
    messages: &[Value],
    reply: &Reply,
    index: u64,
) -> Value {
    let model = script
        .served_model
        .clone()
        .or_else(|| {
            request
                .get("model")
                .and_then(Value::as_str)
                .map(String::from)
        })
        .unwrap_or_default();
    let (message, finish, text) = match reply {
        Reply::Text(t) => (
            json!({"role": "assistant", "content": t}),
            "stop",
            t.clone(),
        ),
        Reply::Code(p) => {
            let t = format!("Here is my solution.\n\n```python\n{p}\n```\n");
            (json!({"role": "assistant", "content": t}), "stop", t)
        }
        Reply::Json(v) => {
            let t = if request.get("response_format").is_some() {
                v.to_string()
            } else {
                let pretty = serde_json::to_string_pretty(v).unwrap_or_default();
                format!("Here is the answer.\n\n```json\n{pretty}\n```\n")
            };
            (json!({"role": "assistant", "content": t}), "stop", t)
        }
        Reply::ToolCall { name, arguments } => {
            let args = arguments.to_string();
            let call = json!({"id": format!("call_{index}"), "type": "function",
                              "function": {"name": name, "arguments": args}});
            (
                json!({"role": "assistant", "content": null, "tool_calls": [call]}),
                "tool_calls",
                args,
            )
        }
        Reply::RawToolCalls(calls) => {
            let calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    json!({"id": format!("call_{index}_{i}"), "type": "function",
                           "function": {"name": name, "arguments": args}})
                })
                .collect();
            let text: String = calls
                .iter()
                .filter_map(|c| c["function"]["arguments"].as_str())
                .collect();
            (
                json!({"role": "assistant", "content": null, "tool_calls": calls}),
                "tool_calls",
                text,
            )
        }
    };
    let prompt_chars: usize = messages
        .iter()
        .filter_map(|m| m.get("content").and_then(Value::as_str))
        .map(str::len)
        .sum();
    // One "token" per character: deterministic, and ids and logprobs line up one to one.
    let completion_tokens = text.chars().count();
    let mut choice = json!({"index": 0, "message": message, "finish_reason": finish});
    let mut body = json!({
        "id": format!("chatcmpl-{index}"), "object": "chat.completion", "created": 0, "model": model,
        "usage": {"prompt_tokens": prompt_chars / 4 + 1, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_chars / 4 + 1 + completion_tokens},
    });
    let asks = |k: &str| request.get(k).and_then(Value::as_bool) == Some(true);
    if script.support_logprobs && asks("logprobs") {
        let content: Vec<Value> = text
            .chars()
            .enumerate()
            .map(|(i, c)| json!({"token": c.to_string(), "logprob": -((i % 7) as f64) / 10.0, "top_logprobs": []}))
            .collect();
        choice["logprobs"] = json!({ "content": content });
    }
    if script.support_token_ids && asks("return_token_ids") {
        choice["token_ids"] = json!(text.chars().map(u32::from).collect::<Vec<_>>());
        let prompt: Vec<u32> = messages
            .iter()
            .filter_map(|m| m.get("content").and_then(Value::as_str))
            .flat_map(str::chars)
            .map(u32::from)
            .collect();
        body["prompt_token_ids"] = json!(prompt);
    }
    body["choices"] = json!([choice]);
    body
}
