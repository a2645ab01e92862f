//! Auditing a repository task set: every attack derived from each task ([`attacks`]) is run in an
//! episode's copy as an agent's commands would be, and its diff scored like any answer. An attack
//! that resolves a task is a finding (HACKED); one the task marks `known_weak` (the attack's name
//! and why) is reported but does not fail the audit.

use std::sync::Arc;

use futures::StreamExt;
use serde::Serialize;

use super::{RepoScorer, attacks};
use crate::tasks::{RepoTask, RepoTaskSet};

/// How many attacks are scored at once (each is a sandboxed test suite).
const IN_FLIGHT: usize = 2;

/// One attack on one task.
#[derive(Debug, Clone, Serialize)]
pub struct RepoAttackResult {
    pub task_id: String,
    pub attack: String,
    pub what: String,
    /// The attack's patch resolved the task (reward 1).
    pub resolved: bool,
    /// The verdict's reason, or why the attack could not be scored.
    pub reason: Option<String>,
    /// What the scorer undid of the attack's patch.
    pub dropped: Vec<String>,
    /// The task's `known_weak` entry for this attack.
    pub known_weak: Option<String>,
    /// The attack could not be scored (an infrastructure error: counted as neither).
    pub error: Option<String>,
}

/// The audit of a set.
#[derive(Debug, Clone, Serialize)]
pub struct RepoAudit {
    pub results: Vec<RepoAttackResult>,
}

impl RepoAudit {
    /// The attacks that resolved a task.
    pub fn hacked(&self) -> impl Iterator<Item = &RepoAttackResult> {
        self.results.iter().filter(|r| r.resolved)
    }

    /// Some attack resolved a task that does not mark it known weak, or could not be scored.
    pub fn failed(&self) -> bool {
        self.results
            .iter()
            .any(|r| r.error.is_some() || (r.resolved && r.known_weak.is_none()))
    }

    /// `N of M attacks resolved a task (K known weak)`.
    pub fn summary(&self) -> String {
        let hacked = self.hacked().count();
        let weak = self.hacked().filter(|r| r.known_weak.is_some()).count();
        format!(
            "{hacked} of {} attacks resolved a task ({weak} of them known weak)",
            self.results.len()
        )
    }
}

async fn run_attack(
    scorer: &RepoScorer,
    task: &RepoTask,
    prepared: &super::Prepared,
    attack: attacks::RepoAttack,
) -> RepoAttackResult {
    let mut out = RepoAttackResult {
        task_id: task.id.clone(),
        attack: attack.name.to_string(),
        what: attack.what.to_string(),
        resolved: false,
        reason: None,
        dropped: Vec::new(),
        known_weak: task.known_weak.get(attack.name).cloned(),
        error: None,
    };
    let scored = async {
        let ws = scorer.episode(prepared)?;
        let ran = scorer.run(&ws, prepared, &attack.script, None).await?;
        if ran.exit_code != Some(0) {
            return Ok(Err(format!("the attack's script failed: {}", ran.stderr)));
        }
        let patch = match scorer.diff(&ws, prepared).await? {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        scorer.score(prepared, &patch).await.map(Ok)
    };
    match scored.await {
        Ok(Ok(v)) => {
            out.resolved = v.resolved;
            out.reason = v.reason;
            out.dropped = v.dropped;
        }
        Ok(Err(e)) => out.error = Some(e),
        Err(e) => out.error = Some(e.to_string()),
    }
    out
}

/// Runs every derived attack on every task of `set`.
pub async fn audit_repo_tasks(scorer: &RepoScorer, set: &RepoTaskSet) -> RepoAudit {
    let mut results = Vec::new();
    for task in &set.tasks {
        let prepared = match scorer.prepare(Arc::new(task.clone())).await {
            Ok(p) => p,
            Err(e) => {
                results.push(RepoAttackResult {
                    task_id: task.id.clone(),
                    attack: "prepare".into(),
                    what: "the task's prepared state".into(),
                    resolved: false,
                    reason: None,
                    dropped: Vec::new(),
                    known_weak: None,
                    error: Some(e.to_string()),
                });
                continue;
            }
        };
        let runs = attacks::derive(task)
            .into_iter()
            .map(|a| run_attack(scorer, task, &prepared, a));
        let mut done: Vec<RepoAttackResult> = futures::stream::iter(runs)
            .buffered(IN_FLIGHT)
            .collect()
            .await;
        results.append(&mut done);
    }
    RepoAudit { results }
}
