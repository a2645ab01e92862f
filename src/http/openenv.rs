//! OpenEnv's environment API over plain HTTP, for every registered env at
//! `/openenv/{namespace}/{name}`: `GET /health`, `GET /metadata`, `GET /schema`, and the stateless
//! `POST /reset` and `POST /step` of OpenEnv's simulation mode (each builds an env, uses it once and
//! closes it). The WebSocket session protocol is in [`super::openenv_ws`]; both share the
//! translation between OpenEnv's JSON and env-core's values defined here ([`Adapter`]).
//!
//! Translation, by env:
//! - the coding env (`codegym/Code-v0`): OpenEnv's `coding_env` shape. The action is
//!   `{"code": ...}`, sent to the env as the tool call `{"tool": "run_python", "code": ...}`; the
//!   observation has `stdout`, `stderr` and `exit_code`, and everything else (the task prompt at
//!   reset, the reward breakdown, limits hit, timings) under `metadata`.
//! - any other env: the action is `{"action": <value>}` and the observation `{"observation":
//!   <value>}`, values as JSON (discrete as integers, arrays as nested lists), checked against the
//!   env's spaces, which `/schema` publishes as JSON Schemas.

use std::sync::Arc;

use axum::body::Bytes;
use std::net::{IpAddr, SocketAddr};

use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, Path, State};
use axum::response::{IntoResponse, Response};
use env_core::{AsyncEnv, EnvError, EnvSpec, Info, Kwargs, Options, Space, Step, Tensor, Value};
use serde_json::{Map, Value as Json, json};

use super::state::{HttpState, body_rejected, invalid_json};
use crate::server::admission::admit;
use crate::server::status::ServerError;

/// How one env's values look in OpenEnv's JSON.
#[derive(Debug, Clone)]
pub(crate) struct Adapter {
    pub spec: EnvSpec,
    /// The `make` kwargs the server configured for this env (`http.openenv_kwargs`).
    pub kwargs: Kwargs,
    coding: bool,
}

/// An OpenEnv observation payload: `{"observation": {...}, "reward": .., "done": .., "metadata": {...}}`.
pub(crate) type Payload = Json;

impl Adapter {
    /// The adapter of `{ns}/{name}`, or NOT_FOUND.
    pub fn lookup(state: &HttpState, ns: &str, name: &str) -> Result<Adapter, ServerError> {
        let spec = state.server.registry.spec(&format!("{ns}/{name}"))?.clone();
        let coding = spec.id == env_coding::CODE_ENV_ID;
        let kwargs = state
            .openenv_kwargs
            .get(&spec.id)
            .cloned()
            .unwrap_or_default();
        Ok(Adapter {
            spec,
            kwargs,
            coding,
        })
    }

    /// An OpenEnv action object as the env's action. Unknown keys are refused, as OpenEnv's
    /// `extra = "forbid"` action models refuse them.
    pub fn action(&self, action: &Json) -> Result<Value, EnvError> {
        let Some(object) = action.as_object() else {
            return Err(EnvError::InvalidAction(
                "the action must be a JSON object".into(),
            ));
        };
        let field = if self.coding { "code" } else { "action" };
        if let Some(extra) = object.keys().find(|k| *k != field && *k != "metadata") {
            return Err(EnvError::InvalidAction(format!(
                "unknown action field {extra:?} (expected {field:?})"
            )));
        }
        let Some(value) = object.get(field) else {
            return Err(EnvError::InvalidAction(format!(
                "the action has no {field:?} field"
            )));
        };
        if self.coding {
            let code = value
                .as_str()
                .ok_or_else(|| EnvError::InvalidAction("\"code\" must be a string".into()))?;
            return Ok(Value::Json(env_core::contract::run_python(code)));
        }
        from_json(value, &self.spec.action_space)
    }

    /// A reset request's data (`seed`, `episode_id`, anything else) as `reset`'s arguments: the
    /// other keys become the reset options (e.g. the coding env's `task_id`).
    pub fn reset_args(&self, data: &Map<String, Json>) -> Result<(Option<u64>, Options), EnvError> {
        let mut options = data.clone();
        options.remove("episode_id");
        let seed = match options.remove("seed") {
            None | Some(Json::Null) => None,
            Some(seed) => Some(seed.as_u64().ok_or_else(|| {
                EnvError::InvalidOptions("seed must be a non-negative integer".into())
            })?),
        };
        Ok((seed, options))
    }

