//! `codegym/Code-v0`: the Gymnasium environment.
//!
//! `reset` picks a task and observes its prompt; each `step` runs the action's program (script mode:
//! a fresh process; session mode: a persistent interpreter) and observes the execution. The reward is
//! the task's reward spec evaluated on fresh runs; `terminated` when solved.
//!
//! The env is natively asynchronous ([`AsyncEnv`]): a step awaits the sandbox, so a waiting step holds
//! no thread. Cancelling a session-mode step (dropping its future) can leave the interpreter between
//! two messages; a caller that gives up on a step either lets it finish (the server does) or drops the
//! env (the rollout does).

use env_core::contract::info;
use std::sync::Arc;

use env_core::{
    AsyncEnv, ChaCha8Rng, EnvError, EnvFuture, Info, Options, Result, Space, Step, Value,
};
use serde_json::json;

use crate::action::{Action, decode_action, no_code_result};
use crate::config::Mode;
use crate::reward::run::{self, Program};
use crate::scoring::{Scored, Submission, infra};
use crate::shared::{Settings, Shared};
use crate::tasks::Task;
use codegym_sandbox::PySession;
use codegym_sandbox::lang::Language;
use codegym_sandbox::{MAX_READ_BYTES, read_beneath, write_beneath};

/// Largest text of the observation and action spaces.
pub const MAX_TEXT_LEN: usize = 1 << 20;

pub(crate) fn text_space() -> Space {
    Space::Text {
        min_length: 0,
        max_length: MAX_TEXT_LEN,
        charset: None,
    }
}

/// A step's `info`: the task, the verdict (`solved`, `reward_breakdown`, whether it was shared from
/// an identical submission: `cache_hit`, what produced it: `provenance`), the step number and the
/// mode.
pub(crate) fn step_info(task: &Task, scored: &Scored, step: u32, mode: Mode) -> Info {
    let mut info = Info::new();
    info.insert(info::TASK_ID.into(), json!(task.id));
    info.insert(info::SOLVED.into(), json!(scored.outcome.solved));
    info.insert(info::REWARD_BREAKDOWN.into(), scored.outcome.breakdown());
    info.insert(info::CACHE_HIT.into(), json!(scored.cache_hit));
    info.insert(info::PROVENANCE.into(), json!(scored.provenance));
    info.insert(info::STEP.into(), json!(step));
    info.insert(info::MODE.into(), json!(mode));
    info
}

struct Episode {
    /// The task as scored: requirements resolved, and with no reward spec when ungraded.
    task: Arc<Task>,
    /// Issue 14: the episode's language (the task's, or the reset option's).
    language: Language,
    steps: u32,
    ended: bool,
    session: Option<PySession>,
    /// Session mode: the cells that ran cleanly, and the files written, replayed for rewards (an
    /// unchanged program is not run again: the scorer's verdict cache answers).
    program: Program,
    /// Issue 12: the reset's `vars`. Script mode sets them in every run; session mode sets them
    /// once in the live namespace, with the first cell (then taken).
    vars: serde_json::Map<String, serde_json::Value>,
}

/// The `codegym/Code-v0` environment.
pub struct CodingEnv {
    shared: Arc<Shared>,
    settings: Settings,
    rng: ChaCha8Rng,
    episode: Option<Episode>,
    closed: bool,
}

impl std::fmt::Debug for CodingEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodingEnv")
            .field("mode", &self.settings.mode)
            .field("tasks", &self.settings.tasks.source())
            .field("task", &self.episode.as_ref().map(|e| e.task.id.clone()))
            .finish()
    }
}

impl CodingEnv {
    pub(crate) fn new(shared: Arc<Shared>, settings: Settings) -> Self {
        CodingEnv {
            shared,
            settings,
            rng: env_core::entropy_rng(),
            episode: None,
            closed: false,
        }
    }

    async fn end_session(&mut self) {
        if let Some(session) = self.episode.as_mut().and_then(|e| e.session.take()) {
            // Dropping a session kills it synchronously; close() also waits for the cleanup.
            session.close().await;
        }
    }

    /// Scores `submission` for the episode's task: the one engine, with the env's options.
    async fn score_episode(&self, submission: Submission) -> Result<Scored> {
        let Some(ep) = self.episode.as_ref() else {
            return Err(EnvError::ResetNeeded);
        };
        let options = self.settings.eval_options();
        let task = ep.task.clone();
        self.shared.scorer.score(task, submission, options).await
    }

