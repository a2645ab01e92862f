//! `codegym/Repo-v0`: a repository task as a Gymnasium env. `make` names a repository task file
//! (kwarg `tasks`, in a directory of `coding.task_dirs`, as for `codegym/Code-v0`); `reset` picks a
//! task (option `task_id`, else by seed, else the first), prepares it once per process (shared by
//! every env of the registration) and gives the episode its own copy; the observation is the
//! problem statement. Each step is one tool call ([`super::tools`]): its output is the
//! observation, with reward 0; `submit` scores the episode's diff in a fresh copy and ends the
//! episode with the verdict's reward and per-test breakdown in `info["verdict"]`. An episode is
//! truncated after [`REPO_MAX_STEPS`] calls.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use env_core::{
    AsyncEnv, AsyncEnvCreator, CallCost, EnvError, EnvFuture, EnvSpec, Info, Kwargs, Options,
    Registry, Space, Step, Value,
};
use tokio::sync::OnceCell;

use super::tools::{self, ToolCall};
use super::{Prepared, RepoError, RepoScorer};
use crate::env::text_space;
use crate::shared::Shared;
use crate::tasks::RepoTaskSet;
use codegym_sandbox::Workspace;

/// The id of the repository env (the contract's, which the rollout engine reads too).
pub use env_core::contract::repo::REPO_ENV_ID;

/// Steps per episode (tool calls, the submit included): agents on repositories take many turns,
/// unlike the coding env's few.
pub const REPO_MAX_STEPS: u32 = 100;

/// What a step shows of a command's output, at most (each stream).
const MAX_OUTPUT: usize = 16 << 10;

/// A task's prepared state, made by the first reset that needs it (keyed by task file and id).
type PreparedCell = Arc<OnceCell<Arc<Prepared>>>;

/// Task sets and prepared states, shared by every env of one registration.
pub(crate) struct RepoShared {
    shared: Arc<Shared>,
    scorer: RepoScorer,
    sets: Mutex<HashMap<String, Arc<RepoTaskSet>>>,
    prepared: Mutex<HashMap<(String, String), PreparedCell>>,
}

fn infra(e: RepoError) -> EnvError {
    EnvError::Infrastructure(e.to_string())
}

impl RepoShared {
    fn task_set(&self, name: &str) -> Result<Arc<RepoTaskSet>, EnvError> {
        if let Some(set) = self.sets.lock().ok().and_then(|m| m.get(name).cloned()) {
            return Ok(set);
        }
        self.shared.check_allowed(name)?;
        let set = RepoTaskSet::load(std::path::Path::new(name))
            .map_err(|e| EnvError::InvalidKwargs(format!("tasks: {e}")))?;
        let set = Arc::new(set);
        if let Ok(mut m) = self.sets.lock() {
            m.insert(name.to_string(), set.clone());
        }
        Ok(set)
    }

    /// The task's prepared state, prepared once (concurrent resets wait for the one preparation).
    async fn prepared(
        &self,
        set: &str,
        task: &crate::tasks::RepoTask,
    ) -> Result<Arc<Prepared>, EnvError> {
        let cell = self
            .prepared
            .lock()
            .map_err(|_| EnvError::Infrastructure("prepared states".into()))?
            .entry((set.to_string(), task.id.clone()))
            .or_default()
            .clone();
        let task = Arc::new(task.clone());
        cell.get_or_try_init(|| async { self.scorer.prepare(task).await.map_err(infra) })
            .await
            .cloned()
    }
}

struct Episode {
    prepared: Arc<Prepared>,
    ws: Workspace,
    steps: u64,
}

/// One env: a task set and, during an episode, its copy.
pub struct RepoEnv {
    repo: Arc<RepoShared>,
    set_name: String,
    set: Arc<RepoTaskSet>,
    episode: Option<Episode>,
}

fn clip(s: &str) -> String {
    if s.len() <= MAX_OUTPUT {
        return s.to_string();
    }
    let mut end = MAX_OUTPUT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[... {} more bytes]", &s[..end], s.len() - end)
}

impl RepoEnv {
    async fn reset_impl(
        &mut self,
        seed: Option<u64>,
        options: Options,
    ) -> Result<(Value, Info), EnvError> {
        self.episode = None;
        let tasks = &self.set.tasks;
        let task = match options.get("task_id") {
            Some(serde_json::Value::String(id)) => tasks
                .iter()
                .find(|t| &t.id == id)
                .ok_or_else(|| EnvError::InvalidOptions(format!("task_id: no task {id:?}")))?,
            Some(other) => {
                return Err(EnvError::InvalidOptions(format!(
                    "task_id: a string, not {other}"
                )));
            }
            None => &tasks[seed.map_or(0, |s| (s % tasks.len() as u64) as usize)],
        };
        let prepared = self.repo.prepared(&self.set_name, task).await?;
        let ws = self.repo.scorer.episode(&prepared).map_err(infra)?;
        let mut info = Info::new();
        info.insert("task_id".into(), task.id.clone().into());
        info.insert("tools".into(), tools::described());
        let obs = Value::Text(task.problem_statement.clone());
        self.episode = Some(Episode {
            prepared,
            ws,
            steps: 0,
        });
        Ok((obs, info))
    }

