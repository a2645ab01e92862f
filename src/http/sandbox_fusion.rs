//! SandboxFusion's judge API (`POST /run_code`, `GET /v1/ping`), as its FastAPI server answers it,
//! so that verl's code rewards and the `sandbox-fusion` PyPI client work unchanged.
//!
//! Faithful where clients look: the request model (unknown fields ignored, `language` defaulting to
//! `python` as lenient clients expect), the exact `RunCodeResponse` (`message` always a string,
//! `stdout`/`stderr` never null, `return_code` null only on a timeout) and SandboxFusion's status
//! rules: a timeout or a non-zero exit is `Failed`, a failure of the machinery is `SandboxError`
//! (HTTP 200 either way). A language outside SandboxFusion's list is a 422 as there; a language on
//! its list that codegym does not run (or whose toolchain this machine lacks) is answered like
//! SandboxFusion's own runner-less `sql`: `SandboxError` with a message. Compiled languages report
//! their compile step as `compile_result` (issue 14); a failed compile has no `run_result`.
//!
//! Execution is the coding env's: one `ExecRequest` to the shared [`Sandbox`]. The request's limits
//! can only lower the sandbox's configured ones. `fetch_files` are read by the sandbox from the
//! run's work dir once every process of the run has ended (`Sandbox::run_fetching`: regular files
//! beneath the work dir only), whatever way the program ended.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use codegym_sandbox::lang::Language;
use codegym_sandbox::{ExecRequest, Limits};
use env_core::{EnvError, ExecutionResult};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::state::{HttpState, body_rejected, invalid_json};
use crate::server::status::ServerError;

/// SandboxFusion's output cut per stream: its runners keep the first MiB.
const OUTPUT_CAP: usize = 1 << 20;

/// Every language SandboxFusion's request model accepts (`sandbox/runners/types.py`).
const LANGUAGES: [&str; 29] = [
    "python",
    "cpp",
    "nodejs",
    "go",
    "go_test",
    "java",
    "php",
    "csharp",
    "bash",
    "typescript",
    "sql",
    "rust",
    "cuda",
    "lua",
    "R",
    "perl",
    "D_ut",
    "ruby",
    "scala",
    "julia",
    "pytest",
    "junit",
    "kotlin_script",
    "jest",
    "verilog",
    "python_gpu",
    "lean",
    "swift",
    "racket",
];

/// `RunCodeRequest`; fields the server does not know are ignored, as pydantic does.
#[derive(Debug, Deserialize)]
struct RunCodeRequest {
    code: String,
    #[serde(default = "python")]
    language: String,
    #[serde(default = "ten")]
    compile_timeout: f64,
    #[serde(default = "ten")]
    run_timeout: f64,
    #[serde(default = "unlimited", rename = "memory_limit_MB")]
    memory_limit_mb: i64,
    #[serde(default)]
    stdin: Option<String>,
    /// Path -> base64 content; null contents are skipped, as SandboxFusion skips them.
    #[serde(default)]
    files: BTreeMap<String, Option<String>>,
    #[serde(default)]
    fetch_files: Vec<String>,
}

fn python() -> String {
    "python".into()
}
fn ten() -> f64 {
    10.0
}
fn unlimited() -> i64 {
    -1
}

/// `RunCodeResponse`.
#[derive(Debug, Serialize)]
pub(crate) struct RunCodeResponse {
    status: &'static str,
    message: String,
    compile_result: Option<CommandRunResult>,
    run_result: Option<CommandRunResult>,
    executor_pod_name: Option<String>,
    files: BTreeMap<String, String>,
}

