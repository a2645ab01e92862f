//! Repository (SWE-style) tasks, run and scored: a task's repository prepared once and frozen
//! ([`RepoScorer::prepare`]), an episode's own copy-on-write copy of it
//! ([`RepoScorer::episode`], a sandbox `Workspace`), the episode's changes as a diff
//! ([`RepoScorer::diff`]), and a patch scored in a fresh copy ([`RepoScorer::score`]).
//!
//! - Preparing: the repository is imported as a read-only layer (a directory copied, a tar archive
//!   unpacked by the sandbox's unpacker, a git bundle copied as one file that git, in the sandbox,
//!   unbundles and checks out at the task's commit: only that commit's history enters the copy,
//!   and a commit missing from the bundle is a [`RepoError`]); the setup commands run once in a
//!   workspace over it, then the result is committed with git (`git init` first when the repository
//!   has none) and frozen as a second layer. The commit is the base every diff is taken against.
//!   A task's test patch must apply to that state (`git apply --check`), else it is a [`RepoError`].
//! - Prepared once per machine: with a store (`coding.prepared`, [`RepoScorer::with_store`]) the
//!   two layers and the base commit are kept on disk under a key of everything that decides them
//!   ([`prepared`]); a later `prepare` of the same inputs, in any process, uses them instead of
//!   importing and running the setup. A store that cannot take a new state fails the preparation.
//! - An episode's diff is `git diff --binary` of everything in its copy against the base commit,
//!   taken inside the sandbox with a private index and object store (the episode's copy is left as
//!   it was; deletions are diffs like any change, whatever the overlay's whiteouts look like).
//! - Scoring: in a fresh workspace over the prepared layers, `git apply` the patch (a patch that
//!   does not apply is a verdict of 0 with git's reason), then, in a second run, the hidden tests
//!   are copied over the repository, the test patch is applied, and the test command runs under the task's hard wall limit,
//!   writing JUnit XML to `$CODEGYM_JUNIT`, read on the host ([`junit`]). Resolved: every
//!   `fail_to_pass` and `pass_to_pass` test passed and the report agrees with the command's exit
//!   status. The patch's changes to what configures the test run are undone first, and a report
//!   the patched code destroyed is a verdict of 0 ([`score`]). A failed setup, a broken layer
//!   store, or no report from the prepared state itself is a [`RepoError`], never a reward.
//! - Disk: every copy (the setup's, an episode's, a scoring copy) has the task's disk quota
//!   (`limits.disk_mib`, else the sandbox's default; the sandbox's `workspace/quota.rs`). An
//!   agent's command that hits it fails with `ENOSPC` like any failing command, and the episode
//!   goes on; a setup that hits it is a failed setup (a [`RepoError`]).
//! - A task with an `environment` (an OCI image) runs all of the above in that image's filesystem
//!   instead of the host's: its image is imported into the sandbox's layer store and every
//!   workspace of the task is made with it as root (`Sandbox::workspace_in`), the repository at
//!   the task's `work_dir` if it names one, its `tests_dir` and reward file's dir fresh and empty
//!   in every run (`image::RootPaths`).
//! - A task with a `reward_file` (Harbor's) is judged by the number its test command writes there
//!   instead of a JUnit report: the one branch is where [`score`] reads the run's output.
//! - Auditing: attacks derived from each task ([`attacks`]) are scored like any patch, and so are
//!   mutants of each reference fix ([`mutation`]): how strong the task's tests are, as a number.
//! - Synthesizing: tasks made from a real project by breaking it on purpose ([`synth`]).
//! - Importing Harbor task dirs, whose repository and reference patch come from runs in their
//!   image ([`harbor`]).

pub mod attacks;
mod audit;
mod check;
mod env;
pub mod harbor;
pub mod junit;
mod mutation;
mod prepared;
mod provenance;
mod score;
pub mod synth;
pub mod tools;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use codegym_sandbox::image::{Digest, ImageRoot, RootPaths};
use codegym_sandbox::packages::PackageCache;
use codegym_sandbox::{
    FsLayer, Limits, PreparedStore, Sandbox, SandboxError, Workspace, WorkspaceRun,
};
use env_core::ExecutionResult;
use serde::Serialize;

