//! `codegym tasks check` on a repository task set: each task is prepared, its reference patch must
//! resolve it and the empty patch must not (a task the unchanged repository already passes would
//! reward doing nothing).

use std::sync::Arc;

use serde::Serialize;

use super::{RepoScorer, RepoVerdict};
use crate::tasks::RepoTaskSet;

/// One task's check.
#[derive(Debug, Clone, Serialize)]
pub struct RepoCheck {
    pub task_id: String,
    pub passed: bool,
    /// The reference patch's verdict.
    pub reference: Option<RepoVerdict>,
    /// The empty patch's verdict.
    pub empty: Option<RepoVerdict>,
    /// Why the check failed (including infrastructure failures: a setup that failed, a test
    /// command without a report).
    pub error: Option<String>,
    /// Time to prepare the task (setup run once, frozen), in milliseconds.
    pub prepare_ms: u64,
}

/// Checks every task of `set`, one after the other (each scoring run is a sandboxed test suite).
pub async fn check_repo_tasks(scorer: &RepoScorer, set: &RepoTaskSet) -> Vec<RepoCheck> {
    let mut out = Vec::with_capacity(set.tasks.len());
    for task in &set.tasks {
        let mut check = RepoCheck {
            task_id: task.id.clone(),
            passed: false,
            reference: None,
            empty: None,
            error: None,
            prepare_ms: 0,
        };
        let started = std::time::Instant::now();
        let prepared = scorer.prepare(Arc::new(task.clone())).await;
        check.prepare_ms = started.elapsed().as_millis() as u64;
        let prepared = match prepared {
            Ok(p) => p,
            Err(e) => {
                check.error = Some(e.to_string());
                out.push(check);
                continue;
            }
        };
        let (reference, empty) = futures::join!(
            scorer.score(&prepared, &task.patch),
            scorer.score(&prepared, "")
        );
        match (reference, empty) {
            (Ok(reference), Ok(empty)) => {
                check.error = match (reference.resolved, empty.resolved) {
                    (true, false) => None,
                    (false, _) => Some(format!(
                        "the reference patch does not resolve the task: {}",
                        reference.reason.as_deref().unwrap_or("")
                    )),
                    (true, true) => {
                        Some("the unchanged repository already resolves the task".into())
                    }
                };
                check.passed = check.error.is_none();
                check.reference = Some(reference);
                check.empty = Some(empty);
            }
            (Err(e), _) | (_, Err(e)) => check.error = Some(e.to_string()),
        }
        out.push(check);
    }
    out
}
