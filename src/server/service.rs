//! `codegym.v1.EnvService`: the unary RPCs and `ListTasks` (`Evaluate` lives in `evaluate.rs`), plus the request parsing
//! shared with the `Session` stream. `ListTasks` renders each task's opening messages with the
//! rollout engine's default prompts, so datasets prompt models exactly as `codegym rollout` does.

use std::pin::Pin;
use std::sync::Arc;

use std::panic::AssertUnwindSafe;

use env_core::{AsyncEnv, EnvSpec, Options, Value};
use futures::{FutureExt, Stream};
use prompts::{EpisodeMode, Prompts};
use proto::convert::{self, ConvertError};
use proto::v1;
use tonic::{Request, Response, Status, Streaming};

use super::State;
use super::deadline;
use super::sessions::Permit;
use super::status::ServerError;

/// The service implementation; cheap to clone.
#[derive(Clone)]
pub struct EnvServer {
    pub(crate) state: Arc<State>,
}

impl EnvServer {
    pub(crate) fn new(state: Arc<State>) -> Self {
        EnvServer { state }
    }
}

/// A fresh env for `make`, with its capacity slot. Synchronous constructors that may block run
/// through the registry's offload (the blocking pool).
/// `stream`: the request came over a `Session` stream, which can serve host tools (issue 12).
pub(crate) async fn make_env(
    state: &Arc<State>,
    req: v1::MakeRequest,
    stream: bool,
) -> Result<(Box<dyn AsyncEnv>, EnvSpec, Permit), ServerError> {
    if state.draining.is_cancelled() {
        return Err(ServerError::ShuttingDown);
    }
    let kwargs = convert::json_object(&req.kwargs_json, "kwargs_json")?;
    // Issue 12: tool calls need a client to forward them to, which only a stream has.
    let declares_tools = kwargs
        .get("tools")
        .is_some_and(|t| !t.is_null() && t.as_array().is_none_or(|a| !a.is_empty()));
    if declares_tools && !stream {
        return Err(ServerError::ToolsNeedStream);
    }
    let spec = state.registry.spec(&req.env_id)?.clone();
    let permit = state.sessions.reserve()?;
    let env = state.registry.make_async(&req.env_id, &kwargs).await?;
    Ok((env, spec, permit))
}

pub(crate) fn parse_reset(req: &v1::ResetRequest) -> Result<(Option<u64>, Options), ServerError> {
    Ok((
        req.seed,
        convert::json_object(&req.options_json, "options_json")?,
    ))
}

pub(crate) fn parse_action(req: v1::StepRequest) -> Result<Value, ServerError> {
    Ok(convert::value_from_proto(
        req.action.ok_or(ConvertError::Missing("action"))?,
    )?)
}

pub(crate) fn make_response(state: &State, session_id: String, spec: &EnvSpec) -> v1::MakeResponse {
    let evaluate = state.registry.supports_evaluate(&spec.id).unwrap_or(false);
    v1::MakeResponse {
        session_id,
        spec: Some(convert::spec_to_proto(spec, evaluate)),
    }
}

pub(crate) fn reset_response((obs, info): (Value, env_core::Info)) -> v1::ResetResponse {
    v1::ResetResponse {
        observation: Some(convert::value_to_proto(&obs)),
        info_json: convert::json_text(&info),
    }
}

type SessionStream = Pin<Box<dyn Stream<Item = Result<v1::SessionResponse, Status>> + Send>>;
type EvaluateStream =
    Pin<Box<dyn Stream<Item = Result<v1::EvaluateStreamResponse, Status>> + Send>>;

#[tonic::async_trait]
impl v1::env_service_server::EnvService for EnvServer {
    async fn list_envs(
        &self,
        _req: Request<v1::ListEnvsRequest>,
    ) -> Result<Response<v1::ListEnvsResponse>, Status> {
        let registry = &self.state.registry;
        let envs = registry
            .specs()
            .map(|spec| {
                let evaluate = registry.supports_evaluate(&spec.id).unwrap_or(false);
                convert::spec_to_proto(spec, evaluate)
            })
            .collect();
        Ok(Response::new(v1::ListEnvsResponse { envs }))
    }

    #[tracing::instrument(name = "make", skip_all, fields(env_id = %req.get_ref().env_id, session_id))]
    async fn make(
        &self,
        req: Request<v1::MakeRequest>,
    ) -> Result<Response<v1::MakeResponse>, Status> {
        let deadline = deadline::from_request(&req);
        let state = &self.state;
        let response = deadline::within(deadline, async {
            let (env, spec, permit) = make_env(state, req.into_inner(), false).await?;
            let session = state.sessions.insert(spec, env, permit);
            tracing::Span::current().record("session_id", session.id.as_str());
            tracing::debug!("session created");
            Ok(make_response(state, session.id.clone(), &session.spec))
        })
        .await?;
        Ok(Response::new(response))
    }

