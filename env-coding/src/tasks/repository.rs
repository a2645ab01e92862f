//! Repository (SWE-style) task sets, format version 3: a repository at a state, setup commands, a
//! problem statement, a test command, hidden tests and/or a test patch, the test ids that must
//! start passing (`fail_to_pass`) and keep passing (`pass_to_pass`), a reference patch, limits, an
//! optional `environment` (version 2: an OCI image whose filesystem the task's runs see instead of
//! the host's), and (version 3) a repository given as a tar archive or a git bundle at a `commit`,
//! and a `test_patch` (SWE-bench's: a diff adding the tests, applied at scoring); version 4 adds,
//! with an `environment`, the repository's place in it (`work_dir`), where the hidden tests go
//! (`tests_dir`) and a second verdict: a number the test command writes to `reward_file` (Harbor's
//! `/logs/verifier/reward.txt`) instead of a JUnit report. Scoring them is
//! [`crate::repo`]'s; `docs/repository-tasks.md` describes the format for users, with its changelog.
//!
//! JSON Lines, one task a line, each with `"version": 1`, `2` or `3` (older files stay readable: a
//! version 1 line is a version 2 line without `environment`, a version 2 line a version 3 line
//! with a directory repository, hidden tests and no test patch, a version 3 line a version 4 line
//! without `work_dir`, `tests_dir` and `reward_file`); blank lines and lines starting
//! with `//` are skipped; unknown fields are refused. Paths (`repository`, `hidden_tests`, `patch`,
//! `test_patch`, `environment`) are relative to the task file's directory and stay beneath it.
//! Errors name `FILE:LINE`. What a bundle holds is checked where git runs, in the sandbox, when the
//! task is prepared (a commit missing from it fails the preparation, naming the task).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use super::TaskError;
pub(crate) use super::diff::{diff_headers, diff_paths};

/// The format version this loader writes about (it reads every version from 1 up to it).
pub const REPOSITORY_FORMAT_VERSION: u32 = 4;

/// One task line as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    version: u32,
    id: String,
    repository: String,
    #[serde(default)]
    setup: Vec<String>,
    #[serde(default)]
    requirements: Vec<String>,
    problem_statement: String,
    test_command: String,
    #[serde(default)]
    hidden_tests: Option<String>,
    #[serde(default)]
    fail_to_pass: Vec<String>,
    #[serde(default)]
    pass_to_pass: Vec<String>,
    patch: String,
    #[serde(default)]
    limits: RepoLimits,
    #[serde(default)]
    known_weak: BTreeMap<String, String>,
    /// Version 2: an OCI image layout dir or oci-archive.
    #[serde(default)]
    environment: Option<String>,
    /// Version 3: the commit of a bundle `repository` (40 hex digits).
    #[serde(default)]
    commit: Option<String>,
    /// Version 3: a unified diff adding the tests (SWE-bench's `test_patch`).
    #[serde(default)]
    test_patch: Option<String>,
    /// Version 4: the repository's absolute path in the environment.
    #[serde(default)]
    work_dir: Option<String>,
    /// Version 4: where the hidden tests are placed in the environment for scoring.
    #[serde(default)]
    tests_dir: Option<String>,
    /// Version 4: the file the test command writes the reward to (the verdict instead of JUnit).
    #[serde(default)]
    reward_file: Option<String>,
}

/// What a task's `repository` names (version 3 adds archives and bundles).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RepositoryKind {
    /// The repository's files (a `.git` inside is kept).
    Directory,
    /// A tar archive (`.tar`, `.tar.gz`, `.tgz`); one top-level dir holding everything is
    /// stripped.
    Archive,
    /// A git bundle (`.bundle`); the task's `commit` is checked out.
    Bundle,
}

