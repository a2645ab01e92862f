//! The one scoring engine: [`Scorer::score`] turns (task, program) into an observation, a reward
//! and its breakdown. Every surface scores through it: the env's `reset`/`step` (script and
//! session mode), `Evaluate`/`EvaluateStream`, SandboxFusion's `/submit` (through `Evaluate`),
//! `codegym evaluate`, `codegym tasks check` and, since a rollout's rewards are its env steps,
//! every rollout. Two surfaces can then only disagree when they hand it different inputs.
//!
//! A [`Scorer`] is built from the `coding` section of the config file ([`CodingConfig`], the one
//! sandbox config source): its sandbox, its package cache (task requirements) and its verdict
//! cache (`verdicts.rs`, identical submissions of a deterministic task share one verdict).
//! Whatever the surface, [`Scorer::score`] resolves the task's requirements, gives the program the
//! task's data (input files, inputs, declared outputs), checks that the sandbox runs the
//! program's language, and consults the verdict cache before running anything.

use std::sync::Arc;

use env_core::{EnvError, ExecutionResult};

use crate::action::no_code_result;
use crate::config::CodingConfig;
use crate::reward::RewardOutcome;
use crate::reward::run::{self, EvalOptions, Program};
use crate::tasks::Task;
use crate::verdicts::{Verdict, VerdictCache};
use codegym_sandbox::lang::Language;
use codegym_sandbox::packages::{PackageCache, PackageError};
use codegym_sandbox::{PreparedStore, Sandbox, SandboxConfig, SandboxError};
use trajectory::record::Provenance;

/// What [`Scorer::score`] scores.
#[derive(Debug, Clone)]
pub enum Submission {
    /// A program, run for the caller's observation and scored (a script-mode step, `Evaluate`,
    /// `/submit`, `codegym run`).
    Run(Program),
    /// A program scored without an observation: its plain run happens only if the score reads it
    /// ([`crate::reward::RewardSpec::needs_plain_run`]), so the reward is [`Submission::Run`]'s
    /// (session mode, whose observation is the live interpreter's; `codegym evaluate`, `tasks
    /// check` and an env made with `observe: false`, which report verdicts only: a unit-test task
    /// then costs one sandboxed run, not two).
    ScoreOnly(Program),
    /// No program (the response had no code block): the empty program in this language, scored so
    /// that the breakdown has the task's usual shape; the observation says nothing was run.
    NoCode(Language),
}

impl Submission {
    /// Whether the program calls host tools: their answers come from the caller, outside any
    /// cache key, so such a verdict is never shared.
    fn calls_host_tools(&self) -> bool {
        match self {
            Submission::Run(p) | Submission::ScoreOnly(p) => p.tools.is_some(),
            Submission::NoCode(_) => false,
        }
    }

    fn language(&self) -> Language {
        match self {
            Submission::Run(p) | Submission::ScoreOnly(p) => p.language,
            Submission::NoCode(language) => *language,
        }
    }
}

/// The verdict on one submission.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// The observation: the program's plain run ([`Submission::Run`]), the no-code notice
    /// ([`Submission::NoCode`]), or an empty result ([`Submission::ScoreOnly`]).
    pub execution: ExecutionResult,
    /// Reward, `solved` and the per-component breakdown ([`RewardOutcome::breakdown`]).
    pub outcome: RewardOutcome,
    /// Whether the verdict was shared from an identical submission instead of run here.
    pub cache_hit: bool,
    /// What produced the reward (`provenance.rs`); a shared verdict carries its run's.
    pub provenance: Provenance,
}

/// Why a [`Scorer`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ScorerError {
    #[error("sandbox: {0}")]
    Sandbox(#[from] SandboxError),
    #[error("{0}")]
    Packages(#[from] PackageError),
    #[error("coding config: {0}")]
    Config(String),
}

/// A sandbox for scoring: `config` plus the trusted programs the rewards run as `main.py` (the
/// unit-test harness, the differential runner), which the warm backend compiles once. Blocking
/// (tens of ms): call at start-up.
pub fn new_sandbox(mut config: SandboxConfig) -> Result<Sandbox, SandboxError> {
    for source in [
        crate::reward::harness::HARNESS_SOURCE,
        crate::differential::RUNNER_SOURCE,
    ] {
        if !config.precompiled.iter().any(|s| s == source) {
            config.precompiled.push(source.to_string());
        }
    }
    Sandbox::new(config)
}

/// The scoring engine of one configuration: sandbox, package cache, verdict cache and the
/// configured scoring options.
pub struct Scorer {
    sandbox: Arc<Sandbox>,
    verdicts: VerdictCache,
    /// `None` unless the configuration allows task requirements.
    packages: Option<Arc<PackageCache>>,
    /// Repository tasks' persistent prepared states (`None`: disabled).
    prepared: Option<Arc<PreparedStore>>,
    options: EvalOptions,
}

impl std::fmt::Debug for Scorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scorer")
            .field("options", &self.options)
            .field("packages", &self.packages.is_some())
            .finish()
    }
}

