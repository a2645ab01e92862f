//! `codegym rescore`: the programs of a stored rollout scored again with the current tasks, reward
//! specs and sandbox, and every difference explained from the verdicts' provenance.
//!
//! An episode is replayed through the coding env itself (made with the record's `env_kwargs`, the
//! task set swapped for the current one, `reset` with the record's seed and task, then the
//! recorded actions as the tool calls the rollout sent), so a step is scored exactly as the
//! rollout's was: the same settings (mode, limits, per-test budget, grading), the same one
//! scoring engine. Script-mode steps are independent (each replayed after its own `reset`);
//! session-mode episodes replay every action in order, since a step's program is the cells before
//! it.
//!
//! A step that cannot be rescored (its task left the set, the sandbox failed) keeps its recorded
//! reward and says why in `rescore.error`: a machinery failure is never a reward. With
//! `repeat > 1` each replay runs that many times with the verdict cache off (repeats would
//! otherwise be free hits), and a step whose rewards were not all equal is flaky.
//!
//! A repository episode's answer is a diff: its submit step is rescored by scoring the recorded
//! diff again ([`repo`]), never by replaying its tool calls.
//!
//! With cross-checks ([`Rescorer::with_cross_checks`]) the rewarded steps the rollout's rules
//! select (`trajectory::cross_check`: the same steps a rollout with the same fraction checks) are
//! compared with their task's reference by the same [`Checker`] the rollout uses, after the
//! rescoring, and the outcome written on them with its penalty. A rescored step that a
//! cross-check had zeroed stays zeroed (its new reward goes to `cross_check.original_reward`).

mod checks;
mod repo;
mod summary;

use std::sync::Arc;

use env_core::{AsyncEnv, EnvError, Kwargs, Options, Registry, Value, contract};
use futures::StreamExt;
use serde_json::json;
use trajectory::cross_check::{earned_reward, solves};
use trajectory::record::{
    ActionRecord, DriftReason, EnvStepRecord, EpisodeMode, OnDisagreement, Provenance,
    RecordRescore, StepRescore, TrajectoryRecord,
};

use crate::config::{CodingConfig, EnvKwargs, Mode};
use crate::cross_check::Checker;
use crate::register::{CodingError, register};
use crate::scoring::Scorer;
use crate::tasks::{TaskError, TaskSet};
use checks::CrossChecks;
pub use summary::{Change, Flaky, NotRescored, Summary};

/// Which steps of an episode are rescored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Turns {
    /// The episode's last scored step (the one its `final_reward` is).
    #[default]
    Final,
    /// Every scored step.
    All,
}