/// Limits of a task's runs: `test` bounds the scoring run of the test command (its wall clock is
/// the hard limit of scoring), `setup` each setup command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RepoLimits {
    pub setup_wall_ms: u64,
    pub test_wall_ms: u64,
    pub test_cpu_ms: u64,
    pub memory_mb: u64,
    /// The disk quota of every copy of the repository (the setup's, each episode's, each
    /// scoring copy's) in MiB; `None`: the sandbox's `workspace_disk_mib`. A sandbox refuses a
    /// quota above its `workspace_disk_max_mib`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_mib: Option<u64>,
}

impl Default for RepoLimits {
    fn default() -> Self {
        RepoLimits {
            setup_wall_ms: 120_000,
            test_wall_ms: 120_000,
            test_cpu_ms: 60_000,
            memory_mb: 1024,
            disk_mib: None,
        }
    }
}

/// A loaded repository task: paths resolved, hidden tests and patch read.
#[derive(Debug, Clone, PartialEq)]
pub struct RepoTask {
    pub id: String,
    /// The repository (absolute): a directory, a tar archive or a git bundle (`repository_kind`).
    pub repository: PathBuf,
    pub repository_kind: RepositoryKind,
    /// The commit a bundle's repository is checked out at (`Some` exactly for a bundle).
    pub commit: Option<String>,
    /// Shell commands run once, in order, in the repository; their result is frozen.
    pub setup: Vec<String>,
    /// Python packages the test command needs (resolved by the package cache).
    pub requirements: Vec<String>,
    pub problem_statement: String,
    /// A shell command run in the repository; it writes JUnit XML to `$CODEGYM_JUNIT`.
    pub test_command: String,
    /// Files added over the patched repository before the tests run (relative path, bytes);
    /// never in an episode's copy. Empty when the task has a test patch instead.
    pub hidden_tests: BTreeMap<String, Vec<u8>>,
    /// A unified diff applied after the patch and the hidden tests, before the tests run
    /// (SWE-bench's `test_patch`); never in an episode's copy.
    pub test_patch: Option<String>,
    /// The paths `test_patch` touches: protected like the hidden tests.
    pub test_patch_paths: Vec<String>,
    pub fail_to_pass: Vec<String>,
    pub pass_to_pass: Vec<String>,
    /// The reference patch (a unified diff, `git apply`'s input).
    pub patch: String,
    pub limits: RepoLimits,
    /// Derived attacks (by name, see `repo::attacks`) known to resolve the task, and why: the
    /// audit reports them but does not fail on them.
    pub known_weak: BTreeMap<String, String>,
    /// The OCI image (layout dir or oci-archive, absolute) whose filesystem the task's runs see
    /// (setup, the agent's commands, scoring); `None`: the host's, read-only.
    pub environment: Option<PathBuf>,
    /// Where runs see the repository in the environment (`None`: `/codegym/repo`).
    pub work_dir: Option<String>,
    /// Where the hidden tests are placed for scoring (`None`: over the repository).
    pub tests_dir: Option<String>,
    /// The verdict is the number the test command writes here (`None`: its JUnit report).
    pub reward_file: Option<String>,
}

impl RepoTask {
    /// A task over the directory `repository` and nothing else: no setup, tests, patches,
    /// environment or places in one. What builds a task in code (an importer's probe of an image,
    /// the synthesizer's clean suite) sets the fields it uses over this.
    pub fn directory(id: impl Into<String>, repository: PathBuf) -> RepoTask {
        RepoTask {
            id: id.into(),
            repository,
            repository_kind: RepositoryKind::Directory,
            commit: None,
            setup: Vec::new(),
            requirements: Vec::new(),
            problem_statement: String::new(),
            test_command: String::new(),
            hidden_tests: BTreeMap::new(),
            test_patch: None,
            test_patch_paths: Vec::new(),
            fail_to_pass: Vec::new(),
            pass_to_pass: Vec::new(),
            patch: String::new(),
            limits: RepoLimits::default(),
            known_weak: BTreeMap::new(),
            environment: None,
            work_dir: None,
            tests_dir: None,
            reward_file: None,
        }
    }

    /// The dir holding `reward_file`: a fresh, empty, writable dir in every run.
    pub fn reward_dir(&self) -> Option<&str> {
        let file = self.reward_file.as_deref()?;
        file.rsplit_once('/').map(|(dir, _)| dir)
    }
}

