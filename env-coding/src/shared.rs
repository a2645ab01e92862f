//! State shared by every env made from one `register`: the sandbox, the configuration and loaded task
//! sets; plus the per-env settings parsed from `make` kwargs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use env_core::{ChaCha8Rng, EnvError, Kwargs, Options};
use rand::Rng;

use crate::config::{CodingConfig, EnvKwargs, Mode};
use crate::reward::run::{EvalOptions, Program};
use crate::reward::{REWARD_SPEC_VERSION, RewardSpec};
use crate::scoring::Scorer;
use crate::tasks::{Task, TaskSet};
use code_extract::ExtractMode;
use codegym_sandbox::lang::Language;
use codegym_sandbox::{Limits, ReportSpec, Sandbox};

pub(crate) struct Shared {
    /// The one scoring engine (sandbox, package cache, verdict cache), shared with `Evaluate`.
    pub scorer: Arc<Scorer>,
    pub config: CodingConfig,
    /// Task sets by the name given in `tasks` (loaded once, shared by every env).
    task_sets: Mutex<HashMap<String, Arc<TaskSet>>>,
}

impl Shared {
    pub fn new(scorer: Arc<Scorer>, config: CodingConfig, default_tasks: TaskSet) -> Self {
        let mut sets = HashMap::new();
        sets.insert(config.tasks.clone(), Arc::new(default_tasks));
        Shared {
            scorer,
            config,
            task_sets: Mutex::new(sets),
        }
    }

    pub fn sandbox(&self) -> &Sandbox {
        self.scorer.sandbox()
    }

    /// The task set named `name`, loaded once. A first load reads files, so it runs on the blocking
    /// pool; later ones are a map lookup.
    async fn task_set(self: &Arc<Self>, name: &str) -> Result<Arc<TaskSet>, EnvError> {
        if let Some(set) = self
            .task_sets
            .lock()
            .ok()
            .and_then(|m| m.get(name).cloned())
        {
            return Ok(set);
        }
        let (me, name) = (self.clone(), name.to_string());
        tokio::task::spawn_blocking(move || me.load_task_set(&name))
            .await
            .map_err(|e| EnvError::Infrastructure(format!("loading a task set: {e}")))?
    }

    fn load_task_set(&self, name: &str) -> Result<Arc<TaskSet>, EnvError> {
        self.check_allowed(name)?;
        // Loading happens outside the lock: a large file must not stall every other `make`.
        let set = Arc::new(
            TaskSet::load(name).map_err(|e| EnvError::InvalidKwargs(format!("tasks: {e}")))?,
        );
        if let Ok(mut m) = self.task_sets.lock() {
            return Ok(m.entry(name.to_string()).or_insert(set).clone());
        }
        Ok(set)
    }

    /// A task file named by a client must lie in one of the configured task directories (after
    /// resolving symlinks and `..`). The error says nothing about the file itself: whether it exists
    /// is none of the client's business.
    pub(crate) fn check_allowed(&self, name: &str) -> Result<(), EnvError> {
        if name.starts_with("builtin:") {
            return Ok(()); // unknown builtin names fail in `TaskSet::load`, without IO
        }
        let allowed = std::fs::canonicalize(name).is_ok_and(|path| {
            self.config
                .task_dirs
                .iter()
                .any(|dir| std::fs::canonicalize(dir).is_ok_and(|dir| path.starts_with(dir)))
        });
        if allowed {
            Ok(())
        } else {
            Err(EnvError::InvalidKwargs(format!(
                "tasks: {name:?} is not in a task directory this server allows (`task_dirs`, `codegym serve --tasks-dir`)"
            )))
        }
    }
}

/// What one env was made with.
#[derive(Clone)]
pub(crate) struct Settings {
    pub tasks: Arc<TaskSet>,
    pub mode: Mode,
    pub extract: ExtractMode,
    pub limits: Option<Limits>,
    pub max_steps: Option<u32>,
    pub per_test_timeout_ms: u64,
    pub timeout_rerun: crate::timeouts::RerunPolicy,
    /// Issue 12: report variables unless an action says otherwise.
    pub variables: bool,
    /// Issue 12: score steps (`false`: ungraded episodes, see the `grade` kwarg).
    pub grade: bool,
    /// Issue 12: the host tools of the env's runs.
    pub tools: Option<codegym_sandbox::ToolHost>,
    /// Whether a script-mode step (and an `Evaluate` item) runs the program for its observation
    /// (the `observe` kwarg; an env in session mode refuses `false`: see `register`).
    pub observe: bool,
}