    async fn step_impl(&mut self, action: Value) -> Result<Step<Value>, EnvError> {
        let episode = self.episode.as_mut().ok_or(EnvError::ResetNeeded)?;
        let call = tools::decode(action)?;
        episode.steps += 1;
        let mut info = Info::new();
        info.insert("task_id".into(), episode.prepared.task.id.clone().into());
        info.insert("step".into(), episode.steps.into());
        let Some((command, files)) = tools::command(&call) else {
            return self.submit(info).await;
        };
        let result = self
            .repo
            .scorer
            .run_with_files(&episode.ws, &episode.prepared, &command, files)
            .await
            .map_err(infra)?;
        let mut obs = clip(&result.stdout);
        if !result.stderr.is_empty() {
            obs.push_str(&clip(&result.stderr));
        }
        if matches!(call, ToolCall::Bash { .. }) || result.exit_code != Some(0) {
            match (result.timed_out, result.exit_code) {
                (true, _) => obs.push_str("\n[the command hit its time limit]"),
                (false, Some(code)) => obs.push_str(&format!("\n[exit code {code}]")),
                (false, None) => obs.push_str("\n[killed]"),
            }
        }
        Ok(Step {
            obs: Value::Text(obs),
            reward: 0.0,
            terminated: false,
            truncated: false,
            info,
        })
    }

    async fn submit(&mut self, mut info: Info) -> Result<Step<Value>, EnvError> {
        let episode = self.episode.take().ok_or(EnvError::ResetNeeded)?;
        let scorer = &self.repo.scorer;
        let verdict = match scorer
            .diff(&episode.ws, &episode.prepared)
            .await
            .map_err(infra)?
        {
            Ok(diff) => {
                info.insert("patch".into(), diff.clone().into());
                scorer
                    .score(&episode.prepared, &diff)
                    .await
                    .map_err(infra)?
            }
            Err(reason) => super::RepoVerdict::unreadable(&episode.prepared, reason),
        };
        let (reward, obs) = submit_info(&mut info, &episode.prepared, &verdict);
        Ok(Step {
            obs: Value::Text(obs),
            reward,
            terminated: true,
            truncated: false,
            info,
        })
    }
}

/// A submit's verdict in its step's `info` (`solved`, `verdict`, and the prepared state's
/// `provenance`): its reward and observation. `codegym rescore` writes a rescored submit's the
/// same way.
pub fn submit_info(
    info: &mut Info,
    prepared: &Prepared,
    verdict: &super::RepoVerdict,
) -> (f64, String) {
    info.insert("solved".into(), verdict.resolved.into());
    info.insert(
        env_core::contract::info::PROVENANCE.into(),
        serde_json::to_value(&prepared.provenance).unwrap_or_default(),
    );
    info.insert(
        "verdict".into(),
        serde_json::to_value(verdict).unwrap_or_default(),
    );
    let obs = match &verdict.reason {
        None => "submitted: resolved".to_string(),
        Some(r) => format!("submitted: not resolved: {r}"),
    };
    (verdict.reward, obs)
}

impl AsyncEnv for RepoEnv {
    fn reset(&mut self, seed: Option<u64>, options: Options) -> EnvFuture<'_, (Value, Info)> {
        Box::pin(self.reset_impl(seed, options))
    }

    fn step(&mut self, action: Value) -> EnvFuture<'_, Step<Value>> {
        Box::pin(self.step_impl(action))
    }

    fn close(&mut self) -> EnvFuture<'_, ()> {
        self.episode = None;
        Box::pin(async { Ok(()) })
    }

    fn observation_space(&self) -> Space {
        text_space()
    }

    fn action_space(&self) -> Space {
        text_space()
    }
}

/// Registers `codegym/Repo-v0` over the coding envs' shared state (sandbox, package cache,
/// allowed task directories).
pub(crate) fn register_repo(registry: &mut Registry, shared: Arc<Shared>) -> Result<(), EnvError> {
    let scorer = RepoScorer::of(&shared.scorer);
    let repo = Arc::new(RepoShared {
        shared: shared.clone(),
        scorer,
        sets: Mutex::new(HashMap::new()),
        prepared: Mutex::new(HashMap::new()),
    });
    let spec = EnvSpec {
        id: REPO_ENV_ID.to_string(),
        description: "Fix a repository: shell commands and file tools in the episode's own copy, \
                      then submit; the diff is scored with hidden tests in a fresh copy"
            .to_string(),
        max_episode_steps: Some(REPO_MAX_STEPS),
        reward_threshold: Some(1.0),
        nondeterministic: true,
        observation_space: text_space(),
        action_space: text_space(),
        default_kwargs: Kwargs::new(),
        call_cost: CallCost::Blocking,
        metadata: Kwargs::new(),
    };
    let creator: AsyncEnvCreator = Arc::new(move |kwargs: Kwargs| {
        let repo = repo.clone();
        Box::pin(async move {
            let name = match kwargs.get("tasks") {
                Some(serde_json::Value::String(s)) => s.clone(),
                _ => {
                    return Err(EnvError::InvalidKwargs(
                        "tasks: the path of a repository task file".into(),
                    ));
                }
            };
            if let Some(k) = kwargs.keys().find(|k| *k != "tasks") {
                return Err(EnvError::InvalidKwargs(format!("unknown kwarg {k:?}")));
            }
            let (r, n) = (repo.clone(), name.clone());
            let set = tokio::task::spawn_blocking(move || r.task_set(&n))
                .await
                .map_err(|e| EnvError::Infrastructure(format!("loading a task set: {e}")))??;
            Ok(Box::new(RepoEnv {
                repo,
                set_name: name,
                set,
                episode: None,
            }) as Box<dyn AsyncEnv>)
        })
    });
    registry.register_async(spec, creator)
}