    /// A script-mode step: the submission's own run is the observation.
    async fn step_scored(&mut self, submission: Submission) -> Result<Step<Value>> {
        let scored = self.score_episode(submission).await?;
        let obs = Value::Execution(scored.execution.clone());
        Ok(self.finish_step(obs, scored).await)
    }

    async fn ensure_session(&mut self) -> Result<Option<&'static str>> {
        let Some(ep) = self.episode.as_mut() else {
            return Err(EnvError::ResetNeeded);
        };
        let mut notice = None;
        if ep.session.as_ref().is_some_and(|s| !s.is_alive()) {
            ep.session = None;
            notice = Some(
                "codegym: the previous interpreter ended (timeout, crash or exit); this step runs in a fresh \
                 one, so earlier variables and files are gone\n",
            );
        }
        if ep.session.is_none() {
            let session = self
                .shared
                .sandbox()
                .open_session_with(
                    self.settings.limits,
                    &ep.task.data.run_data(),
                    self.settings.tools.clone(),
                )
                .await
                .map_err(infra)?;
            ep.session = Some(session);
        }
        Ok(notice)
    }

    async fn step_session(&mut self, action: Action) -> Result<Step<Value>> {
        let notice = self.ensure_session().await?;
        let shared = self.shared.clone();
        let Some(ep) = self.episode.as_mut() else {
            return Err(EnvError::ResetNeeded);
        };
        let Some(session) = ep.session.as_mut() else {
            return Err(EnvError::Infrastructure("no session".into()));
        };
        let max_file = self
            .settings
            .limits
            .unwrap_or(*shared.sandbox().limits())
            .max_file_bytes;
        let obs = match action {
            Action::Code(run) if run.language != Language::Python => {
                let language = run.language;
                return Err(EnvError::InvalidAction(format!(
                    "session mode runs Python only; {language} programs need mode \"script\""
                )));
            }
            Action::Code(run) => {
                // Issue 12: the reset's vars (first cell only) and the action's, in the live
                // namespace; the replayed program sets them too, whether or not the cell succeeds.
                let mut vars = std::mem::take(&mut ep.vars);
                vars.extend(run.vars);
                ep.program.source.push_str(&run::vars_prologue(&vars));
                let spec = self.settings.report_spec(vars, run.variables);
                let code = run.code;
                let outcome = session
                    .exec_reporting(&code, None, Some(&spec))
                    .await
                    .map_err(infra)?;
                if outcome.success() {
                    ep.program.source.push_str(&code);
                    if !code.ends_with('\n') {
                        ep.program.source.push('\n');
                    }
                }
                let mut result = outcome;
                if let Some(n) = notice {
                    result.stderr.insert_str(0, n);
                }
                Value::Execution(result)
            }
            Action::NoCode => Value::Execution(no_code_result(Language::Python)),
            Action::WriteFile { path, content } => {
                match write_beneath(session.work_dir(), &path, content.as_bytes(), max_file) {
                    Ok(()) => {
                        ep.program.files.retain(|(p, _)| p != &path);
                        ep.program.files.push((path.clone(), content.into_bytes()));
                        Value::Text(format!("wrote {path}"))
                    }
                    Err(e) => Value::Text(format!("error: {e}")),
                }
            }
            Action::ReadFile { path } => {
                match read_beneath(session.work_dir(), &path, MAX_READ_BYTES) {
                    Ok((bytes, cut)) => {
                        let mut text = String::from_utf8_lossy(&bytes).into_owned();
                        if cut {
                            text.push_str("\n[codegym: truncated]");
                        }
                        Value::Text(text)
                    }
                    Err(e) => Value::Text(format!("error: {e}")),
                }
            }
        };
        let program = ep.program.clone();
        let scored = self.score_episode(Submission::ScoreOnly(program)).await?;
        Ok(self.finish_step(obs, scored).await)
    }

    async fn finish_step(&mut self, obs: Value, scored: Scored) -> Step<Value> {
        let mode = self.settings.mode;
        let max_steps = self.settings.max_steps;
        let Some(ep) = self.episode.as_mut() else {
            return Step {
                obs,
                reward: 0.0,
                terminated: false,
                truncated: false,
                info: Info::new(),
            };
        };
        ep.steps += 1;
        let terminated = scored.outcome.solved;
        let truncated = !terminated && max_steps.is_some_and(|m| ep.steps >= m);
        ep.ended = terminated || truncated;
        let mut info = step_info(&ep.task, &scored, ep.steps, mode);
        // Issue 12: timings and memory in `info` (non-deterministic: not for the observation).
        if let Value::Execution(r) = &obs {
            info.insert(info::EXECUTION_TIME_MS.into(), json!(r.wall_ms));
            info.insert(info::MEMORY_USED_BYTES.into(), json!(r.peak_rss_bytes));
        }
        if ep.ended {
            self.end_session().await;
        }
        Step {
            obs,
            reward: scored.outcome.reward,
            terminated,
            truncated,
            info,
        }
    }
}