    /// The payload of a reset.
    pub fn reset_payload(&self, obs: Value, info: Info) -> Payload {
        self.payload(obs, info, Json::Null, false)
    }

    /// The payload of a step: `done` when the episode ended either way.
    pub fn step_payload(&self, step: Step<Value>) -> Payload {
        let done = step.is_final();
        let mut metadata = step.info;
        metadata.insert("terminated".into(), json!(step.terminated));
        metadata.insert("truncated".into(), json!(step.truncated));
        self.payload(step.obs, metadata, json!(step.reward), done)
    }

    fn payload(&self, obs: Value, mut metadata: Info, reward: Json, done: bool) -> Payload {
        let mut observation = Map::new();
        if self.coding {
            let (stdout, stderr, exit_code) = match obs {
                Value::Execution(r) => {
                    // Killed by a signal: `-N`, as Python's subprocess reports it.
                    let code = r.exit_code.or(r.signal.map(|s| -s)).unwrap_or(-1);
                    metadata.insert(
                        "execution".into(),
                        json!({
                            "timed_out": r.timed_out,
                            "memory_exceeded": r.memory_exceeded,
                            "signal": r.signal,
                            "stdout_truncated": r.stdout_truncated,
                            "stderr_truncated": r.stderr_truncated,
                            "wall_ms": r.wall_ms,
                            "cpu_ms": r.cpu_ms,
                            "peak_rss_bytes": r.peak_rss_bytes,
                        }),
                    );
                    (r.stdout, r.stderr, code)
                }
                // The reset prompt, and the text answers of the file tools.
                Value::Text(text) if reward.is_null() => {
                    metadata.insert("prompt".into(), json!(text));
                    (String::new(), String::new(), 0)
                }
                Value::Text(text) => (text, String::new(), 0),
                other => {
                    metadata.insert("value".into(), to_json(&other));
                    (String::new(), String::new(), 0)
                }
            };
            observation.insert("stdout".into(), json!(stdout));
            observation.insert("stderr".into(), json!(stderr));
            observation.insert("exit_code".into(), json!(exit_code));
        } else {
            observation.insert("observation".into(), to_json(&obs));
        }
        observation.insert("metadata".into(), Json::Object(metadata.clone()));
        let mut payload = Map::new();
        payload.insert("observation".into(), Json::Object(observation));
        payload.insert("reward".into(), reward);
        payload.insert("done".into(), json!(done));
        if !metadata.is_empty() {
            payload.insert("metadata".into(), Json::Object(metadata));
        }
        Json::Object(payload)
    }

    /// `GET /schema`: pydantic-style JSON Schemas (with `title`, `required`,
    /// `additionalProperties`), which verifiers' OpenEnv taskset reads.
    pub fn schema(&self) -> Json {
        let meta = json!({"type": "object", "additionalProperties": true, "title": "Metadata"});
        let (action, observation) = if self.coding {
            (
                json!({
                    "title": "CodeAction", "type": "object", "additionalProperties": false,
                    "description": "Python source to run in the sandbox, scored by the task's tests.",
                    "properties": {"metadata": meta, "code": {"title": "Code", "type": "string"}},
                    "required": ["code"],
                }),
                json!({
                    "title": "CodeObservation", "type": "object", "additionalProperties": false,
                    "properties": {
                        "done": {"type": "boolean", "default": false, "title": "Done"},
                        "reward": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": null, "title": "Reward"},
                        "metadata": meta,
                        "stdout": {"type": "string", "default": "", "title": "Stdout"},
                        "stderr": {"type": "string", "default": "", "title": "Stderr"},
                        "exit_code": {"type": "integer", "default": 0, "title": "Exit Code"},
                    },
                }),
            )
        } else {
            let title = self.spec.id.replace(['/', '-', '.'], "");
            (
                json!({
                    "title": format!("{title}Action"), "type": "object", "additionalProperties": false,
                    "properties": {"metadata": meta, "action": space_schema(&self.spec.action_space)},
                    "required": ["action"],
                }),
                json!({
                    "title": format!("{title}Observation"), "type": "object", "additionalProperties": false,
                    "properties": {
                        "done": {"type": "boolean", "default": false, "title": "Done"},
                        "reward": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": null, "title": "Reward"},
                        "metadata": meta,
                        "observation": space_schema(&self.spec.observation_space),
                    },
                    "required": ["observation"],
                }),
            )
        };
        let state = json!({
            "title": "State", "type": "object", "additionalProperties": true,
            "properties": {
                "episode_id": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null, "title": "Episode Id"},
                "step_count": {"type": "integer", "minimum": 0, "default": 0, "title": "Step Count"},
            },
        });
        json!({"action": action, "observation": observation.clone(), "state": state, "reset_observation": observation})
    }
}