/// `CommandRunResult`.
#[derive(Debug, Serialize)]
pub(crate) struct CommandRunResult {
    pub(crate) status: &'static str,
    pub(crate) execution_time: f64,
    pub(crate) return_code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl RunCodeResponse {
    /// A response whose only step is `run` (Python is not compiled), with the given status.
    pub(crate) fn of_run(status: &'static str, run: CommandRunResult) -> Self {
        RunCodeResponse {
            status,
            message: String::new(),
            compile_result: None,
            run_result: Some(run),
            executor_pod_name: None,
            files: BTreeMap::new(),
        }
    }

    fn sandbox_error(message: String) -> Self {
        RunCodeResponse {
            status: "SandboxError",
            message,
            compile_result: None,
            run_result: None,
            executor_pod_name: None,
            files: BTreeMap::new(),
        }
    }
}

/// `GET /v1/ping`: SandboxFusion's liveness probe answers the JSON string `"pong"`.
pub(crate) async fn ping() -> Response {
    axum::Json("pong").into_response()
}

/// `GET /v1/sandbox`, beside the liveness probe: what the sandbox behind `/run_code` offers
/// (isolation level and layers, the level the server requires, backend, languages).
pub(crate) async fn sandbox_info(State(state): State<Arc<HttpState>>) -> Response {
    axum::Json(state.sandbox.info()).into_response()
}

/// `POST /run_code`.
pub(crate) async fn run_code(
    State(state): State<Arc<HttpState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let request: RunCodeRequest = match body
        .map_err(body_rejected)
        .and_then(|body| serde_json::from_slice(&body).map_err(|e| invalid_json(&e)))
    {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if !LANGUAGES.contains(&request.language.as_str()) {
        return ServerError::InvalidBody(json!([{
            "type": "literal_error",
            "loc": ["body", "language"],
            "msg": format!("Input should be one of: {}", LANGUAGES.join(", ")),
            "input": request.language,
        }]))
        .into_response();
    }
    // A draining server takes no new work, as no door takes new sessions.
    if state.server.draining.is_cancelled() {
        return ServerError::ShuttingDown.into_response();
    }
    match execute(&state, request).await {
        Ok(response) => axum::Json(response).into_response(),
        // SandboxFusion reports a failure of the run itself (the machinery, a language it cannot
        // run, a bad file) in the body, with HTTP 200 and the status `SandboxError`.
        Err(e) if e.reported_in_judge_body() => {
            tracing::warn!(error = %e, "run_code: the run failed");
            let message = format!("exception on running code: {e}");
            axum::Json(RunCodeResponse::sandbox_error(message)).into_response()
        }
        Err(e) => e.into_response(),
    }
}

async fn execute(
    state: &HttpState,
    request: RunCodeRequest,
) -> Result<RunCodeResponse, ServerError> {
    // Every language codegym has a toolchain table for.
    let Ok(language) = Language::parse(&request.language) else {
        return Err(EnvError::Unsupported(format!(
            "language {:?} is not supported by this server",
            request.language
        ))
        .into());
    };
    let mut files = Vec::with_capacity(request.files.len());
    for (path, content) in request.files {
        let Some(content) = content else { continue };
        match B64.decode(content.as_bytes()) {
            Ok(bytes) => files.push((path, bytes)),
            Err(e) => {
                return Err(EnvError::InvalidOptions(format!(
                    "file {path:?} is not valid base64: {e}"
                ))
                .into());
            }
        }
    }
    let limits = capped_limits(
        state.sandbox.limits(),
        request.run_timeout,
        request.memory_limit_mb,
    );
    let mut compile_limits =
        capped_limits(state.sandbox.compile_limits(), request.compile_timeout, -1);
    compile_limits.cpu_ms = state
        .sandbox
        .compile_limits()
        .cpu_ms
        .min(compile_limits.wall_ms);
    let exec = ExecRequest {
        source: request.code,
        files,
        stdin: request.stdin.map(String::into_bytes),
        limits: Some(limits),
        language,
        compile_limits: Some(compile_limits),
        // Issue 12: SandboxFusion reads output only, and has no host tools.
        report: None,
        tools: None,
        ..ExecRequest::default()
    };
    match state.sandbox.run_fetching(exec, request.fetch_files).await {
        Ok((result, fetched)) => {
            let fetched: BTreeMap<String, String> = fetched
                .into_iter()
                .map(|(path, bytes)| (path, B64.encode(bytes)))
                .collect();
            let compile = result.compile.as_deref().map(run_result);
            if result.compile_failed() {
                // SandboxFusion runs nothing after a failed compile.
                return Ok(RunCodeResponse {
                    status: "Failed",
                    message: String::new(),
                    compile_result: compile,
                    run_result: None,
                    executor_pod_name: None,
                    files: fetched,
                });
            }
            let run = run_result(&result);
            // SandboxFusion's rule: a timeout or any non-zero return code fails the run.
            let status = if result.timed_out || run.return_code != Some(0) {
                "Failed"
            } else {
                "Success"
            };
            Ok(RunCodeResponse {
                status,
                message: String::new(),
                compile_result: compile,
                run_result: Some(run),
                executor_pod_name: None,
                files: fetched,
            })
        }
        Err(e) => Err(EnvError::Infrastructure(e.to_string()).into()),
    }
}

/// The sandbox's limits, lowered (never raised) by the request's `run_timeout` and
/// `memory_limit_MB`, with SandboxFusion's 1 MiB output cut when the server allows that much.
fn capped_limits(base: &Limits, run_timeout_s: f64, memory_limit_mb: i64) -> Limits {
    let mut asked = Limits {
        stdout_cap: OUTPUT_CAP,
        stderr_cap: OUTPUT_CAP,
        ..*base
    };
    if run_timeout_s.is_finite() && run_timeout_s > 0.0 {
        asked.wall_ms = ((run_timeout_s * 1000.0).ceil() as u64).max(1);
        asked.cpu_ms = asked.wall_ms;
    }
    if memory_limit_mb > 0 {
        asked.memory_bytes = (memory_limit_mb as u64).saturating_mul(1 << 20);
    }
    asked.within(base)
}

/// SandboxFusion's `CommandRunResult` of a run: `TimeLimitExceeded` with a null return code when a
/// limit of time ended it, else `Finished` with the exit code (a signal `N` as `-N`, as Python's
/// `subprocess` reports it).
pub(crate) fn run_result(result: &ExecutionResult) -> CommandRunResult {
    let (status, return_code) = if result.timed_out {
        ("TimeLimitExceeded", None)
    } else {
        let code = result.exit_code.or(result.signal.map(|s| -s)).unwrap_or(-1);
        ("Finished", Some(code))
    };
    CommandRunResult {
        status,
        execution_time: result.wall_ms as f64 / 1000.0,
        return_code,
        stdout: result.stdout.clone(),
        stderr: result.stderr.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_limits_only_lower_the_servers() {
        let base = Limits::default();
        let raised = capped_limits(&base, 1e9, 1 << 40);
        assert_eq!(raised.wall_ms, base.wall_ms);
        assert_eq!(raised.memory_bytes, base.memory_bytes);
        let lowered = capped_limits(&base, 0.5, 64);
        assert_eq!(lowered.wall_ms, 500);
        assert_eq!(lowered.cpu_ms, 500);
        assert_eq!(lowered.memory_bytes, 64 << 20);
        let ignored = capped_limits(&base, f64::NAN, -1);
        assert_eq!(ignored, Limits { ..base });
    }
}
