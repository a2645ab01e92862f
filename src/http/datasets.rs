//! SandboxFusion's dataset ("online judge") endpoints on codegym's engine: `GET /list_datasets`,
//! `POST /get_prompts`, `POST /get_prompt_by_id` and `POST /submit`.
//!
//! codegym ships no benchmark data: the server is told which task files back which dataset names
//! (`http.datasets` in the config file, `codegym serve --http-dataset NAME=PATH`). Each file is loaded
//! once at start-up with [`TaskSet::load`] (native, HumanEval and MBPP formats).
//!
//! `/submit` scores through the coding env's batch evaluator (the `Evaluate` RPC's engine): one item
//! whose reset options carry the task inline, and whose action is the program. The program is the
//! completion's first fenced Python block (else the whole text, the env's `auto` rule), with the
//! task's `completion_prefix` prepended as `codegym evaluate` does (HumanEval: the prompt, so a bare
//! continuation and a complete function both work); the env runs it as given (`extract: raw`).
//! `accepted` is the env's `solved`; `extra` holds the reward, its breakdown (`reward_breakdown`,
//! as every other scoring surface reports it) and its `provenance`; `tests` has one entry per reward component. A component's
//! `exec_info` is `/run_code`'s answer for the run, with the component's verdict folded in: a
//! failed component is `Failed`, its failing tests' errors are appended to `stderr`, and an exit
//! code of 0 becomes 1 (the program together with its tests did not succeed).
//!
//! The program runs once. Where the reward reads its own run (an output component, a penalty),
//! that run is made anyway and is the run `exec_info` reports. Where it does not (HumanEval's and
//! MBPP's unit tests), the program runs only under its tests, as `codegym evaluate` runs it (the
//! env's `observe: false`): a second run of it alone would cost a whole sandboxed run for an
//! `exec_info` that, for a function definition, says nothing. The run reported is then the
//! scoring's: its wall time, no output (the candidate's output goes nowhere in the harness), and
//! `TimeLimitExceeded` where the harness reports the program out of time.
//! A failure of the machinery is the error table's answer (503, retry) in FastAPI's shape, never
//! `accepted: false`.
//!
//! Not served: SandboxFusion's `CommonOJDataset` with `provided_data` (tests sent in the request),
//! `/list_ids`, `/get_metrics`. The request's `config` is accepted and ignored.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use env_coding::tasks::{Task, TaskSet};
use env_core::{EvalItem, ExecutionResult, Value};
use futures::FutureExt;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;

pub use super::dataset_files::{DatasetError, Datasets};
use super::sandbox_fusion::{RunCodeResponse, run_result};
use super::state::{HttpState, body_rejected, invalid_json};
use crate::server::status::ServerError;

/// The env whose evaluator scores submissions.
const ENV_ID: &str = env_coding::CODE_ENV_ID;

/// `GetPromptsRequest` (`config` accepted, ignored; unknown fields ignored as pydantic does).
#[derive(Debug, Deserialize)]
struct GetPromptsRequest {
    dataset: String,
    #[serde(default)]
    offset: i64,
    #[serde(default = "all")]
    limit: i64,
}

fn all() -> i64 {
    1_000_000
}

/// `GetPromptByIdRequest`.
#[derive(Debug, Deserialize)]
struct GetPromptByIdRequest {
    dataset: String,
    id: Id,
}

/// `SubmitRequest`.
#[derive(Debug, Deserialize)]
struct SubmitRequest {
    dataset: String,
    id: Id,
    completion: String,
}

/// `int | str`, as the request models declare ids.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Id {
    Int(i64),
    Text(String),
}

impl Id {
    fn key(&self) -> String {
        match self {
            Id::Int(n) => n.to_string(),
            Id::Text(s) => s.clone(),
        }
    }

    fn json(&self) -> serde_json::Value {
        match self {
            Id::Int(n) => json!(n),
            Id::Text(s) => json!(s),
        }
    }
}

/// A task id as SandboxFusion shows it: a number when it is one (MBPP), else the text.
fn id_json(id: &str) -> serde_json::Value {
    match id.parse::<i64>() {
        Ok(n) if n.to_string() == id => json!(n),
        _ => json!(id),
    }
}

/// An error answer: the table's status and FastAPI's shape.
type Failure = ServerError;

/// `Prompt {id, prompt, labels}`.
fn prompt(task: &Task) -> serde_json::Value {
    json!({"id": id_json(&task.id), "prompt": task.prompt, "labels": task.metadata})
}

/// The request model, or FastAPI's validation failure.
fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, Failure> {
    let body = body.map_err(body_rejected)?;
    serde_json::from_slice(&body).map_err(|e| invalid_json(&e))
}

