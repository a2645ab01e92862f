//! Harbor (Terminal-Bench 2) task directories imported as a repository task set (format version
//! 4): `codegym tasks import harbor`. A task dir holds `instruction.md` (the problem statement),
//! `task.toml` (`[verifier] timeout_sec`: the test wall limit; `[environment] memory_mb`; other
//! keys are ignored, as Harbor ignores keys it does not know), `tests/` (`test.sh` writes the
//! reward to `/logs/verifier/reward.txt`) and `solution/solve.sh` (the oracle). Its environment
//! is given built, as an image archive (nothing is built or fetched here): one for every task, or
//! `IMAGES/<task dir name>.tar` each.
//!
//! Each task, in order (errors name the task dir, and `task.toml`'s line):
//! 1. The image's `WorkingDir` (`/app` when unset) is the repository: a run in the image (the
//!    directory not yet shadowed) tars it, and the tar becomes `OUT/repos/<name>.tar`.
//! 2. The task line: the repository at `work_dir` (the image's dir), `tests/` as hidden tests at
//!    `/tests`, `bash /tests/test.sh` as the test command, `/logs/verifier/reward.txt` as the
//!    reward file.
//! 3. The reference patch: `solution/` is copied into a run's own dir and `solve.sh` run by bash
//!    in an episode's copy; the copy's diff is the patch (`OUT/patches/<name>.diff`). What the
//!    solution changes outside the work dir is lost (every run's root is read-only).
//! 4. Each task declares [`REWARD_FILE_FORGE`] `known_weak`: the tests run the agent's code as
//!    the verifier, which can write the reward itself (`tasks check --audit` shows it).
//! 5. Checked as `tasks check` checks a task: the reference patch must resolve it and the empty
//!    patch must not; a task that fails is an error, or (`skip_unresolved`) left out and reported.
//!
//! `OUT/tasks.jsonl` is written last and loaded back before success.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use codegym_sandbox::{Limits, WorkspaceRun};
use serde::Deserialize;

use super::attacks::REWARD_FILE_FORGE;
use super::{GIT_ENV, RepoError, RepoScorer, failure, shell_quote};
use crate::tasks::{REPOSITORY_FORMAT_VERSION, RepoTask, RepoTaskSet, TaskError, copy_environment};

/// Where Harbor's verifier reads the reward, and where its tests are placed.
pub const HARBOR_REWARD_FILE: &str = "/logs/verifier/reward.txt";
pub const HARBOR_TESTS_DIR: &str = "/tests";
/// The image's work dir when its config names none (Harbor's convention).
const DEFAULT_WORK_DIR: &str = "/app";

/// Where the tasks' images come from.
#[derive(Debug, Clone)]
pub enum HarborImages {
    /// One archive for every task.
    One(PathBuf),
    /// `DIR/<task dir name>.tar` for each task.
    PerTask(PathBuf),
}

/// What to import.
#[derive(Debug, Clone)]
pub struct HarborImport {
    pub task_dirs: Vec<PathBuf>,
    pub out: PathBuf,
    pub images: HarborImages,
    /// Leave out (and report) a task whose reference patch does not resolve it or whose empty
    /// patch does, instead of failing the import.
    pub skip_unresolved: bool,
}