/// A repository task file.
#[derive(Debug, Clone)]
pub struct RepoTaskSet {
    pub path: PathBuf,
    pub tasks: Vec<RepoTask>,
}

impl RepoTaskSet {
    /// Loads a task file (`FILE:LINE` in every error).
    pub fn load(path: &Path) -> Result<RepoTaskSet, TaskError> {
        let io = |source| TaskError::Io {
            path: path.to_path_buf(),
            source,
        };
        let text = std::fs::read_to_string(path).map_err(io)?;
        let base = path
            .canonicalize()
            .map_err(io)?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let mut tasks: Vec<RepoTask> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with("//") {
                continue;
            }
            let parse = |message: String| TaskError::Parse {
                path: path.to_path_buf(),
                line: i + 1,
                message,
            };
            let task = parse_line(trimmed, &base).map_err(parse)?;
            if tasks.iter().any(|t| t.id == task.id) {
                return Err(parse(format!("duplicate task id {:?}", task.id)));
            }
            tasks.push(task);
        }
        if tasks.is_empty() {
            return Err(TaskError::Empty {
                path: path.to_path_buf(),
            });
        }
        Ok(RepoTaskSet {
            path: path.to_path_buf(),
            tasks,
        })
    }

    /// Whether `path` holds repository tasks (its first task line has `repository` and
    /// `fail_to_pass`): how the CLI tells them from the other formats.
    pub fn detect(path: &Path) -> bool {
        let Ok(text) = std::fs::read_to_string(path) else {
            return false;
        };
        let first = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with("//"));
        first
            .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .is_some_and(|v| v.get("repository").is_some() && v.get("fail_to_pass").is_some())
    }
}