impl CodingEnv {
    async fn reset_episode(
        &mut self,
        seed: Option<u64>,
        options: Options,
    ) -> Result<(Value, Info)> {
        if self.closed {
            return Err(EnvError::ClosedEnvironment);
        }
        if let Some(seed) = seed {
            self.rng = env_core::seeded_rng(seed);
        }
        let task = self.settings.choose_task(&options, &mut self.rng)?;
        let task = self
            .settings
            .graded(self.shared.scorer.prepare(task).await?);
        let language = self.settings.choose_language(&options, &task)?;
        self.shared.sandbox().supports(language).map_err(infra)?;
        if language != Language::Python && self.settings.mode == Mode::Session {
            return Err(EnvError::InvalidOptions(format!(
                "session mode runs Python only; a {language} episode needs mode \"script\""
            )));
        }
        let vars = Settings::reset_vars(&options)?;
        self.end_session().await;
        self.episode = Some(Episode {
            task: task.clone(),
            language,
            steps: 0,
            ended: false,
            session: None,
            program: Program {
                data: task.data.clone(),
                ..Program::default()
            },
            vars,
        });
        if self.settings.mode == Mode::Session {
            self.ensure_session().await?;
        }
        let mut info = Info::new();
        info.insert(info::TASK_ID.into(), json!(task.id));
        info.insert(
            "metadata".into(),
            serde_json::Value::Object(task.metadata.clone()),
        );
        info.insert(info::MODE.into(), json!(self.settings.mode));
        // Data tasks (issue 13): the summary of the task's CSV/JSON files, for prompt templates.
        if let Some(ctx) = &task.data.context {
            info.insert(info::DATA_CONTEXT.into(), json!(ctx.text));
        }
        // Issue 14: the episode's language, so that a rollout extracts and sends code in it.
        info.insert(info::LANGUAGE.into(), json!(language));
        Ok((Value::Text(task.prompt.clone()), info))
    }

    async fn step_action(&mut self, action: Value) -> Result<Step<Value>> {
        if self.closed {
            return Err(EnvError::ClosedEnvironment);
        }
        match &self.episode {
            None => return Err(EnvError::ResetNeeded),
            Some(ep) if ep.ended => return Err(EnvError::EpisodeEnded),
            Some(_) => {}
        }
        let language = self
            .episode
            .as_ref()
            .map_or(Language::Python, |e| e.language);
        let action = decode_action(action, self.settings.extract, language)?;
        match (self.settings.mode, action) {
            (Mode::Script, Action::Code(run)) => {
                let Some(ep) = self.episode.as_ref() else {
                    return Err(EnvError::ResetNeeded);
                };
                let program = self.settings.script_program(run, &ep.vars);
                self.step_scored(self.settings.script_submission(program)).await
            }
            (Mode::Script, Action::NoCode) => self.step_scored(Submission::NoCode(language)).await,
            (Mode::Script, Action::WriteFile { .. } | Action::ReadFile { .. }) => Err(EnvError::InvalidAction(
                "write_file and read_file need mode \"session\" (script mode keeps no files between steps)".into(),
            )),
            (Mode::Session, action) => self.step_session(action).await,
        }
    }

    async fn close_env(&mut self) -> Result<()> {
        self.end_session().await;
        self.episode = None;
        self.closed = true;
        Ok(())
    }
}

impl AsyncEnv for CodingEnv {
    fn reset(&mut self, seed: Option<u64>, options: Options) -> EnvFuture<'_, (Value, Info)> {
        Box::pin(self.reset_episode(seed, options))
    }

    fn step(&mut self, action: Value) -> EnvFuture<'_, Step<Value>> {
        Box::pin(self.step_action(action))
    }

    fn close(&mut self) -> EnvFuture<'_, ()> {
        Box::pin(self.close_env())
    }

    fn observation_space(&self) -> Space {
        text_space()
    }

    fn action_space(&self) -> Space {
        text_space()
    }
}