/// What an import wrote.
#[derive(Debug, Clone)]
pub struct HarborImported {
    pub path: PathBuf,
    pub written: Vec<String>,
    /// Task dirs left out, with why.
    pub skipped: Vec<(String, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum HarborError {
    #[error("{}: {detail}", dir.display())]
    Task { dir: PathBuf, detail: String },
    #[error(transparent)]
    Tasks(#[from] TaskError),
    #[error(transparent)]
    Repo(#[from] RepoError),
}

/// Harbor's `task.toml`, the keys read (the rest ignored, as Harbor ignores unknown keys).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TaskToml {
    verifier: Timeout,
    agent: Timeout,
    environment: EnvironmentToml,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Timeout {
    timeout_sec: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EnvironmentToml {
    memory_mb: Option<u64>,
}

/// Imports every task dir (see the module's doc).
pub async fn import_harbor(
    scorer: &RepoScorer,
    opts: &HarborImport,
) -> Result<HarborImported, HarborError> {
    let out = &opts.out;
    for dir in ["repos", "patches", "tests"] {
        std::fs::create_dir_all(out.join(dir)).map_err(|source| TaskError::Io {
            path: out.join(dir),
            source,
        })?;
    }
    let mut lines = Vec::new();
    let mut imported = HarborImported {
        path: out.join("tasks.jsonl"),
        written: Vec::new(),
        skipped: Vec::new(),
    };
    for dir in &opts.task_dirs {
        let task_err = |detail: String| HarborError::Task {
            dir: dir.clone(),
            detail,
        };
        let name = dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .ok_or_else(|| task_err("not a task directory".into()))?;
        let image = match &opts.images {
            HarborImages::One(image) => image.clone(),
            HarborImages::PerTask(images) => images.join(format!("{name}.tar")),
        };
        if !image.is_file() {
            return Err(task_err(format!(
                "no image: {} is not a file",
                image.display()
            )));
        }
        let (line, task) = stage(scorer, dir, &name, &image, out).await?;
        match check(scorer, task).await? {
            Ok(()) => {
                lines.push(line);
                imported.written.push(name);
            }
            Err(why) if opts.skip_unresolved => imported.skipped.push((name, why)),
            Err(why) => return Err(task_err(why)),
        }
    }
    let path = &imported.path;
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    write(path, &text)?;
    if !lines.is_empty() {
        RepoTaskSet::load(path)?;
    }
    Ok(imported)
}

/// Writes `text` to `path` whole.
fn write(path: &Path, text: &str) -> Result<(), TaskError> {
    trajectory::atomic::write_atomic(path, text.as_bytes()).map_err(|source| TaskError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// One task dir's files written under `out`, its line, and the task as loaded (with its
/// reference patch): steps 1-3 of the module's doc.
async fn stage(
    scorer: &RepoScorer,
    dir: &Path,
    name: &str,
    image: &Path,
    out: &Path,
) -> Result<(serde_json::Value, RepoTask), HarborError> {
    let task_err = |detail: String| HarborError::Task {
        dir: dir.to_path_buf(),
        detail,
    };
    let read = |file: &str| {
        std::fs::read_to_string(dir.join(file))
            .map_err(|e| task_err(format!("{}: {e}", dir.join(file).display())))
    };
    let instruction = read("instruction.md")?;
    let toml_path = dir.join("task.toml");
    let config: TaskToml = toml::from_str(&read("task.toml")?).map_err(|e| {
        let text = std::fs::read_to_string(&toml_path).unwrap_or_default();
        let line = e
            .span()
            .map_or(1, |s| text[..s.start].matches('\n').count() + 1);
        task_err(format!("{}:{line}: {}", toml_path.display(), e.message()))
    })?;
    let tests = dir.join("tests");
    if !tests.join("test.sh").is_file() {
        return Err(task_err(format!("{}: no test.sh", tests.display())));
    }
    let mut solution = std::collections::BTreeMap::new();
    crate::tasks::read_tree_into(&dir.join("solution"), &mut solution)
        .map_err(|e| task_err(format!("{}: {e}", dir.join("solution").display())))?;
    if !solution.contains_key("solve.sh") {
        return Err(task_err(format!(
            "{}: no solve.sh",
            dir.join("solution").display()
        )));
    }
    let environment = copy_environment(image, out)?;
    let store = scorer
        .sandbox
        .layer_store()
        .map_err(|source| RepoError::Environment {
            task: name.to_string(),
            source,
        })?;
    let stored = store
        .import_async(image)
        .await
        .map_err(|source| RepoError::Environment {
            task: name.to_string(),
            source,
        })?;
    let work_dir = stored
        .working_dir
        .clone()
        .unwrap_or_else(|| DEFAULT_WORK_DIR.to_string());
    let repo_tar = format!("repos/{name}.tar");
    let tar = extract(scorer, &out.join(&environment), &work_dir, name)
        .await?
        .map_err(task_err)?;
    trajectory::atomic::write_atomic(&out.join(&repo_tar), &tar).map_err(|source| {
        TaskError::Io {
            path: out.join(&repo_tar),
            source,
        }
    })?;
    let hidden = format!("tests/{name}");
    copy_tree(&tests, &out.join(&hidden)).map_err(|e| task_err(format!("tests/: {e}")))?;
    let patch_rel = format!("patches/{name}.diff");
    write(&out.join(&patch_rel), "")?;
    let mut limits = serde_json::Map::new();
    if let Some(s) = config.verifier.timeout_sec {
        limits.insert("test_wall_ms".into(), ((s * 1000.0) as u64).into());
    }
    if let Some(mb) = config.environment.memory_mb {
        limits.insert("memory_mb".into(), mb.into());
    }
    let line = serde_json::json!({
        "version": REPOSITORY_FORMAT_VERSION, "id": name, "repository": repo_tar,
        "environment": environment, "work_dir": work_dir, "tests_dir": HARBOR_TESTS_DIR,
        "reward_file": HARBOR_REWARD_FILE, "problem_statement": instruction,
        "test_command": format!("bash {HARBOR_TESTS_DIR}/test.sh"), "hidden_tests": hidden,
        "patch": patch_rel, "limits": limits,
        "known_weak": {REWARD_FILE_FORGE.0: REWARD_FILE_FORGE.1},
    });
    // Loaded as `tasks check` would load it (every field checked), from a file of its own.
    let staged = out.join(format!(".staged-{name}.jsonl"));
    write(&staged, &format!("{line}\n"))?;
    let loaded = RepoTaskSet::load(&staged);
    let _ = std::fs::remove_file(&staged);
    let mut task = loaded.map_err(|e| task_err(e.to_string()))?.tasks.remove(0);
    let agent_ms = config.agent.timeout_sec.map(|s| (s * 1000.0) as u64);
    let patch = solve_patch(scorer, &task, solution, agent_ms)
        .await?
        .map_err(task_err)?;
    write(&out.join(&patch_rel), &patch)?;
    task.patch = patch;
    Ok((line, task))
}

/// The image's `work_dir` as a tar with one top-level dir (the loader strips it), made by the
/// image's own `tar` in a run whose repository is elsewhere; `Ok(Err)`: the task's fault.
async fn extract(
    scorer: &RepoScorer,
    image: &Path,
    work_dir: &str,
    name: &str,
) -> Result<Result<Vec<u8>, String>, RepoError> {
    // The probe's own repository: an empty dir, removed once imported.
    let empty = image.with_extension("empty");
    std::fs::create_dir_all(&empty).map_err(|e| RepoError::Repository {
        task: name.to_string(),
        detail: format!("{}: {e}", empty.display()),
    })?;
    let probe = RepoTask {
        environment: Some(image.to_path_buf()),
        ..RepoTask::directory(name, empty.clone())
    };
    let prepared = scorer.prepare(Arc::new(probe)).await;
    let _ = std::fs::remove_dir(&empty);
    let prepared = prepared?;
    let ws = scorer.episode(&prepared)?;
    let (parent, base) = match work_dir.rsplit_once('/') {
        Some(("", base)) => ("/", base),
        Some((parent, base)) => (parent, base),
        None => ("/", work_dir),
    };
    let run = WorkspaceRun {
        command: format!(
            "[ -d {w} ] || {{ echo 'the image has no {work_dir}' >&2; exit 1; }}\n\
             tar -C {} -cf \"$HOME/repo.tar\" {}\n",
            shell_quote(parent),
            shell_quote(base),
            w = shell_quote(work_dir),
        ),
        fetch: vec!["repo.tar".into()],
        limits: Some(Limits {
            wall_ms: 120_000,
            max_file_bytes: 1 << 30,
            ..Limits::default()
        }),
        ..WorkspaceRun::default()
    };
    let (result, fetched) = ws.run(run).await?;
    Ok(match (result.exit_code, fetched.into_iter().next()) {
        (Some(0), Some((_, tar))) => Ok(tar),
        _ => Err(format!(
            "reading the image's {work_dir}: {}",
            failure(&result)
        )),
    })
}

/// `solution/` in a run's own dir, `solve.sh` run by bash in an episode's copy: the copy's diff.
async fn solve_patch(
    scorer: &RepoScorer,
    task: &RepoTask,
    solution: std::collections::BTreeMap<String, Vec<u8>>,
    wall_ms: Option<u64>,
) -> Result<Result<String, String>, RepoError> {
    let prepared = scorer.prepare(Arc::new(task.clone())).await?;
    let ws = scorer.episode(&prepared)?;
    let files = solution
        .into_iter()
        .map(|(path, bytes)| (format!("solution/{path}"), bytes))
        .collect();
    let mut limits = super::command_limits(task);
    if let Some(ms) = wall_ms {
        limits.wall_ms = ms;
    }
    let run = WorkspaceRun {
        command: format!("{GIT_ENV}bash \"$HOME/solution/solve.sh\"\n"),
        files,
        limits: Some(limits),
        ..WorkspaceRun::default()
    };
    let (result, _) = ws.run(run).await?;
    if result.exit_code != Some(0) {
        return Ok(Err(format!(
            "solution/solve.sh failed: {}",
            failure(&result)
        )));
    }
    Ok(match scorer.diff(&ws, &prepared).await? {
        Ok(patch) if patch.trim().is_empty() => Err(format!(
            "solution/solve.sh changed nothing in {} (changes outside it are lost)",
            task.work_dir.as_deref().unwrap_or(DEFAULT_WORK_DIR)
        )),
        other => other,
    })
}

/// As `tasks check`: the reference patch resolves the task, the empty patch does not.
async fn check(scorer: &RepoScorer, task: RepoTask) -> Result<Result<(), String>, RepoError> {
    let prepared = scorer.prepare(Arc::new(task)).await?;
    let patch = prepared.task.patch.clone();
    let reference = scorer.score(&prepared, &patch).await?;
    if !reference.resolved {
        return Ok(Err(format!(
            "the reference patch (solution/solve.sh's diff) does not resolve it: {}",
            reference.reason.unwrap_or_default()
        )));
    }
    let empty = scorer.score(&prepared, "").await?;
    Ok(if empty.resolved {
        Err("the empty patch resolves it (the tests pass on the image as given)".into())
    } else {
        Ok(())
    })
}

/// `src`'s files and dirs copied to `dst` (links refused).
fn copy_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    let mut files = std::collections::BTreeMap::new();
    crate::tasks::read_tree_into(src, &mut files)?;
    if dst.exists() {
        std::fs::remove_dir_all(dst)?;
    }
    for (rel, bytes) in files {
        let path = dst.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, bytes)?;
    }
    Ok(())
}