    #[tracing::instrument(name = "reset", skip_all, fields(session_id = %req.get_ref().session_id))]
    async fn reset(
        &self,
        req: Request<v1::ResetRequest>,
    ) -> Result<Response<v1::ResetResponse>, Status> {
        let deadline = deadline::from_request(&req);
        let req = req.into_inner();
        let session = self.state.sessions.get(&req.session_id)?;
        let (seed, options) = parse_reset(&req)?;
        let out =
            deadline::within(deadline, session.call(move |env| env.reset(seed, options))).await?;
        Ok(Response::new(reset_response(out)))
    }

    #[tracing::instrument(name = "step", skip_all, fields(session_id = %req.get_ref().session_id))]
    async fn step(
        &self,
        req: Request<v1::StepRequest>,
    ) -> Result<Response<v1::StepResponse>, Status> {
        let deadline = deadline::from_request(&req);
        let req = req.into_inner();
        let session = self.state.sessions.get(&req.session_id)?;
        let action = parse_action(req)?;
        let step = deadline::within(deadline, session.call(move |env| env.step(action))).await?;
        crate::metrics::step(&step);
        Ok(Response::new(convert::step_to_proto(&step)))
    }

    #[tracing::instrument(name = "close", skip_all, fields(session_id = %req.get_ref().session_id))]
    async fn close(
        &self,
        req: Request<v1::CloseRequest>,
    ) -> Result<Response<v1::CloseResponse>, Status> {
        let closed = self.state.sessions.remove(&req.get_ref().session_id).await;
        Ok(Response::new(v1::CloseResponse { closed }))
    }

    type SessionStream = SessionStream;

    async fn session(
        &self,
        req: Request<Streaming<v1::SessionRequest>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let span = tracing::info_span!("session_stream", session_id = tracing::field::Empty);
        let rx = super::stream::spawn(self.state.clone(), req.into_inner(), span);
        Ok(Response::new(Box::pin(rx)))
    }

    #[tracing::instrument(name = "evaluate", skip_all, fields(env_id = %req.get_ref().env_id, items = req.get_ref().items.len()))]
    async fn evaluate(
        &self,
        req: Request<v1::EvaluateRequest>,
    ) -> Result<Response<v1::EvaluateResponse>, Status> {
        let deadline = deadline::from_request(&req);
        let response = super::evaluate::unary(&self.state, deadline, req.into_inner()).await?;
        Ok(Response::new(response))
    }

    type EvaluateStreamStream = EvaluateStream;

    #[tracing::instrument(name = "evaluate_stream", skip_all, fields(env_id = %req.get_ref().env_id, items = req.get_ref().items.len()))]
    async fn evaluate_stream(
        &self,
        req: Request<v1::EvaluateRequest>,
    ) -> Result<Response<Self::EvaluateStreamStream>, Status> {
        let deadline = deadline::from_request(&req);
        let rx = super::evaluate::stream(&self.state, deadline, req.into_inner())?;
        Ok(Response::new(Box::pin(rx)))
    }

    #[tracing::instrument(name = "list_tasks", skip_all, fields(env_id = %req.get_ref().env_id))]
    async fn list_tasks(
        &self,
        req: Request<v1::ListTasksRequest>,
    ) -> Result<Response<v1::ListTasksResponse>, Status> {
        let deadline = deadline::from_request(&req);
        let req = req.into_inner();
        let lister = self
            .state
            .registry
            .task_lister(&req.env_id)
            .map_err(ServerError::from)?;
        let kwargs =
            convert::json_object(&req.kwargs_json, "kwargs_json").map_err(ServerError::from)?;
        let offset = parse_page_token(&req.page_token)?;
        let size = match req.page_size as usize {
            0 => DEFAULT_PAGE_SIZE,
            n => n.min(MAX_PAGE_SIZE),
        };
        let page = deadline::within(deadline, async move {
            AssertUnwindSafe(lister.list(kwargs, offset, size))
                .catch_unwind()
                .await
                .map_err(|_| ServerError::EnvPanicked)?
                .map_err(ServerError::from)
        })
        .await?;
        let prompts = Prompts::default();
        let tasks = page
            .tasks
            .iter()
            .map(|task| {
                // Issue 14: the opening asks for the task's own language.
                let language = task.language.as_deref().unwrap_or("python");
                let (system, user) =
                    prompts.opening_in(EpisodeMode::CodeBlock, &task.prompt, "", language);
                convert::task_to_proto(task, &[("system", &system), ("user", &user)])
            })
            .collect::<Vec<_>>();
        let end = offset.saturating_add(tasks.len());
        let next_page_token = if end < page.total && !tasks.is_empty() {
            end.to_string()
        } else {
            String::new()
        };
        Ok(Response::new(v1::ListTasksResponse {
            tasks,
            next_page_token,
            total: page.total as u64,
        }))
    }
}

/// Tasks per `ListTasks` page when the request says 0, and the most a request may ask for.
const DEFAULT_PAGE_SIZE: usize = 100;
const MAX_PAGE_SIZE: usize = 1000;

/// The offset a page token stands for (tokens are decimal offsets; clients treat them as opaque).
fn parse_page_token(token: &str) -> Result<usize, ServerError> {
    if token.is_empty() {
        return Ok(0);
    }
    token
        .parse::<usize>()
        .map_err(|_| ServerError::BadPageToken(token.to_string()))
}