impl Settings {
    pub async fn from_kwargs(shared: &Arc<Shared>, kwargs: &Kwargs) -> Result<Settings, EnvError> {
        let kw = EnvKwargs::parse(kwargs).map_err(EnvError::InvalidKwargs)?;
        let mode = kw.mode.unwrap_or(shared.config.mode);
        let observe = kw.observe.unwrap_or(true);
        if !observe && kw.grade == Some(false) {
            return Err(EnvError::InvalidKwargs(
                "observe: false with grade: false leaves a step nothing to do".into(),
            ));
        }
        let limits = kw
            .limits(shared.sandbox().limits())
            .map_err(EnvError::InvalidKwargs)?;
        Ok(Settings {
            tasks: shared
                .task_set(kw.tasks.as_deref().unwrap_or(&shared.config.tasks))
                .await?,
            mode,
            extract: kw.extract.unwrap_or(shared.config.extract),
            limits,
            max_steps: kw.max_episode_steps,
            per_test_timeout_ms: shared.config.per_test_timeout_ms,
            timeout_rerun: shared.config.timeout_rerun,
            variables: kw.variables.unwrap_or(false),
            grade: kw.grade.unwrap_or(true),
            tools: crate::host_tools::host(&kw.tools, kw.tool_limits.as_ref())
                .map_err(EnvError::InvalidKwargs)?,
            observe,
        })
    }

    /// What a script-mode step submits: the program run for its observation and scored, or
    /// (`observe: false`) scored only, its plain run made only if the reward reads it.
    pub fn script_submission(&self, program: Program) -> crate::scoring::Submission {
        if self.observe {
            crate::scoring::Submission::Run(program)
        } else {
            crate::scoring::Submission::ScoreOnly(program)
        }
    }

    /// The task a step is scored by: `task`, or when ungraded the same task with an empty reward
    /// spec (which plans no scoring runs, scores 0 and never counts as solved).
    pub fn graded(&self, task: Arc<Task>) -> Arc<Task> {
        if self.grade {
            return task;
        }
        let mut ungraded = Task::clone(&task);
        ungraded.reward = RewardSpec {
            version: REWARD_SPEC_VERSION,
            components: Vec::new(),
            penalties: Default::default(),
        };
        Arc::new(ungraded)
    }

    /// Issue 12: a script-mode run's program: `vars` (the episode's) overridden by the action's
    /// own, reported as the action or the env's `variables` kwarg asks.
    pub fn script_program(
        &self,
        run: crate::action::Run,
        vars: &serde_json::Map<String, serde_json::Value>,
    ) -> Program {
        let mut merged = vars.clone();
        merged.extend(run.vars);
        // Issue 12's report channel and host tools live in the Python runner: other languages
        // (issue 14) run plain.
        let python = run.language == Language::Python;
        Program {
            source: run.code,
            files: Vec::new(),
            report: python.then(|| self.report_spec(merged, run.variables)),
            tools: if python { self.tools.clone() } else { None },
            language: run.language,
            data: Default::default(),
        }
    }

    /// Issue 12: what a run reports, given its vars and the action's `variables` flag.
    pub fn report_spec(
        &self,
        vars: serde_json::Map<String, serde_json::Value>,
        variables: Option<bool>,
    ) -> ReportSpec {
        ReportSpec {
            vars,
            variables: variables.unwrap_or(self.variables),
        }
    }

    /// Issue 12: the `vars` reset option, checked.
    pub fn reset_vars(
        options: &Options,
    ) -> Result<serde_json::Map<String, serde_json::Value>, EnvError> {
        match options.get("vars") {
            None => Ok(serde_json::Map::new()),
            Some(serde_json::Value::Object(vars)) => {
                ReportSpec::check_vars(vars).map_err(EnvError::InvalidOptions)?;
                Ok(vars.clone())
            }
            Some(other) => Err(EnvError::InvalidOptions(format!(
                "vars must be a JSON object of names to values, got {other}"
            ))),
        }
    }

    pub fn eval_options(&self) -> EvalOptions {
        EvalOptions {
            limits: self.limits,
            per_test_timeout_ms: self.per_test_timeout_ms,
            timeout_rerun: self.timeout_rerun,
        }
    }