/// The dataset, or SandboxFusion's answer for a name it has no eval class for.
fn dataset<'a>(state: &'a HttpState, name: &str) -> Result<&'a Arc<TaskSet>, Failure> {
    state
        .datasets
        .get(name)
        .ok_or_else(|| ServerError::UnknownDataset(name.to_string()))
}

fn task<'a>(set: &'a TaskSet, dataset: &str, id: &Id) -> Result<&'a Arc<Task>, Failure> {
    set.get(&id.key())
        .ok_or_else(|| ServerError::UnknownPrompt {
            dataset: dataset.to_string(),
            id: id.json().to_string(),
        })
}

/// `GET /list_datasets`.
pub(crate) async fn list_datasets(State(state): State<Arc<HttpState>>) -> Response {
    axum::Json(state.datasets.names().collect::<Vec<_>>()).into_response()
}

/// `POST /get_prompts`.
pub(crate) async fn get_prompts(
    State(state): State<Arc<HttpState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = (|| {
        let request: GetPromptsRequest = parse(body)?;
        let set = dataset(&state, &request.dataset)?;
        let prompts: Vec<_> = set
            .iter()
            .skip(request.offset.max(0) as usize)
            .take(request.limit.max(0) as usize)
            .map(|t| prompt(t))
            .collect();
        Ok(axum::Json(prompts).into_response())
    })();
    result.unwrap_or_else(|e: Failure| e.into_response())
}

/// `POST /get_prompt_by_id`.
pub(crate) async fn get_prompt_by_id(
    State(state): State<Arc<HttpState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = (|| {
        let request: GetPromptByIdRequest = parse(body)?;
        let set = dataset(&state, &request.dataset)?;
        let task = task(set, &request.dataset, &request.id)?;
        Ok(axum::Json(prompt(task)).into_response())
    })();
    result.unwrap_or_else(|e: Failure| e.into_response())
}

/// `POST /submit`.
pub(crate) async fn submit(
    State(state): State<Arc<HttpState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    // A draining server takes no new work, as no door takes new sessions.
    if state.server.draining.is_cancelled() {
        return ServerError::ShuttingDown.into_response();
    }
    match submit_inner(&state, body).await {
        Ok(r) => r,
        Err(e) => {
            // The server's own failures are worth a warning; a client's mistakes are not.
            if e.http_status().is_server_error() {
                tracing::warn!(error = %e, "submit: scoring failed");
            } else {
                tracing::debug!(error = %e, "submit refused");
            }
            e.into_response()
        }
    }
}

async fn submit_inner(
    state: &HttpState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    let request: SubmitRequest = parse(body)?;
    let set = dataset(state, &request.dataset)?;
    let task = task(set, &request.dataset, &request.id)?.clone();
    let block = code_extract::first_python_block(&request.completion);
    let extracted_type = match block {
        Some(_) => Some("fenced"),
        None if request.completion.trim().is_empty() => Some("empty"),
        None => None,
    };
    let code = task.program_from_completion(block.unwrap_or(&request.completion));
    let task_json = serde_json::to_value(task.as_ref())
        .map_err(|e| ServerError::Internal(format!("cannot encode the task: {e}")))?;
    let evaluator = state.server.registry.evaluator(ENV_ID)?;
    let mut kwargs = env_core::Kwargs::new();
    kwargs.insert("extract".into(), json!("raw"));
    // The program's own run only where the reward reads it (see the module's doc).
    let observe = task.reward.needs_plain_run();
    kwargs.insert("observe".into(), json!(observe));
    let mut options = env_core::Options::new();
    options.insert("task".into(), task_json);
    let item = EvalItem {
        seed: None,
        options,
        action: Value::Text(code.clone()),
    };
    let started = Instant::now();
    let step = AssertUnwindSafe(evaluator.evaluate(kwargs, vec![item]))
        .catch_unwind()
        .await
        .map_err(|_| ServerError::EnvPanicked)??
        .into_iter()
        .next()
        .ok_or_else(|| ServerError::Internal("the evaluator returned no result".into()))??;
    let Value::Execution(run) = &step.obs else {
        return Err(ServerError::Internal(format!(
            "the evaluator's observation is {}, not an execution",
            step.obs.kind()
        )));
    };
    let scoring;
    let run = if observe {
        run
    } else {
        scoring = scoring_run(started.elapsed());
        &scoring
    };
    let components = step
        .info
        .get(env_core::contract::info::REWARD_BREAKDOWN)
        .and_then(|b| b.get("components"))
        .and_then(|c| c.as_array())
        .cloned()
        .unwrap_or_default();
    let tests: Vec<_> = components
        .iter()
        .map(|c| match observe {
            true => test_case(run, c),
            // The program ran only under its tests: a component that hit its time limit there
            // is what a run of the program alone would have been, `TimeLimitExceeded`.
            false => test_case(
                &ExecutionResult {
                    timed_out: hit_time_limit(c),
                    ..run.clone()
                },
                c,
            ),
        })
        .collect();
    let accepted = step.terminated && tests.iter().all(|t| t["passed"] == json!(true));
    Ok(axum::Json(json!({
        "id": request.id.json(),
        "accepted": accepted,
        "extracted_code": code,
        "full_code": code,
        "test_code": null,
        "tests": tests,
        "extracted_type": extracted_type,
        "extra": {
            "reward": step.reward,
            "task_id": task.id,
            "reward_breakdown": step.info.get("reward_breakdown"),
            "provenance": step.info.get(env_core::contract::info::PROVENANCE),
        },
    }))
    .into_response())
}

