//! Task listing behind the `ListTasks` RPC: the tasks an env draws from, page by page, so that
//! trainers can build datasets from the server's own task set.

use super::Kwargs;
use crate::EnvFuture;

/// One task as a listing shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskInfo {
    /// The id that `reset(options={"task_id": id})` accepts.
    pub id: String,
    /// What the model is asked (the observation of `reset`).
    pub prompt: String,
    /// Prepended to completions when scoring them (HumanEval convention), if the task has one.
    pub completion_prefix: Option<String>,
    /// Free-form metadata of the task.
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Issue 14: the language solutions are written in (`python`, `cpp`, ...), for envs whose
    /// tasks have one; `None` otherwise.
    pub language: Option<String>,
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskPage {
    /// At most the requested number of tasks, in the task set's order.
    pub tasks: Vec<TaskInfo>,
    /// How many tasks the whole set has.
    pub total: usize,
}

/// Lists the task set an env made with `kwargs` would draw from. Registered beside an env with
/// [`super::Registry::register_task_lister`]; envs without a task set have none.
pub trait TaskLister: Send + Sync {
    /// The tasks from index `offset` on, at most `limit` of them. Bad kwargs are
    /// [`crate::EnvError::InvalidKwargs`].
    fn list(&self, kwargs: Kwargs, offset: usize, limit: usize) -> EnvFuture<'_, TaskPage>;
}
