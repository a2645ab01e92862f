//! `codegym.v1.EnvService`: the unary RPCs and `ListTasks` (`Evaluate` lives in `evaluate.rs`, the
//! `Session` stream in `stream.rs`, the parsing both share in `requests.rs`). `ListTasks` renders
//! each task's opening messages with the rollout engine's default prompts, so datasets prompt
//! models exactly as `codegym rollout` does.

use std::pin::Pin;
use std::sync::Arc;

use std::panic::AssertUnwindSafe;

use futures::{FutureExt, Stream};
use prompts::{EpisodeMode, Prompts};
use proto::convert;
use proto::v1;
use tonic::{Request, Response, Status, Streaming};

use super::admission::admit;
use super::deadline;
use super::requests::{make_response, parse_action, parse_make, parse_reset, reset_response};
use super::state::State;
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
        let client = req.remote_addr().map(|a| a.ip());
        let state = &self.state;
        let response = deadline::within(deadline, async {
            let req = req.into_inner();
            let kwargs = parse_make(&req, false)?;
            let admitted = admit(state, client, &req.env_id, &kwargs).await?;
            let session = state
                .sessions
                .insert(admitted.spec, admitted.env, admitted.slot);
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
        let client = req.remote_addr().map(|a| a.ip());
        let rx = super::stream::spawn(self.state.clone(), req.into_inner(), client, span);
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