fn parse_line(text: &str, base: &Path) -> Result<RepoTask, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    match value.get("version").and_then(serde_json::Value::as_u64) {
        Some(v) if (1..=u64::from(REPOSITORY_FORMAT_VERSION)).contains(&v) => {}
        Some(v) => {
            return Err(format!(
                "repository task format version {v} is not supported (this reads 1 to {REPOSITORY_FORMAT_VERSION})"
            ));
        }
        None => {
            return Err(format!(
                "missing `version` (the repository task format's is {REPOSITORY_FORMAT_VERSION})"
            ));
        }
    }
    let line: Line = serde_json::from_value(value).map_err(|e| e.to_string())?;
    if line.environment.is_some() && line.version < 2 {
        return Err("`environment` needs `\"version\": 2`".into());
    }
    for (field, given, version) in [
        ("commit", line.commit.is_some(), 3),
        ("test_patch", line.test_patch.is_some(), 3),
        ("work_dir", line.work_dir.is_some(), 4),
        ("tests_dir", line.tests_dir.is_some(), 4),
        ("reward_file", line.reward_file.is_some(), 4),
    ] {
        if given && line.version < version {
            return Err(format!("`{field}` needs `\"version\": {version}`"));
        }
    }
    environment_paths(&line)?;
    if line.hidden_tests.is_none() && line.test_patch.is_none() {
        return Err("a task needs `hidden_tests`, `test_patch` or both".into());
    }
    if line.environment.is_some() && !line.requirements.is_empty() {
        return Err(
            "`requirements` with an `environment`: the image brings the task's packages".into(),
        );
    }
    if line.id.trim().is_empty() {
        return Err("empty `id`".into());
    }
    match (&line.reward_file, line.fail_to_pass.is_empty()) {
        (None, true) => {
            return Err("`fail_to_pass` is empty: a task needs a test the fix makes pass".into());
        }
        (Some(_), _) if !line.fail_to_pass.is_empty() || !line.pass_to_pass.is_empty() => {
            return Err(
                "`fail_to_pass` and `pass_to_pass` with a `reward_file`: the reward file is the verdict"
                    .into(),
            );
        }
        _ => {}
    }
    if let Some(both) = line
        .fail_to_pass
        .iter()
        .find(|t| line.pass_to_pass.contains(t))
    {
        return Err(format!(
            "{both:?} is in both `fail_to_pass` and `pass_to_pass`"
        ));
    }
    if line.limits.disk_mib == Some(0) {
        return Err("`limits.disk_mib` must be at least 1".into());
    }
    let repository = beneath(base, &line.repository, "repository")?;
    let repository_kind = repository_kind(&repository, line.version)?;
    let commit = match (repository_kind, line.commit) {
        (RepositoryKind::Bundle, Some(c)) if is_commit_id(&c) => Some(c),
        (RepositoryKind::Bundle, Some(c)) => {
            return Err(format!(
                "`commit`: {c:?} is not a full commit id (40 lowercase hex digits)"
            ));
        }
        (RepositoryKind::Bundle, None) => {
            return Err(
                "`commit` is required with a bundle `repository`: the commit to check out".into(),
            );
        }
        (_, Some(_)) => {
            return Err("`commit` is only for a bundle `repository` (`.bundle`)".into());
        }
        (_, None) => None,
    };
    let patch_path = beneath(base, &line.patch, "patch")?;
    let patch = std::fs::read_to_string(&patch_path)
        .map_err(|e| format!("`patch`: {}: {e}", patch_path.display()))?;
    let mut hidden_tests = BTreeMap::new();
    if let Some(rel) = &line.hidden_tests {
        let hidden_dir = beneath(base, rel, "hidden_tests")?;
        read_tree(&hidden_dir, &hidden_dir, &mut hidden_tests)
            .map_err(|e| format!("`hidden_tests`: {}: {e}", hidden_dir.display()))?;
        if hidden_tests.is_empty() {
            return Err(format!(
                "`hidden_tests`: {} has no files",
                hidden_dir.display()
            ));
        }
    }
    let (test_patch, test_patch_paths) = match &line.test_patch {
        Some(rel) => {
            let path = beneath(base, rel, "test_patch")?;
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("`test_patch`: {}: {e}", path.display()))?;
            let paths = diff_paths(&text);
            if paths.is_empty() {
                return Err(format!(
                    "`test_patch`: {} is not a unified diff (it names no file)",
                    path.display()
                ));
            }
            (Some(text), paths)
        }
        None => (None, Vec::new()),
    };
    let environment = match &line.environment {
        Some(rel) => Some(beneath(base, rel, "environment")?),
        None => None,
    };
    Ok(RepoTask {
        id: line.id,
        repository,
        repository_kind,
        commit,
        setup: line.setup,
        requirements: line.requirements,
        problem_statement: line.problem_statement,
        test_command: line.test_command,
        hidden_tests,
        test_patch,
        test_patch_paths,
        fail_to_pass: line.fail_to_pass,
        pass_to_pass: line.pass_to_pass,
        patch,
        limits: line.limits,
        known_weak: line.known_weak,
        environment,
        work_dir: line.work_dir,
        tests_dir: line.tests_dir,
        reward_file: line.reward_file,
    })
}