/// A space as a JSON Schema.
fn space_schema(space: &Space) -> Json {
    match space {
        Space::Discrete { n, start } => {
            json!({"type": "integer", "minimum": start, "maximum": start + n - 1})
        }
        Space::Box(b) => {
            let mut schema = json!({"type": "number"});
            for &len in b.low.shape().iter().rev() {
                schema =
                    json!({"type": "array", "items": schema, "minItems": len, "maxItems": len});
            }
            schema
        }
        Space::MultiDiscrete { nvec } => {
            json!({"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": nvec.len(), "maxItems": nvec.len()})
        }
        Space::MultiBinary { .. } => json!({"type": "array"}),
        Space::Text {
            min_length,
            max_length,
            ..
        } => {
            json!({"type": "string", "minLength": min_length, "maxLength": max_length})
        }
        Space::Dict(entries) => {
            let properties: Map<String, Json> = entries
                .iter()
                .map(|(k, s)| (k.clone(), space_schema(s)))
                .collect();
            let required: Vec<&String> = entries.iter().map(|(k, _)| k).collect();
            json!({"type": "object", "properties": properties, "required": required})
        }
        Space::Tuple(items) => {
            let items: Vec<Json> = items.iter().map(space_schema).collect();
            json!({"type": "array", "prefixItems": items, "minItems": items.len(), "maxItems": items.len()})
        }
    }
}

/// An env value as JSON: arrays as nested lists, discrete values as integers.
pub(crate) fn to_json(value: &Value) -> Json {
    match value {
        Value::Text(t) => json!(t),
        Value::Json(j) => j.clone(),
        Value::Discrete(d) => json!(d),
        Value::Execution(r) => serde_json::to_value(r).unwrap_or(Json::Null),
        Value::List(items) => Json::Array(items.iter().map(to_json).collect()),
        Value::Dict(entries) => Json::Object(
            entries
                .iter()
                .map(|(k, v)| (k.clone(), to_json(v)))
                .collect(),
        ),
        Value::Tensor(t) => {
            let flat: Vec<Json> = match t {
                Tensor::F32(a) => a.iter().map(|x| json!(x)).collect(),
                Tensor::F64(a) => a.iter().map(|x| json!(x)).collect(),
                Tensor::I32(a) => a.iter().map(|x| json!(x)).collect(),
                Tensor::I64(a) => a.iter().map(|x| json!(x)).collect(),
                Tensor::U8(a) => a.iter().map(|x| json!(x)).collect(),
                Tensor::Bool(a) => a.iter().map(|x| json!(x)).collect(),
            };
            nest(&flat, t.shape())
        }
    }
}

fn nest(flat: &[Json], shape: &[usize]) -> Json {
    match shape.split_first() {
        None => flat.first().cloned().unwrap_or(Json::Null),
        Some((_, rest)) => {
            let stride = rest.iter().product::<usize>().max(1);
            if rest.is_empty() {
                return Json::Array(flat.to_vec());
            }
            Json::Array(flat.chunks(stride).map(|c| nest(c, rest)).collect())
        }
    }
}

/// JSON as a value of `space`; the env checks membership itself.
fn from_json(json: &Json, space: &Space) -> Result<Value, EnvError> {
    let bad = || EnvError::InvalidAction(format!("{json} is not an element of the action space"));
    match space {
        Space::Discrete { .. } => json.as_i64().map(Value::Discrete).ok_or_else(bad),
        Space::Text { .. } => json.as_str().map(|s| Value::Text(s.into())).ok_or_else(bad),
        Space::Box(b) => {
            let mut flat = Vec::new();
            flatten(json, &mut flat).ok_or_else(bad)?;
            let array = ndarray::ArrayD::from_shape_vec(b.low.shape(), flat).map_err(|_| bad())?;
            Ok(Value::Tensor(Tensor::F64(array)))
        }
        _ => Ok(Value::Json(json.clone())),
    }
}

fn flatten(json: &Json, out: &mut Vec<f64>) -> Option<()> {
    match json {
        Json::Array(items) => items.iter().try_for_each(|i| flatten(i, out)),
        other => {
            out.push(other.as_f64()?);
            Some(())
        }
    }
}