/// The run `exec_info` reports where the program ran only under its tests: one that finished
/// (`test_case` folds each component's verdict in) after the scoring's wall time, with no output.
fn scoring_run(elapsed: Duration) -> ExecutionResult {
    ExecutionResult {
        exit_code: Some(0),
        wall_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        ..ExecutionResult::default()
    }
}

/// Whether the scoring harness reported the component's program out of time (a test, or the
/// program's loading, "timed out"; the whole run "hit its time limit"): the harness's own words.
fn hit_time_limit(component: &serde_json::Value) -> bool {
    let detail = &component["detail"];
    let timed_out = |e: &serde_json::Value| {
        e.as_str().is_some_and(|e| {
            e == "test timed out"
                || e.ends_with(": test timed out")
                || e.contains("hit its time limit")
        })
    };
    detail["status"] == json!("Timeout")
        || timed_out(&detail["error"])
        || detail["tests"]
            .as_array()
            .is_some_and(|tests| tests.iter().any(|t| timed_out(&t["error"])))
}

/// One `EvalTestCase` for a reward component (`{type, weight, score, detail}`).
fn test_case(run: &ExecutionResult, component: &serde_json::Value) -> serde_json::Value {
    let passed = component["score"].as_f64().is_some_and(|s| s >= 1.0);
    let mut result = run_result(run);
    let ran_ok = !run.timed_out && result.return_code == Some(0);
    let status = if passed && ran_ok {
        "Success"
    } else {
        "Failed"
    };
    if !passed {
        let why = failure_text(component);
        if !result.stderr.is_empty() && !result.stderr.ends_with('\n') {
            result.stderr.push('\n');
        }
        result.stderr.push_str(&why);
        if result.return_code == Some(0) {
            result.return_code = Some(1);
        }
    }
    json!({
        "passed": passed,
        "exec_info": RunCodeResponse::of_run(status, result),
        "test_info": component,
    })
}

/// Why a component failed, as lines for `stderr`: the unit tests' errors, else the component's
/// detail.
fn failure_text(component: &serde_json::Value) -> String {
    let kind = component["type"].as_str().unwrap_or("component");
    let detail = &component["detail"];
    let mut lines = Vec::new();
    if let Some(e) = detail["error"].as_str() {
        lines.push(format!("codegym: {kind}: {e}"));
    }
    for t in detail["tests"].as_array().into_iter().flatten() {
        if t["passed"] != json!(true) {
            let name = t["name"].as_str().unwrap_or("test");
            let error = t["error"].as_str().unwrap_or("failed");
            lines.push(format!("codegym: {kind}: {name}: {error}"));
        }
    }
    if lines.is_empty() {
        lines.push(format!("codegym: {kind} failed: {detail}"));
    }
    lines.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loaded_tasks_survive_the_inline_round_trip() {
        let text = r#"{"task_id": "HumanEval/0", "prompt": "def f(x):\n    \"\"\"d\"\"\"\n", "canonical_solution": "    return x\n", "test": "def check(c):\n    assert c(1) == 1\n", "entry_point": "f"}"#;
        let set = TaskSet::parse(text, std::path::Path::new("he.jsonl")).unwrap();
        let task = set.by_index(0).unwrap();
        let back = Task::from_json(serde_json::to_value(task.as_ref()).unwrap()).unwrap();
        assert_eq!(&back, task.as_ref());
        let mbpp = r#"{"task_id": 11, "text": "t", "code": "x=1", "test_list": ["assert 1"], "test_setup_code": ""}"#;
        let set = TaskSet::parse(mbpp, std::path::Path::new("mbpp.jsonl")).unwrap();
        let task = set.by_index(0).unwrap();
        let back = Task::from_json(serde_json::to_value(task.as_ref()).unwrap()).unwrap();
        assert_eq!(&back, task.as_ref());
        assert_eq!(id_json(&task.id), json!(11));
        assert_eq!(id_json("HumanEval/0"), json!("HumanEval/0"));
        assert_eq!(id_json("011"), json!("011"));
    }
}