/// Why a rescoring could not start.
#[derive(Debug, thiserror::Error)]
pub enum RescoreError {
    #[error(transparent)]
    Coding(#[from] CodingError),
    #[error("tasks: {0}")]
    Tasks(#[from] TaskError),
    #[error("--repeat must be at least 1")]
    Repeat,
    #[error("cross-checks compare programs with a reference; repository episodes have none")]
    RepositoryCrossCheck,
}

/// Episodes replayed at once (the sandbox paces the programs themselves).
const CONCURRENT_EPISODES: usize = 8;

/// The env registry of the current configuration and task set.
pub struct Rescorer {
    registry: Registry,
    tasks: TaskSet,
    default_mode: Mode,
    turns: Turns,
    repeat: u32,
    /// The env's scorer (the cross-checks run in its sandbox).
    scorer: Arc<Scorer>,
    cross_checks: Option<CrossChecks>,
    /// Repository episodes: their task set and prepared states (`None`: coding episodes).
    repo: Option<repo::RepoReplay>,
}

/// Why a step has no new verdict, and the details.
type Failure = (DriftReason, String);

/// One step's new verdict, or why there is none.
type StepOutcome = Result<(f64, serde_json::Map<String, serde_json::Value>), Failure>;

fn replay_failed(message: impl Into<String>) -> Failure {
    (DriftReason::ReplayFailed, message.into())
}

impl Rescorer {
    /// The env of `config` over the task set `tasks` (a file or `builtin:` name). `repeat > 1`
    /// turns the verdict cache off. Blocking (starts the sandbox, loads the tasks): call it at
    /// start-up, off the async runtime.
    pub fn new(
        mut config: CodingConfig,
        tasks: &str,
        turns: Turns,
        repeat: u32,
    ) -> Result<Rescorer, RescoreError> {
        if repeat == 0 {
            return Err(RescoreError::Repeat);
        }
        if repeat > 1 {
            config.verdict_cache_mib = 0;
        }
        config.tasks = tasks.to_string();
        let default_mode = config.mode;
        let set = TaskSet::load(tasks)?;
        let mut registry = Registry::new();
        let scorer = register(&mut registry, config)?;
        Ok(Rescorer {
            registry,
            tasks: set,
            default_mode,
            turns,
            repeat,
            scorer,
            cross_checks: None,
            repo: None,
        })
    }

    /// Rescores repository episodes: the current repository task file `tasks`, the sandbox of
    /// `config`. Blocking, like [`Rescorer::new`].
    pub fn repository(
        mut config: CodingConfig,
        tasks: &str,
        repeat: u32,
    ) -> Result<Rescorer, RescoreError> {
        if repeat == 0 {
            return Err(RescoreError::Repeat);
        }
        config.tasks = crate::tasks::BUILTIN_EXAMPLES_NAME.to_string();
        let mut rescorer = Rescorer::new(
            config,
            crate::tasks::BUILTIN_EXAMPLES_NAME,
            Turns::Final,
            repeat,
        )?;
        rescorer.repo = Some(repo::RepoReplay::new(&rescorer.scorer, tasks)?);
        Ok(rescorer)
    }

    /// Also cross-checks `fraction` of the rewarded steps (0 to 1; 0: none) as a rollout with the
    /// same fraction would, with `on_disagreement` as the penalty.
    pub fn with_cross_checks(
        mut self,
        fraction: f64,
        on_disagreement: OnDisagreement,
    ) -> Result<Self, RescoreError> {
        if self.repo.is_some() && fraction > 0.0 {
            return Err(RescoreError::RepositoryCrossCheck);
        }
        self.cross_checks = (fraction > 0.0).then(|| CrossChecks {
            checker: Checker::new(self.scorer.clone(), self.tasks.clone()),
            fraction,
            on_disagreement,
        });
        Ok(self)
    }

    /// `records` rescored (in their order) and the summary of what changed.
    pub async fn rescore(
        &self,
        records: Vec<TrajectoryRecord>,
    ) -> (Vec<TrajectoryRecord>, Summary) {
        let rescored: Vec<TrajectoryRecord> = futures::stream::iter(records)
            .map(|r| self.episode(r))
            .buffered(CONCURRENT_EPISODES)
            .collect()
            .await;
        let summary = Summary::of(
            &rescored,
            self.turns,
            self.repeat,
            self.cross_checks.is_some(),
        );
        (rescored, summary)
    }

    /// One episode rescored, then cross-checked.
    async fn episode(&self, record: TrajectoryRecord) -> TrajectoryRecord {
        let mut record = self.rescore_episode(record).await;
        if let Some(checks) = &self.cross_checks {
            checks.check(&mut record).await;
        }
        record
    }

    /// One episode's selected steps rescored, the record's outcome fields updated.
    async fn rescore_episode(&self, mut record: TrajectoryRecord) -> TrajectoryRecord {
        let scored: Vec<(usize, usize)> = record
            .turns
            .iter()
            .enumerate()
            .flat_map(|(t, turn)| {
                turn.env_steps
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| match self.repo {
                        Some(_) => repo::is_submit(s),
                        None => is_scored(s),
                    })
                    .map(move |(i, _)| (t, i))
            })
            .collect();
        let selected: Vec<(usize, usize)> = match self.turns {
            Turns::All => scored,
            Turns::Final => scored.last().copied().into_iter().collect(),
        };
        if selected.is_empty() {
            return record;
        }
        let mut runs: Vec<Vec<StepOutcome>> = vec![Vec::new(); selected.len()];
        for _ in 0..self.repeat {
            for (k, outcome) in self
                .replay(&record, &selected)
                .await
                .into_iter()
                .enumerate()
            {
                runs[k].push(outcome);
            }
        }
        let before = RecordRescore {
            recorded_final_reward: record.final_reward,
            recorded_total_reward: record.total_reward,
            recorded_solved: record.solved,
        };
        for (&(t, i), outcomes) in selected.iter().zip(runs) {
            apply(&mut record.turns[t].env_steps[i], outcomes);
        }
        let steps: Vec<&EnvStepRecord> = record.turns.iter().flat_map(|t| &t.env_steps).collect();
        record.total_reward = steps.iter().map(|s| s.reward).sum();
        record.final_reward = steps.last().map_or(0.0, |s| s.reward);
        record.solved = steps.iter().any(|s| solves(s));
        record.rescore = Some(before);
        if self.repo.is_some() {
            repo::keep_verdict(&mut record);
        }
        record
    }

    /// One replay of the episode: the outcome of each selected step.
    async fn replay(
        &self,
        record: &TrajectoryRecord,
        selected: &[(usize, usize)],
    ) -> Vec<StepOutcome> {
        if let Some(repo) = &self.repo {
            return repo.replay(record, selected).await;
        }
        let fail = |e: Failure| vec![Err(e); selected.len()];
        if matches!(
            record.mode,
            EpisodeMode::ProgramOfThought | EpisodeMode::Autocoder
        ) {
            let mode = serde_json::to_value(record.mode)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            return fail((
                DriftReason::NotReplayable,
                format!(
                    "{mode} episodes cannot be replayed (their runs depend on the rollout's own calls)"
                ),
            ));
        }
        if self.tasks.get(&record.task_id).is_none() {
            return fail((
                DriftReason::TaskMissing,
                format!("task {:?} is not in the current task set", record.task_id),
            ));
        }
        // The current task set replaces the recorded one; kwargs the env no longer takes (older
        // files) are left out rather than failing the replay.
        let kwargs: Kwargs = record
            .env_kwargs
            .iter()
            .filter(|(k, _)| *k != "tasks" && EnvKwargs::NAMES.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let session = match kwargs.get("mode").and_then(|m| m.as_str()) {
            Some(m) => m == "session",
            None => self.default_mode == Mode::Session,
        };
        let mut env = match self.registry.make_async(&record.env_id, &kwargs).await {
            Ok(env) => env,
            Err(e) => return fail(replay_failed(format!("make {}: {e}", record.env_id))),
        };
        let step = |t: usize, i: usize| &record.turns[t].env_steps[i];
        let mut out = Vec::with_capacity(selected.len());
        if session {
            // Every action in order; the selected steps' verdicts are kept.
            let first = step(selected[0].0, selected[0].1);
            if let Err(e) = reset(env.as_mut(), record, &first.action).await {
                return fail(e);
            }
            for (t, turn) in record.turns.iter().enumerate() {
                for (i, s) in turn.env_steps.iter().enumerate() {
                    if s.error.is_some() {
                        continue;
                    }
                    let Some(action) = env_action(&s.action) else {
                        continue;
                    };
                    let result = run_step(env.as_mut(), action).await;
                    if selected.contains(&(t, i)) {
                        out.push(result);
                    }
                }
            }
            out.resize(
                selected.len(),
                Err(replay_failed("the replayed episode ended early")),
            );
        } else {
            for &(t, i) in selected {
                let s = step(t, i);
                let result = match reset(env.as_mut(), record, &s.action).await {
                    Ok(()) => match env_action(&s.action) {
                        Some(action) => run_step(env.as_mut(), action).await,
                        None => Err(replay_failed("not an action that runs a program")),
                    },
                    Err(e) => Err(e),
                };
                out.push(result);
            }
        }
        let _ = env.close().await;
        out
    }
}

/// Whether the rollout's env scored `step`: a program it ran, or (session mode, where every
/// action is scored) any action that carries provenance.
fn is_scored(step: &EnvStepRecord) -> bool {
    step.error.is_none()
        && env_action(&step.action).is_some()
        && (step.action.code().is_some() || step.provenance.is_some())
}

/// `reset` with the record's seed and task, and the language of a program in another language.
async fn reset(
    env: &mut dyn AsyncEnv,
    record: &TrajectoryRecord,
    action: &ActionRecord,
) -> Result<(), Failure> {
    let mut options = Options::new();
    options.insert("task_id".into(), json!(record.task_id));
    if let ActionRecord::RunCode { language, .. }
    | ActionRecord::CodeBlock {
        language: Some(language),
        ..
    } = action
    {
        options.insert("language".into(), json!(language));
    }
    env.reset(Some(record.seed), options)
        .await
        .map(|_| ())
        .map_err(|e| replay_failed(format!("reset: {e}")))
}

async fn run_step(env: &mut dyn AsyncEnv, action: Value) -> StepOutcome {
    env.step(action)
        .await
        .map(|s| (s.reward, s.info))
        .map_err(|e: EnvError| replay_failed(format!("step: {e}")))
}

/// The env action the rollout sent for a recorded action (the tool call the coding env accepts in
/// every mode); `None` for actions that were not sent.
fn env_action(action: &ActionRecord) -> Option<Value> {
    let call = match action {
        ActionRecord::CodeBlock {
            code,
            language: None,
        }
        | ActionRecord::RunPython { code } => contract::run_python(code),
        ActionRecord::CodeBlock {
            code,
            language: Some(language),
        }
        | ActionRecord::RunCode { code, language } => contract::run_code(code, language),
        ActionRecord::WriteFile { path, content } => {
            json!({contract::tool::KEY: contract::tool::WRITE_FILE, "path": path, "content": content})
        }
        ActionRecord::ReadFile { path } => {
            json!({contract::tool::KEY: contract::tool::READ_FILE, "path": path})
        }
        ActionRecord::Invalid { .. }
        | ActionRecord::ModelTests { .. }
        | ActionRecord::RepoTool { .. } => return None,
    };
    Some(Value::Json(call))
}

/// Writes a step's rescoring: the new reward, info and provenance in place (the first run's), the
/// recorded ones and the reasons in `rescore`. A step whose first run failed keeps its recorded
/// verdict.
fn apply(step: &mut EnvStepRecord, outcomes: Vec<StepOutcome>) {
    let recorded = step.provenance.clone();
    let repeat_rewards: Vec<f64> = match outcomes.len() {
        1 => Vec::new(),
        _ => outcomes
            .iter()
            .filter_map(|o| o.as_ref().ok().map(|(r, _)| *r))
            .collect(),
    };
    let mut rescore = StepRescore {
        recorded_reward: earned_reward(step),
        recorded_provenance: recorded.clone(),
        changed: false,
        reasons: Vec::new(),
        repeat_rewards,
        error: None,
    };
    match outcomes.into_iter().next() {
        Some(Ok((reward, info))) => {
            let new: Option<Provenance> = info
                .get(contract::info::PROVENANCE)
                .and_then(|p| serde_json::from_value(p.clone()).ok());
            rescore.changed = reward != rescore.recorded_reward;
            rescore.reasons = match (&recorded, &new) {
                (None, _) => vec![DriftReason::NoProvenanceRecorded],
                (Some(old), Some(new)) => new.drift(old),
                (Some(_), None) => Vec::new(),
            };
            if rescore.changed && rescore.reasons.is_empty() {
                rescore.reasons.push(DriftReason::SameInputs);
            }
            step.reward = reward;
            // A cross-check's penalty outlives the rescoring: the program still disagrees.
            if let Some(check) = step.cross_check.as_mut().filter(|c| c.zeroes()) {
                check.original_reward = reward;
                step.reward = 0.0;
            }
            step.reward_breakdown = info.get(contract::info::REWARD_BREAKDOWN).cloned();
            step.provenance = new;
            step.info = info;
        }
        Some(Err((reason, message))) => {
            rescore.reasons.push(reason);
            rescore.error = Some(message);
        }
        None => rescore.error = Some("not replayed".into()),
    }
    step.rescore = Some(rescore);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provenance(toolchain: &str) -> Provenance {
        Provenance {
            toolchain: toolchain.into(),
            ..Provenance::default()
        }
    }

    fn step(reward: f64, provenance: Option<Provenance>) -> EnvStepRecord {
        serde_json::from_value(json!({
            "action": {"kind": "run_python", "code": "print(1)"},
            "reward": reward, "terminated": true, "truncated": false, "duration_ms": 1,
            "provenance": provenance,
        }))
        .unwrap()
    }

    fn verdict(reward: f64, provenance: &Provenance) -> StepOutcome {
        let mut info = serde_json::Map::new();
        info.insert(contract::info::PROVENANCE.into(), json!(provenance));
        Ok((reward, info))
    }

    #[test]
    fn a_new_reward_on_the_same_inputs_is_said_so_and_drift_is_named() {
        let p = provenance("Python 3.11.7");
        let mut s = step(1.0, Some(p.clone()));
        apply(&mut s, vec![verdict(0.0, &p)]);
        let rs = s.rescore.unwrap();
        assert!(
            rs.changed && rs.reasons == [DriftReason::SameInputs],
            "{rs:?}"
        );
        assert_eq!((s.reward, rs.recorded_reward), (0.0, 1.0));

        let mut s = step(1.0, Some(p.clone()));
        apply(&mut s, vec![verdict(1.0, &provenance("Python 3.12.0"))]);
        let rs = s.rescore.unwrap();
        assert!(
            !rs.changed && rs.reasons == [DriftReason::ToolchainChanged],
            "{rs:?}"
        );
        assert_eq!(s.provenance.unwrap().toolchain, "Python 3.12.0");
        assert_eq!(rs.recorded_provenance, Some(p));
    }

    #[test]
    fn a_failure_keeps_the_recorded_verdict_and_repeats_are_kept() {
        let p = provenance("Python 3.11.7");
        let mut s = step(1.0, Some(p.clone()));
        apply(&mut s, vec![Err(replay_failed("step: sandbox: gone"))]);
        let rs = s.rescore.unwrap();
        assert_eq!(s.reward, 1.0);
        assert_eq!(s.provenance, Some(p.clone()));
        assert_eq!(rs.error.as_deref(), Some("step: sandbox: gone"));
        assert_eq!(rs.reasons, [DriftReason::ReplayFailed]);

        let mut s = step(1.0, None);
        apply(
            &mut s,
            vec![verdict(1.0, &p), verdict(0.0, &p), verdict(1.0, &p)],
        );
        let rs = s.rescore.unwrap();
        assert_eq!(rs.repeat_rewards, [1.0, 0.0, 1.0]);
        assert_eq!(rs.reasons, [DriftReason::NoProvenanceRecorded]);
    }
}