    /// Issue 14: the episode's language: `options.language` (SandboxFusion's names and common
    /// aliases), else the task's.
    pub fn choose_language(&self, options: &Options, task: &Task) -> Result<Language, EnvError> {
        match options.get("language") {
            None | Some(serde_json::Value::Null) => Ok(task.language),
            Some(serde_json::Value::String(s)) => {
                Language::parse(s).map_err(|e| EnvError::InvalidOptions(e.to_string()))
            }
            Some(other) => Err(EnvError::InvalidOptions(format!(
                "language must be a string, got {other}"
            ))),
        }
    }

    /// The task of a `reset`: `options.task_id`, an inline `options.task`, or a seeded draw.
    pub fn choose_task(
        &self,
        options: &Options,
        rng: &mut ChaCha8Rng,
    ) -> Result<Arc<Task>, EnvError> {
        if let Some(k) = options.keys().find(|k| {
            !matches!(
                k.as_str(),
                "task_id"
                    | "task"
                    | "inputs"
                    | "files"
                    | "requirements"
                    | "language"
                    | "vars"
                    | "tests"
            )
        }) {
            return Err(EnvError::InvalidOptions(format!(
                "unknown option {k:?} (expected task_id, task, inputs, files, requirements, language, vars or tests)"
            )));
        }
        let task = with_test_set(self.choose_base_task(options, rng)?, options.get("tests"))?;
        // Data tasks (issue 13): `inputs` and `files` options run the task on other data (inline
        // only: a client never names a server path); `requirements` replace the task's (subject to
        // the server's package policy when the task is used).
        if !["inputs", "files", "requirements"]
            .iter()
            .any(|k| options.contains_key(*k))
        {
            return Ok(task);
        }
        let raw = crate::data::RawData {
            inputs: options.get("inputs").cloned(),
            files: options.get("files").cloned(),
            outputs: None,
            requirements: options.get("requirements").cloned(),
        };
        let mut task = Task::clone(&task);
        task.data
            .overlay(raw, None)
            .map_err(|e| EnvError::InvalidOptions(format!("task {:?}: {e}", task.id)))?;
        Ok(Arc::new(task))
    }

    fn choose_base_task(
        &self,
        options: &Options,
        rng: &mut ChaCha8Rng,
    ) -> Result<Arc<Task>, EnvError> {
        match (options.get("task_id"), options.get("task")) {
            (Some(_), Some(_)) => Err(EnvError::InvalidOptions(
                "give task_id or task, not both".into(),
            )),
            (Some(id), None) => {
                let id = match id {
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Number(n) => n.to_string(),
                    other => {
                        return Err(EnvError::InvalidOptions(format!(
                            "task_id must be a string, got {other}"
                        )));
                    }
                };
                self.tasks.get(&id).cloned().ok_or_else(|| {
                    EnvError::InvalidOptions(format!(
                        "unknown task {id:?} in {}",
                        self.tasks.source()
                    ))
                })
            }
            (None, Some(task)) => Task::from_json(task.clone())
                .map(Arc::new)
                .map_err(|e| EnvError::InvalidOptions(format!("task: {e}"))),
            (None, None) => {
                if self.tasks.is_empty() {
                    return Err(EnvError::InvalidOptions("the task set is empty".into()));
                }
                let i = rng.random_range(0..self.tasks.len());
                self.tasks
                    .by_index(i)
                    .cloned()
                    .ok_or_else(|| EnvError::InvalidOptions("the task set is empty".into()))
            }
        }
    }
}

/// Issue 14: the `tests` option (`"base"` or `"plus"`) chooses which inputs of a differential
/// (HumanEval+ / MBPP+) task count; any other task refuses it.
fn with_test_set(
    task: Arc<Task>,
    tests: Option<&serde_json::Value>,
) -> Result<Arc<Task>, EnvError> {
    let Some(tests) = tests else {
        return Ok(task);
    };
    let set: crate::differential::TestSet =
        serde_json::from_value(tests.clone()).map_err(|_| {
            EnvError::InvalidOptions("option tests: expected \"base\" or \"plus\"".into())
        })?;
    let mut owned = Task::clone(&task);
    let mut found = false;
    for c in &mut owned.reward.components {
        if let crate::reward::Component::Differential(d) = c {
            d.tests = set;
            found = true;
        }
    }
    if !found {
        return Err(EnvError::InvalidOptions(format!(
            "option tests: task {:?} has no differential (HumanEval+ / MBPP+) component",
            owned.id
        )));
    }
    Ok(Arc::new(owned))
}