use crate::tasks::{RepoTask, RepositoryKind};
pub use audit::{RepoAttackResult, RepoAudit, audit_repo_tasks};
pub use check::{RepoCheck, check_repo_tasks};
pub(crate) use env::register_repo;
pub use env::{REPO_ENV_ID, REPO_MAX_STEPS, RepoEnv, submit_info};
use junit::TestStatus;
pub use mutation::{RepoMutant, RepoMutationReport, RepoTaskMutation, mutation_test_repo_tasks};
pub use score::{TestRun, protected};

/// Git's settings for every command in a repository: the files are not the run's uid's (safe
/// directory), and commits need an author.
const GIT_ENV: &str = "export GIT_CONFIG_COUNT=3 GIT_CONFIG_KEY_0=safe.directory \
    GIT_CONFIG_VALUE_0='*' GIT_CONFIG_KEY_1=user.name GIT_CONFIG_VALUE_1=codegym \
    GIT_CONFIG_KEY_2=user.email GIT_CONFIG_VALUE_2=codegym@localhost\n";

/// The name of a bundle in the setup's copy, before it is checked out (and removed).
const BUNDLE_NAME: &str = ".codegym-repository.bundle";
/// The check-out's exits: git could not read the bundle; the task's commit is not in it.
const BUNDLE_UNREADABLE: i32 = 95;
const COMMIT_MISSING: i32 = 96;

/// An infrastructure failure: retry elsewhere or fix the task, never a reward.
#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error("sandbox: {0}")]
    Sandbox(#[from] SandboxError),
    #[error("task {task}: packages: {detail}")]
    Packages { task: String, detail: String },
    #[error("task {task}: repository: {detail}")]
    Repository { task: String, detail: String },
    #[error("task {task}: the test patch does not apply to the prepared repository: {detail}")]
    TestPatch { task: String, detail: String },
    #[error("task {task}: setup failed: {detail}")]
    Setup { task: String, detail: String },
    #[error("task {task}: the test command left no JUnit report: {detail}")]
    Report { task: String, detail: String },
    #[error("task {task}: the prepared-state store: {detail}")]
    Store { task: String, detail: String },
    #[error("task {task}: the test command left no reward in {file}: {detail}")]
    Reward {
        task: String,
        file: String,
        detail: String,
    },
    #[error("task {task}: environment: {source}")]
    Environment {
        task: String,
        source: codegym_sandbox::image::ImageError,
    },
}

/// A task's prepared state: its frozen layers, base commit and package dir.
#[derive(Debug)]
pub struct Prepared {
    pub task: Arc<RepoTask>,
    layers: Vec<Arc<FsLayer>>,
    /// The commit diffs are taken against.
    pub base_commit: String,
    site_dir: Option<PathBuf>,
    /// The task's environment: its runs' root filesystem (`None`: the host's).
    root: Option<Arc<ImageRoot>>,
    /// What every verdict scored from this state depended on besides the patch.
    pub provenance: trajectory::record::Provenance,
}

impl Prepared {
    /// The same prepared state, its test runs limited to `ms` of wall clock and of CPU (mutants
    /// that loop spend that, not the task's whole limit).
    pub(crate) fn with_test_wall(&self, ms: u64) -> Prepared {
        let mut task = (*self.task).clone();
        task.limits.test_wall_ms = ms;
        task.limits.test_cpu_ms = ms;
        Prepared {
            task: Arc::new(task),
            layers: self.layers.clone(),
            base_commit: self.base_commit.clone(),
            site_dir: self.site_dir.clone(),
            root: self.root.clone(),
            provenance: self.provenance.clone(),
        }
    }
}

