//! What `codegym rollout --tasks` names, and how the env gets it: a coding task set (native JSONL,
//! HumanEval, MBPP, `builtin:`) for the coding envs, sent inline to env servers; or, for the
//! repository env (`codegym/Repo-v0`), a repository task file, which never travels inline (a task
//! carries its repository): the env loads the file itself, named by its path in the `tasks`
//! kwarg, in process (its directory allowed) as on env servers (in one of their `--tasks-dir`s,
//! checked on each server before the run starts).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use env_coding::tasks::{BUILTIN_EXAMPLES_NAME, RepoTaskSet, TaskSet};
use env_core::contract::repo::REPO_ENV_ID;
use rollout::backend::RemoteBackend;

/// The run's task set.
pub enum RolloutTasks {
    /// Coding tasks.
    Coding(TaskSet),
    /// Repository tasks, and the file's canonical path (what the env is made with).
    Repository(RepoTaskSet, PathBuf),
}

impl RolloutTasks {
    /// Loads `tasks` as the task set of `env_id`.
    pub fn load(env_id: &str, tasks: &str) -> anyhow::Result<RolloutTasks> {
        if env_id == REPO_ENV_ID {
            let path = std::fs::canonicalize(tasks)
                .with_context(|| format!("cannot read the repository task file {tasks}"))?;
            let set = RepoTaskSet::load(&path).with_context(|| {
                format!("{REPO_ENV_ID} needs a repository task file: cannot load {tasks}")
            })?;
            return Ok(RolloutTasks::Repository(set, path));
        }
        if RepoTaskSet::detect(Path::new(tasks)) {
            anyhow::bail!(
                "{tasks} is a repository task file: run it with --env-id {REPO_ENV_ID} --mode tools"
            );
        }
        let set = TaskSet::load(tasks).with_context(|| format!("cannot load tasks {tasks}"))?;
        Ok(RolloutTasks::Coding(set))
    }

    /// Every task id, in the file's order.
    pub fn ids(&self) -> Vec<String> {
        match self {
            RolloutTasks::Coding(set) => set.ids().map(String::from).collect(),
            RolloutTasks::Repository(set, _) => set.tasks.iter().map(|t| t.id.clone()).collect(),
        }
    }

    /// Whether the set has a task `id`.
    pub fn contains(&self, id: &str) -> bool {
        match self {
            RolloutTasks::Coding(set) => set.get(id).is_some(),
            RolloutTasks::Repository(set, _) => set.tasks.iter().any(|t| t.id == id),
        }
    }

    /// The file the env loads itself (its `tasks` kwarg): a repository file always, a coding
    /// file in process (remote coding envs get their tasks inline); `None` for the built-in set.
    pub fn env_file(&self, tasks: &str, remote: bool) -> Option<PathBuf> {
        match self {
            RolloutTasks::Repository(_, path) => Some(path.clone()),
            RolloutTasks::Coding(_) if remote || tasks == BUILTIN_EXAMPLES_NAME => None,
            RolloutTasks::Coding(_) => {
                Some(std::fs::canonicalize(tasks).unwrap_or_else(|_| PathBuf::from(tasks)))
            }
        }
    }

    /// The coding tasks (cross-checks compare with their references).
    pub fn coding(&self) -> Option<&TaskSet> {
        match self {
            RolloutTasks::Coding(set) => Some(set),
            RolloutTasks::Repository(..) => None,
        }
    }

    /// The env servers' backend for this set: coding tasks travel inline in `reset` (the servers
    /// need neither the file nor a `--tasks-dir`, and a server on another machine sees exactly the
    /// tasks loaded here); a repository file must be in a `--tasks-dir` of every server, checked
    /// now by making the env on each, so that a server without it fails the run before it starts.
    pub async fn remote(
        &self,
        pool: RemoteBackend,
        ids: &[String],
        env_id: &str,
        kwargs: &env_core::Kwargs,
    ) -> anyhow::Result<RemoteBackend> {
        match self {
            RolloutTasks::Coding(set) => {
                let inline: HashMap<String, serde_json::Value> = ids
                    .iter()
                    .filter_map(|id| set.get(id).map(|t| (id.clone(), t.to_json())))
                    .collect();
                Ok(pool.with_inline_tasks(inline))
            }
            RolloutTasks::Repository(_, path) => {
                if let Err((server, e)) = pool.make_on_each(env_id, kwargs).await {
                    anyhow::bail!(
                        "env server {server} cannot load the repository task file {}: {e} \
                         (repository tasks are never sent inline: start the server with the \
                         file's directory as a --tasks-dir, at the same path)",
                        path.display()
                    );
                }
                Ok(pool)
            }
        }
    }
}