/// Checks `work_dir`, `tests_dir` and `reward_file`: each needs an `environment` (the host's root
/// has no place for them), is absolute, outside `/proc`, `/dev`, `/tmp` and `/codegym` (the
/// sandbox's own), and none lies inside another (the reward file's dir is a dir of its own).
fn environment_paths(line: &Line) -> Result<(), String> {
    let reward_dir = line
        .reward_file
        .as_deref()
        .map(|f| match f.rsplit_once('/') {
            Some((dir, name)) if !dir.is_empty() && !name.is_empty() => Ok(dir),
            _ => Err(format!(
                "`reward_file`: {f:?} must be a file in a dir of its own (e.g. /logs/verifier/reward.txt)"
            )),
        })
        .transpose()?;
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (field, path) in [
        ("work_dir", line.work_dir.as_deref()),
        ("tests_dir", line.tests_dir.as_deref()),
        ("reward_file", reward_dir),
    ] {
        let Some(path) = path else { continue };
        if line.environment.is_none() {
            return Err(format!(
                "`{field}` needs an `environment`: the host's root has no place for it"
            ));
        }
        let p = Path::new(path);
        let top = p
            .components()
            .nth(1)
            .map(|c| c.as_os_str().to_string_lossy());
        if !p.is_absolute()
            || top.is_none()
            || p.components()
                .skip(1)
                .any(|c| !matches!(c, Component::Normal(_)))
            || top.is_some_and(|t| ["proc", "dev", "tmp", "codegym"].contains(&&*t))
        {
            return Err(format!(
                "`{field}`: {path:?} must be an absolute path outside /proc, /dev, /tmp and /codegym"
            ));
        }
        if let Some((other, _)) = seen
            .iter()
            .find(|(_, o)| p.starts_with(o) || Path::new(o).starts_with(p))
        {
            return Err(format!(
                "`{field}`: {path:?} overlaps `{other}` (each is a dir of its own)"
            ));
        }
        seen.push((field, path));
    }
    Ok(())
}

/// What `path` is, by its type and name; an archive or bundle needs version 3, and a bundle's
/// first line must be git's bundle signature.
fn repository_kind(path: &Path, version: u32) -> Result<RepositoryKind, String> {
    if path.is_dir() {
        return Ok(RepositoryKind::Directory);
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let kind = if [".tar", ".tar.gz", ".tgz"]
        .iter()
        .any(|e| name.ends_with(e))
    {
        RepositoryKind::Archive
    } else if name.ends_with(".bundle") {
        RepositoryKind::Bundle
    } else {
        return Err(format!(
            "`repository`: {} is neither a directory, a tar archive (.tar, .tar.gz, .tgz) nor a git bundle (.bundle)",
            path.display()
        ));
    };
    if version < 3 {
        return Err(format!(
            "`repository`: {} is not a directory (archives and bundles need `\"version\": 3`)",
            path.display()
        ));
    }
    if !path.is_file() {
        return Err(format!("`repository`: {} is not a file", path.display()));
    }
    if kind == RepositoryKind::Bundle {
        use std::io::Read;
        let mut head = [0u8; 16];
        let n = std::fs::File::open(path)
            .and_then(|mut f| f.read(&mut head))
            .map_err(|e| format!("`repository`: {}: {e}", path.display()))?;
        if !matches!(&head[..n], b"# v2 git bundle\n" | b"# v3 git bundle\n") {
            return Err(format!(
                "`repository`: {} is not a git bundle (no `# v2 git bundle` or `# v3 git bundle` line first)",
                path.display()
            ));
        }
    }
    Ok(kind)
}

fn is_commit_id(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `rel` under `base`: relative, no `..`, and (links resolved) still beneath `base`.
fn beneath(base: &Path, rel: &str, field: &str) -> Result<PathBuf, String> {
    let p = Path::new(rel);
    if rel.is_empty()
        || p.components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "`{field}`: {rel:?} must be a relative path beneath the task file's directory"
        ));
    }
    let full = base.join(p);
    let real = full
        .canonicalize()
        .map_err(|e| format!("`{field}`: {}: {e}", full.display()))?;
    if !real.starts_with(base) {
        return Err(format!(
            "`{field}`: {rel:?} leads outside the task file's directory"
        ));
    }
    Ok(real)
}

/// Every regular file beneath `dir` by its path relative to it (links are refused).
pub(crate) fn read_tree_into(
    dir: &Path,
    out: &mut BTreeMap<String, Vec<u8>>,
) -> std::io::Result<()> {
    read_tree(dir, dir, out)
}

/// Every regular file beneath `dir` by its path relative to `root` (links are refused).
fn read_tree(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = entry.path();
        if kind.is_dir() {
            read_tree(root, &path, out)?;
        } else if kind.is_file() {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            out.insert(rel.display().to_string(), std::fs::read(&path)?);
        } else {
            return Err(std::io::Error::other(format!(
                "{} is not a regular file or directory",
                path.display()
            )));
        }
    }
    Ok(())
}