/// The JSON object of a request body (an empty body is `{}`).
fn parse_body(body: Result<Bytes, BytesRejection>) -> Result<Map<String, Json>, ServerError> {
    let body = body.map_err(body_rejected)?;
    if body.is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Json>(&body) {
        Ok(Json::Object(map)) => Ok(map),
        Ok(_) => Err(ServerError::InvalidBody(json!(
            "the body must be a JSON object"
        ))),
        Err(e) => Err(invalid_json(&e)),
    }
}

pub(crate) async fn health(
    State(state): State<Arc<HttpState>>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    match Adapter::lookup(&state, &ns, &name) {
        Ok(_) => axum::Json(json!({"status": "healthy"})).into_response(),
        Err(e) => e.into_response(),
    }
}

pub(crate) async fn metadata(
    State(state): State<Arc<HttpState>>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    match Adapter::lookup(&state, &ns, &name) {
        Ok(a) => axum::Json(json!({
            "name": a.spec.id,
            "description": a.spec.description,
            "readme_content": null,
            "version": env!("CARGO_PKG_VERSION"),
            "author": "codegym",
            "documentation_url": null,
        }))
        .into_response(),
        Err(e) => e.into_response(),
    }
}

pub(crate) async fn schema(
    State(state): State<Arc<HttpState>>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    match Adapter::lookup(&state, &ns, &name) {
        Ok(a) => axum::Json(a.schema()).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Stateless `POST /reset`: a new env, reset with the body's arguments, closed again.
pub(crate) async fn reset(
    State(state): State<Arc<HttpState>>,
    Path((ns, name)): Path<(String, String)>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let data = match parse_body(body) {
        Ok(d) => d,
        Err(e) => return e.into_response(),
    };
    one_shot(&state, peer.ip(), &ns, &name, |adapter, env| {
        Box::pin(async move {
            let (seed, options) = adapter.reset_args(&data)?;
            let (obs, info) = env.reset(seed, options).await?;
            Ok(adapter.reset_payload(obs, info))
        })
    })
    .await
}

/// Stateless `POST /step` (`{"action": {...}}`): a new env, reset, stepped once, closed again.
pub(crate) async fn step(
    State(state): State<Arc<HttpState>>,
    Path((ns, name)): Path<(String, String)>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let data = match parse_body(body) {
        Ok(d) => d,
        Err(e) => return e.into_response(),
    };
    let Some(action) = data.get("action").cloned() else {
        return ServerError::InvalidBody(
            json!([{"type": "missing", "loc": ["body", "action"], "msg": "Field required", "input": Json::Object(data)}]),
        )
        .into_response();
    };
    one_shot(&state, peer.ip(), &ns, &name, |adapter, env| {
        Box::pin(async move {
            let action = adapter.action(&action)?;
            env.reset(None, Options::new()).await?;
            Ok(adapter.step_payload(env.step(action).await?))
        })
    })
    .await
}

type OneShot<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Payload, EnvError>> + Send + 'a>>;

/// Admits a session for `client` (its env holds the session's slots meanwhile), runs `f` on it,
/// closes it, and answers with `f`'s payload or the error in OpenEnv's shape.
async fn one_shot<F>(state: &HttpState, client: IpAddr, ns: &str, name: &str, f: F) -> Response
where
    F: for<'a> FnOnce(&'a Adapter, &'a mut Box<dyn AsyncEnv>) -> OneShot<'a>,
{
    match one_shot_payload(state, client, ns, name, f).await {
        Ok(payload) => axum::Json(payload).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn one_shot_payload<F>(
    state: &HttpState,
    client: IpAddr,
    ns: &str,
    name: &str,
    f: F,
) -> Result<Payload, ServerError>
where
    F: for<'a> FnOnce(&'a Adapter, &'a mut Box<dyn AsyncEnv>) -> OneShot<'a>,
{
    let adapter = Adapter::lookup(state, ns, name)?;
    let admitted = admit(
        &state.server,
        Some(client),
        &adapter.spec.id,
        &adapter.kwargs,
    )
    .await?;
    let _slot = admitted.slot;
    let mut env = admitted.env;
    let out = f(&adapter, &mut env).await;
    if let Err(e) = env.close().await {
        tracing::debug!(error = %e, "closing a one-shot env failed");
    }
    Ok(out?)
}