impl Scorer {
    /// The engine `config` describes (`coding.sandbox`, `coding.packages`,
    /// `coding.verdict_cache_mib`, `coding.per_test_timeout_ms`), built the same way for
    /// `codegym serve` and the CLI commands. Blocking (probes the sandbox): call at start-up.
    pub fn new(config: &CodingConfig) -> Result<Scorer, ScorerError> {
        config
            .timeout_rerun
            .validate()
            .map_err(ScorerError::Config)?;
        // The package cache exists before the sandbox probes its mount plan.
        let mut sandbox_config = config.sandbox.clone();
        if config.packages.enabled {
            codegym_sandbox::packages::create_cache_dir(&config.packages)?;
            sandbox_config
                .read_only_dirs
                .push(config.packages.cache_dir.clone());
        }
        let sandbox = Arc::new(new_sandbox(sandbox_config)?);
        let packages = config
            .packages
            .enabled
            .then(|| PackageCache::new(config.packages.clone(), sandbox.python().to_path_buf()));
        Ok(Scorer {
            sandbox,
            verdicts: VerdictCache::new(config.verdict_cache_mib),
            packages,
            prepared: PreparedStore::from_config(&config.prepared).map(Arc::new),
            options: EvalOptions {
                limits: None,
                per_test_timeout_ms: config.per_test_timeout_ms,
                timeout_rerun: config.timeout_rerun,
            },
        })
    }

    /// The sandbox every scoring run uses (also the env's session interpreters and `/run_code`).
    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sandbox
    }

    /// The task package cache, when packages are enabled (repository tasks resolve their
    /// requirements through it, `crate::repo`).
    pub fn packages(&self) -> Option<&Arc<PackageCache>> {
        self.packages.as_ref()
    }

    /// The store of repository tasks' prepared states, unless disabled (`coding.prepared`).
    pub fn prepared_store(&self) -> Option<&Arc<PreparedStore>> {
        self.prepared.as_ref()
    }

    /// The configured scoring options (the sandbox's limits, the per-test budget): what a caller
    /// with no per-env overrides passes to [`Scorer::score`].
    pub fn options(&self) -> EvalOptions {
        self.options
    }

    /// `task` with its requirements installed and resolved to a site dir (once per set of
    /// requirements). A refused or uninstallable package is `FailedPrecondition` naming it.
    pub async fn prepare(&self, task: Arc<Task>) -> Result<Arc<Task>, EnvError> {
        if task.data.requirements.is_empty() || task.data.site_dir.is_some() {
            return Ok(task);
        }
        let Some(cache) = &self.packages else {
            return Err(EnvError::FailedPrecondition(format!(
                "task {:?}: {}",
                task.id,
                PackageError::Disabled
            )));
        };
        let site = cache
            .ensure(&task.data.requirements)
            .await
            .map_err(|e| match e {
                PackageError::Io(_) => EnvError::Infrastructure(e.to_string()),
                e => EnvError::FailedPrecondition(format!("task {:?}: {e}", task.id)),
            })?;
        let mut task = Task::clone(&task);
        task.data.site_dir = Some(site);
        Ok(Arc::new(task))
    }

    /// Scores `submission` for `task` under `options` (usually [`Scorer::options`], or an env's
    /// tightened limits). The program's `data` is the task's, whatever the caller set.
    ///
    /// `Err` is never a verdict: `Infrastructure` for a failure of the machinery (retryable),
    /// `FailedPrecondition` for what this deployment lacks (a language's toolchain, a task's
    /// packages, a reference solution that fails).
    pub async fn score(
        &self,
        task: Arc<Task>,
        submission: Submission,
        options: EvalOptions,
    ) -> Result<Scored, EnvError> {
        let task = self.prepare(task).await?;
        self.sandbox
            .supports(submission.language())
            .map_err(infra)?;
        let submission = match submission {
            Submission::Run(mut p) => {
                p.data = task.data.clone();
                Submission::Run(p)
            }
            Submission::ScoreOnly(mut p) => {
                p.data = task.data.clone();
                Submission::ScoreOnly(p)
            }
            no_code => no_code,
        };
        let fingerprint = task.fingerprint();
        let key = match !self.verdicts.enabled() || submission.calls_host_tools() {
            true => None,
            false => VerdictCache::key(&task, &fingerprint, &submission, &options),
        };
        let (verdict, cache_hit) = self
            .verdicts
            .get_or_score(key, self.run(&task, &fingerprint, submission, options))
            .await?;
        let Verdict {
            execution,
            outcome,
            provenance,
        } = Verdict::clone(&verdict);
        Ok(Scored {
            execution,
            outcome,
            cache_hit,
            provenance,
        })
    }

    /// Runs and scores, no cache.
    async fn run(
        &self,
        task: &Task,
        fingerprint: &[u8; 32],
        submission: Submission,
        options: EvalOptions,
    ) -> Result<Verdict, EnvError> {
        let sandbox = &self.sandbox;
        let language = submission.language();
        let provenance =
            crate::provenance::provenance(sandbox, task, fingerprint, language, &options).await;
        let (execution, outcome) = match submission {
            Submission::Run(program) => {
                run::run_and_score(sandbox, &task.reward, &program, options).await
            }
            Submission::ScoreOnly(program) => {
                run::score_program(sandbox, &task.reward, &program, None, options)
                    .await
                    .map(|o| (ExecutionResult::default(), o))
            }
            Submission::NoCode(language) => {
                let result = no_code_result(language);
                let program = Program {
                    data: task.data.clone(),
                    ..Program::default()
                }
                .in_language(language);
                run::score_program(sandbox, &task.reward, &program, Some(&result), options)
                    .await
                    .map(|o| (result, o))
            }
        }
        .map_err(infra)?;
        Ok(Verdict {
            execution,
            outcome,
            provenance,
        })
    }
}

/// A sandbox error as the env reports it: a machinery failure is `Infrastructure` (retryable,
/// never a reward); a language this machine lacks, or a task whose reference solution fails (no
/// expected outputs), is a precondition of the deployment instead.
pub(crate) fn infra(e: SandboxError) -> EnvError {
    match e {
        SandboxError::LanguageUnavailable { .. } | SandboxError::Reference(_) => {
            EnvError::FailedPrecondition(e.to_string())
        }
        e => EnvError::Infrastructure(e.to_string()),
    }
}