/// How a patch fared.
#[derive(Debug, Clone, Serialize)]
pub struct RepoVerdict {
    /// Every `fail_to_pass` and `pass_to_pass` test passed.
    pub resolved: bool,
    pub reward: f64,
    pub applied: bool,
    /// Why it is not resolved (`None` when it is).
    pub reason: Option<String>,
    pub fail_to_pass: BTreeMap<String, TestStatus>,
    pub pass_to_pass: BTreeMap<String, TestStatus>,
    pub wall_ms: u64,
    /// The patch's changes to what configures the test run, undone before the tests ran
    /// (`conftest.py`, the task's test files, ...: see [`score`]).
    pub dropped: Vec<String>,
}

impl RepoVerdict {
    /// The verdict of an episode whose changes could not be read (`RepoScorer::diff`'s reason).
    pub fn unreadable(prepared: &Prepared, reason: String) -> RepoVerdict {
        RepoVerdict {
            resolved: false,
            reward: 0.0,
            applied: false,
            reason: Some(reason),
            fail_to_pass: missing(&prepared.task.fail_to_pass),
            pass_to_pass: missing(&prepared.task.pass_to_pass),
            wall_ms: 0,
            dropped: Vec::new(),
        }
    }
}

/// Prepares, runs and scores repository tasks in one sandbox.
#[derive(Clone)]
pub struct RepoScorer {
    sandbox: Arc<Sandbox>,
    packages: Option<Arc<PackageCache>>,
    /// Where prepared states persist across processes (`None`: prepared by each process).
    store: Option<Arc<PreparedStore>>,
}

/// An agent's command: the task's test limits (its wall clock, CPU and memory).
fn command_limits(task: &RepoTask) -> Limits {
    limits(task, task.limits.test_wall_ms)
}

fn limits(task: &RepoTask, wall_ms: u64) -> Limits {
    Limits {
        wall_ms,
        cpu_ms: task.limits.test_cpu_ms,
        memory_bytes: task.limits.memory_mb << 20,
        max_processes: 64,
        ..Limits::default()
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl RepoScorer {
    pub fn new(sandbox: Arc<Sandbox>, packages: Option<Arc<PackageCache>>) -> RepoScorer {
        RepoScorer {
            sandbox,
            packages,
            store: None,
        }
    }

    /// The repository scorer of `scorer`'s configuration: its sandbox, package cache and store
    /// of prepared states.
    pub fn of(scorer: &crate::Scorer) -> RepoScorer {
        RepoScorer::new(scorer.sandbox().clone(), scorer.packages().cloned())
            .with_store(scorer.prepared_store().cloned())
    }

    /// This scorer with prepared states kept in `store` ([`prepared`]): each state is prepared
    /// once per store and reused by every later `prepare`, in this process or another.
    pub fn with_store(mut self, store: Option<Arc<PreparedStore>>) -> RepoScorer {
        self.store = store;
        self
    }

    /// Imports the repository, runs the setup once, commits and freezes the result.
    pub async fn prepare(&self, task: Arc<RepoTask>) -> Result<Arc<Prepared>, RepoError> {
        let (site_dir, root, image) = self.inputs(&task).await?;
        // The state's key: its place in the store, and what its verdicts' provenance names.
        let key = self
            .state_key(&task, site_dir.as_deref(), image.clone())
            .await?;
        let provenance = provenance::provenance(&self.sandbox, &task, &key, image.as_ref());
        let (layers, base_commit) = match self.stored(&task, Some(&key)).await? {
            Some(stored) => stored,
            None => {
                let (layers, base_commit) =
                    self.set_up(&task, site_dir.as_ref(), root.as_ref()).await?;
                self.store(&task, Some(&key), layers, base_commit).await?
            }
        };
        Ok(Arc::new(Prepared {
            task,
            layers,
            base_commit,
            site_dir,
            root,
            provenance,
        }))
    }

    /// The task's state made from scratch: the repository imported, checked out at its commit,
    /// the setup run and committed, the test patch checked; its layers and base commit.
    async fn set_up(
        &self,
        task: &Arc<RepoTask>,
        site_dir: Option<&PathBuf>,
        root: Option<&Arc<ImageRoot>>,
    ) -> Result<(Vec<Arc<FsLayer>>, String), RepoError> {
        let task = task.clone();
        let (site_dir, root) = (site_dir.cloned(), root.cloned());
        let base = self.import_repository(&task).await?;
        // The setup's copy has the task's quota too: a setup that fills it fails (`Setup`).
        let ws = self.workspace(vec![base.clone()], root.as_ref(), task.limits.disk_mib)?;
        if let Some(commit) = &task.commit {
            self.check_out(&ws, &task, commit).await?;
        }
        let mut script = format!("{GIT_ENV}set -e\n");
        for command in &task.setup {
            script.push_str(command);
            script.push('\n');
        }
        script.push_str(
            "git init -q\ngit add -A\ngit commit -q --allow-empty -m 'codegym: prepared state'\n\
             git rev-parse HEAD > \"$HOME/base\"\n",
        );
        let run = WorkspaceRun {
            command: script,
            fetch: vec!["base".into()],
            limits: Some(limits(&task, task.limits.setup_wall_ms)),
            site_dir: site_dir.clone(),
            ..WorkspaceRun::default()
        };
        let (result, fetched) = ws.run(run).await?;
        let base_commit = fetched
            .first()
            .map(|(_, b)| String::from_utf8_lossy(b).trim().to_string())
            .filter(|c| result.exit_code == Some(0) && c.len() >= 40);
        let Some(base_commit) = base_commit else {
            return Err(RepoError::Setup {
                task: task.id.clone(),
                detail: failure(&result),
            });
        };
        if let Some(test_patch) = &task.test_patch {
            let run = WorkspaceRun {
                command: format!("{GIT_ENV}git apply --check \"$HOME/test.diff\"\n"),
                files: vec![("test.diff".into(), test_patch.as_bytes().to_vec())],
                limits: Some(limits(&task, task.limits.setup_wall_ms)),
                ..WorkspaceRun::default()
            };
            let (checked, _) = ws.run(run).await?;
            if checked.exit_code != Some(0) {
                return Err(RepoError::TestPatch {
                    task: task.id.clone(),
                    detail: failure(&checked),
                });
            }
        }
        let setup = ws.freeze().await?;
        Ok((vec![base, setup], base_commit))
    }

    /// What `prepare` resolves before anything runs: the requirements' site dir and the
    /// environment's root filesystem with its image's manifest digest.
    async fn inputs(
        &self,
        task: &RepoTask,
    ) -> Result<(Option<PathBuf>, Option<Arc<ImageRoot>>, Option<Digest>), RepoError> {
        let site_dir =
            match (&self.packages, task.requirements.is_empty()) {
                (_, true) => None,
                (Some(cache), false) => {
                    Some(cache.ensure(&task.requirements).await.map_err(|e| {
                        RepoError::Packages {
                            task: task.id.clone(),
                            detail: e.to_string(),
                        }
                    })?)
                }
                (None, false) => {
                    return Err(RepoError::Packages {
                        task: task.id.clone(),
                        detail: "the task has requirements and packages are not enabled".into(),
                    });
                }
            };
        Ok(match &task.environment {
            Some(image) => {
                let (root, manifest) = self.environment(task, image).await?;
                (site_dir, Some(root), Some(manifest))
            }
            None => (site_dir, None, None),
        })
    }

    /// The task's repository as a read-only layer: a directory's copy, an archive unpacked, or a
    /// bundle as the one file [`check_out`](Self::check_out) reads.
    async fn import_repository(&self, task: &RepoTask) -> Result<Arc<FsLayer>, RepoError> {
        let path = &task.repository;
        Ok(match task.repository_kind {
            RepositoryKind::Directory => self.sandbox.import_layer(path).await?,
            RepositoryKind::Archive => {
                self.sandbox.import_archive_layer(path).await.map_err(|e| {
                    RepoError::Repository {
                        task: task.id.clone(),
                        detail: e.to_string(),
                    }
                })?
            }
            RepositoryKind::Bundle => self.sandbox.import_file_layer(path, BUNDLE_NAME).await?,
        })
    }

    /// In the setup's copy (holding only the bundle): the bundle unbundled into a scratch
    /// repository in the run's own dir, then only `commit` and its history fetched into the copy
    /// and checked out (later commits of the bundle, such as the fix, never enter it), the bundle
    /// file removed.
    async fn check_out(
        &self,
        ws: &Workspace,
        task: &RepoTask,
        commit: &str,
    ) -> Result<(), RepoError> {
        let c = shell_quote(commit);
        let script = format!(
            "{GIT_ENV}src=\"$HOME/src\"\n\
             git init -q \"$src\" && git -C \"$src\" bundle unbundle \"$PWD/{BUNDLE_NAME}\" \
             >/dev/null || exit {BUNDLE_UNREADABLE}\n\
             git -C \"$src\" cat-file -e {c}^{{commit}} 2>/dev/null || exit {COMMIT_MISSING}\n\
             set -e\n\
             git -C \"$src\" update-ref refs/codegym/base {c}\n\
             rm -f {BUNDLE_NAME}\n\
             git init -q\n\
             git fetch -q --no-tags \"$src\" refs/codegym/base\n\
             git checkout -q --detach FETCH_HEAD\n"
        );
        let run = WorkspaceRun {
            command: script,
            limits: Some(limits(task, task.limits.setup_wall_ms)),
            ..WorkspaceRun::default()
        };
        let (result, _) = ws.run(run).await?;
        let bundle = task.repository.display();
        let detail = match result.exit_code {
            Some(0) => return Ok(()),
            Some(COMMIT_MISSING) => format!("commit {commit} is not in the bundle {bundle}"),
            Some(BUNDLE_UNREADABLE) => {
                format!("git cannot read the bundle {bundle}: {}", failure(&result))
            }
            _ => format!(
                "checking out {commit} from {bundle} failed: {}",
                failure(&result)
            ),
        };
        Err(RepoError::Repository {
            task: task.id.clone(),
            detail,
        })
    }

    /// The task's image imported into the sandbox's layer store (each layer unpacked once per
    /// store) and prepared as a root filesystem.
    async fn environment(
        &self,
        task: &RepoTask,
        image: &std::path::Path,
    ) -> Result<(Arc<ImageRoot>, Digest), RepoError> {
        let env_err = |source| RepoError::Environment {
            task: task.id.clone(),
            source,
        };
        let store = self.sandbox.layer_store().map_err(env_err)?;
        let image = store.import_async(image).await.map_err(env_err)?;
        // The repository's place in the image and the per-run dirs of hidden tests and reward.
        let paths = RootPaths {
            work_dir: task.work_dir.clone(),
            scratch: (task.tests_dir.iter().map(String::as_str))
                .chain(task.reward_dir())
                .map(str::to_string)
                .collect(),
        };
        let manifest = image.manifest.clone();
        Ok((self.sandbox.image_root_with(&image, paths)?, manifest))
    }

    fn workspace(
        &self,
        layers: Vec<Arc<FsLayer>>,
        root: Option<&Arc<ImageRoot>>,
        disk_mib: Option<u64>,
    ) -> Result<Workspace, RepoError> {
        Ok(match root {
            Some(root) => self.sandbox.workspace_in(layers, root.clone(), disk_mib)?,
            None => self.sandbox.workspace(layers, disk_mib)?,
        })
    }

    /// A new episode: its own writable copy of the prepared state, with the task's disk quota
    /// (also each scoring copy's).
    pub fn episode(&self, prepared: &Prepared) -> Result<Workspace, RepoError> {
        self.workspace(
            prepared.layers.clone(),
            prepared.root.as_ref(),
            prepared.task.limits.disk_mib,
        )
    }

    /// One shell command of an agent in its episode's copy (`limits`: the task's, as its test
    /// command gets: an agent runs the test suite too).
    pub async fn run(
        &self,
        ws: &Workspace,
        prepared: &Prepared,
        command: &str,
        limits: Option<Limits>,
    ) -> Result<ExecutionResult, RepoError> {
        let run = WorkspaceRun {
            command: format!("{GIT_ENV}{command}"),
            limits: Some(limits.unwrap_or_else(|| command_limits(&prepared.task))),
            site_dir: prepared.site_dir.clone(),
            ..WorkspaceRun::default()
        };
        Ok(ws.run(run).await?.0)
    }

    /// [`RepoScorer::run`] with `files` written beside the repository first (a tool's input).
    pub async fn run_with_files(
        &self,
        ws: &Workspace,
        prepared: &Prepared,
        command: &str,
        files: Vec<(String, Vec<u8>)>,
    ) -> Result<ExecutionResult, RepoError> {
        let run = self.run_fetching(ws, prepared, command, files, Vec::new());
        Ok(run.await?.0)
    }

    /// [`RepoScorer::run_with_files`], then the files `fetch` names (beside the repository, as
    /// the command left them) read back.
    pub(crate) async fn run_fetching(
        &self,
        ws: &Workspace,
        prepared: &Prepared,
        command: &str,
        files: Vec<(String, Vec<u8>)>,
        fetch: Vec<String>,
    ) -> Result<(ExecutionResult, Vec<(String, Vec<u8>)>), RepoError> {
        let run = WorkspaceRun {
            command: format!("{GIT_ENV}{command}"),
            files,
            fetch,
            limits: Some(command_limits(&prepared.task)),
            site_dir: prepared.site_dir.clone(),
            ..WorkspaceRun::default()
        };
        Ok(ws.run(run).await?)
    }

    /// The episode's changes against the base commit: `Ok(Err(reason))` when the episode broke
    /// what git needs to read them (its own doing: an outcome, not an infrastructure failure).
    pub async fn diff(
        &self,
        ws: &Workspace,
        prepared: &Prepared,
    ) -> Result<Result<String, String>, RepoError> {
        let script = format!(
            "{GIT_ENV}set -e\nmkdir -p \"$HOME/objects\"\n\
             export GIT_INDEX_FILE=\"$HOME/index\" GIT_OBJECT_DIRECTORY=\"$HOME/objects\" \
             GIT_ALTERNATE_OBJECT_DIRECTORIES=\"$PWD/.git/objects\"\n\
             git add -A\ngit diff --cached --binary {} > \"$HOME/patch.diff\"\n",
            shell_quote(&prepared.base_commit)
        );
        let run = WorkspaceRun {
            command: script,
            fetch: vec!["patch.diff".into()],
            ..WorkspaceRun::default()
        };
        let (result, fetched) = ws.run(run).await?;
        Ok(match (result.exit_code, fetched.into_iter().next()) {
            (Some(0), Some((_, bytes))) => {
                String::from_utf8(bytes).map_err(|_| "the diff is not UTF-8".to_string())
            }
            _ => Err(format!("the changes cannot be read: {}", failure(&result))),
        })
    }
}

fn missing(ids: &[String]) -> BTreeMap<String, TestStatus> {
    ids.iter()
        .map(|id| (id.clone(), TestStatus::Missing))
        .collect()
}

/// A failed run in a line or two: its exit and the end of its stderr.
fn failure(r: &ExecutionResult) -> String {
    let err = r.stderr.trim();
    let tail: String = err
        .char_indices()
        .rev()
        .nth(600)
        .map_or(err, |(i, _)| &err[i..])
        .to_string();
    match (r.timed_out, r.exit_code, r.signal) {
        (true, _, _) => format!("timed out after {} ms; {tail}", r.wall_ms),
        (_, Some(code), _) => format!("exit {code}; {tail}"),
        (_, None, Some(sig)) => format!("killed by signal {sig}; {tail}"),
        _ => tail,
    }
}
