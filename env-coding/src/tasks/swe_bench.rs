//! SWE-bench instances imported as a repository task set (format version 4): `codegym tasks
//! import swe-bench`. Nothing is fetched: each instance's repository comes from a local git
//! bundle, `REPOS/<owner>__<name>.bundle` (as `git bundle create F --all` writes it in a clone).
//!
//! An instance (one JSON object a line; SWE-bench's fields, the rest ignored): `instance_id`,
//! `repo` (`owner/name`), `base_commit`, `patch` (the gold fix), `test_patch`,
//! `problem_statement`, `FAIL_TO_PASS` and `PASS_TO_PASS` (JSON strings holding lists, as the
//! dataset stores them, or lists), and `version`, `environment_setup_commit`, `hints_text`,
//! `created_at` (read, not used: the task format has no place for them). Written to `OUT`:
//! `tasks.jsonl` (one task per instance: the bundle at `base_commit`, the gold patch, the test
//! patch), `repos/` (each bundle once, hard-linked when `OUT` is on the same file system),
//! `patches/` and `test_patches/` (one diff per instance), and the environment image if one is
//! given. The written set is loaded back before the import reports success, so what it wrote is
//! a set `tasks check` reads.
//!
//! The test command: SWE-bench's harness maps each repository and version to its own; here one
//! command serves every instance of an import, `{test_files}` in it replaced by the Python files
//! the instance's test patch leaves (shell-quoted; data files left out, as SWE-bench's harness
//! leaves them out of its test directives). The default is pytest over those files, writing
//! JUnit XML with node ids (`-o junit_family=xunit1`), the ids SWE-bench's pytest instances list.
//! Errors about an instance name the input file and line.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::TaskError;
use super::repository::{REPOSITORY_FORMAT_VERSION, RepoTaskSet, diff_headers};

/// The default test command (`{test_files}`: the Python files the test patch leaves).
pub const SWE_BENCH_TEST_COMMAND: &str = "python -m pytest -q -p no:cacheprovider \
    -o junit_family=xunit1 --junitxml=\"$CODEGYM_JUNIT\" {test_files}";

/// What to import and how.
#[derive(Debug, Clone)]
pub struct SweBenchImport {
    /// The instances (JSON Lines).
    pub instances: PathBuf,
    /// Local repositories: `<owner>__<name>.bundle` each.
    pub repos: PathBuf,
    /// The output dir (created if missing).
    pub out: PathBuf,
    /// `None`: [`SWE_BENCH_TEST_COMMAND`].
    pub test_command: Option<String>,
    /// An OCI image archive every task runs in (copied into `OUT/images/`).
    pub environment: Option<PathBuf>,
    /// Python packages the test command needs (without an environment: pytest, at least).
    pub requirements: Vec<String>,
}

/// One task line as written (the fields in the format's order).
#[derive(Serialize)]
struct TaskLine<'a> {
    version: u32,
    id: &'a str,
    repository: String,
    commit: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    environment: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    requirements: &'a [String],
    problem_statement: &'a str,
    test_command: String,
    test_patch: String,
    fail_to_pass: Vec<String>,
    pass_to_pass: Vec<String>,
    patch: String,
}

/// One instance as SWE-bench stores it.
#[derive(Debug, Deserialize)]
struct Instance {
    instance_id: String,
    repo: String,
    base_commit: String,
    patch: String,
    test_patch: String,
    problem_statement: String,
    #[serde(rename = "FAIL_TO_PASS")]
    fail_to_pass: TestList,
    #[serde(rename = "PASS_TO_PASS", default)]
    pass_to_pass: Option<TestList>,
}

/// A list of test ids, or a JSON string holding one (the dataset's own encoding).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum TestList {
    List(Vec<String>),
    Encoded(String),
}

impl TestList {
    fn ids(&self, field: &str) -> Result<Vec<String>, String> {
        match self {
            TestList::List(ids) => Ok(ids.clone()),
            TestList::Encoded(text) => serde_json::from_str(text)
                .map_err(|e| format!("`{field}`: not a JSON list of test ids: {e}")),
        }
    }
}

/// Imports `opts.instances` into `opts.out` (see the module's doc); returns the written task
/// file's path and how many tasks it holds.
pub fn import_swe_bench(opts: &SweBenchImport) -> Result<(PathBuf, usize), TaskError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TaskError::Io { path, source }
    };
    let text = std::fs::read_to_string(&opts.instances).map_err(io(&opts.instances))?;
    let out = &opts.out;
    for dir in ["repos", "patches", "test_patches"] {
        std::fs::create_dir_all(out.join(dir)).map_err(io(&out.join(dir)))?;
    }
    let environment = match &opts.environment {
        Some(image) => Some(copy_environment(image, out)?),
        None => None,
    };
    let command = opts
        .test_command
        .as_deref()
        .unwrap_or(SWE_BENCH_TEST_COMMAND);
    let mut lines = Vec::new();
    let mut ids: Vec<String> = Vec::new();
    // Bundles linked into `OUT/repos/` by this import (each repository's once).
    let mut linked = BTreeSet::new();
    for (i, raw) in text.lines().enumerate() {
        let raw = raw.trim();
        if raw.is_empty() {
            continue;
        }
        let parse = |message: String| TaskError::Parse {
            path: opts.instances.clone(),
            line: i + 1,
            message,
        };
        let instance: Instance = serde_json::from_str(raw).map_err(|e| parse(e.to_string()))?;
        if ids.contains(&instance.instance_id) {
            return Err(parse(format!(
                "duplicate instance_id {:?}",
                instance.instance_id
            )));
        }
        let task = task_line(
            opts,
            &instance,
            command,
            environment.as_deref(),
            &mut linked,
        )
        .map_err(|m| parse(format!("instance {}: {m}", instance.instance_id)))?;
        ids.push(instance.instance_id);
        lines.push(task);
    }
    if lines.is_empty() {
        return Err(TaskError::Empty {
            path: opts.instances.clone(),
        });
    }
    let tasks = out.join("tasks.jsonl");
    let mut body = format!(
        "// Imported from {} by `codegym tasks import swe-bench`.\n",
        opts.instances.display()
    );
    for line in &lines {
        body.push_str(line);
        body.push('\n');
    }
    trajectory::atomic::write_atomic(&tasks, body.as_bytes()).map_err(io(&tasks))?;
    let set = RepoTaskSet::load(&tasks)?;
    Ok((tasks, set.tasks.len()))
}

/// One task line for `instance`, its files written under `opts.out`.
fn task_line(
    opts: &SweBenchImport,
    instance: &Instance,
    command: &str,
    environment: Option<&str>,
    linked: &mut BTreeSet<String>,
) -> Result<String, String> {
    let id = &instance.instance_id;
    if id.trim().is_empty() {
        return Err("empty `instance_id`".into());
    }
    let Some((owner, name)) = instance.repo.split_once('/') else {
        return Err(format!("`repo` {:?} is not owner/name", instance.repo));
    };
    let repo_file = format!("{}__{}.bundle", file_name(owner), file_name(name));
    let bundle = opts.repos.join(&repo_file);
    if !bundle.is_file() {
        return Err(format!(
            "no bundle {} for {} (the repositories are local: `git bundle create {repo_file} --all` in a clone)",
            bundle.display(),
            instance.repo
        ));
    }
    if !linked.contains(&repo_file) {
        link_or_copy(&bundle, &opts.out.join("repos").join(&repo_file))?;
        linked.insert(repo_file.clone());
    }
    let fail_to_pass = instance.fail_to_pass.ids("FAIL_TO_PASS")?;
    let pass_to_pass = match &instance.pass_to_pass {
        Some(list) => list.ids("PASS_TO_PASS")?,
        None => Vec::new(),
    };
    // As SWE-bench's harness picks its test directives: the test patch's files, less data files.
    let test_files: Vec<String> = diff_headers(&instance.test_patch)
        .into_iter()
        .filter(|(new, path)| *new && path.ends_with(".py"))
        .map(|(_, path)| path)
        .collect();
    if test_files.is_empty() && command.contains("{test_files}") {
        return Err(
            "`test_patch` leaves no Python file to run (`{test_files}` would be empty)".into(),
        );
    }
    let quoted: Vec<String> = test_files
        .iter()
        .map(|f| format!("'{}'", f.replace('\'', r"'\''")))
        .collect();
    let stem = file_name(id);
    let patch = format!("patches/{stem}.diff");
    let test_patch = format!("test_patches/{stem}.diff");
    for (rel, text) in [
        (&patch, &instance.patch),
        (&test_patch, &instance.test_patch),
    ] {
        let path = opts.out.join(rel);
        trajectory::atomic::write_atomic(&path, text.as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let task = TaskLine {
        version: REPOSITORY_FORMAT_VERSION,
        id,
        repository: format!("repos/{repo_file}"),
        commit: &instance.base_commit,
        environment,
        requirements: &opts.requirements,
        problem_statement: &instance.problem_statement,
        test_command: command.replace("{test_files}", &quoted.join(" ")),
        test_patch,
        fail_to_pass,
        pass_to_pass,
        patch,
    };
    serde_json::to_string(&task).map_err(|e| e.to_string())
}

/// `s` as one file name: characters other than letters, digits, `.`, `_` and `-` become `_`,
/// and a leading dot too (no hidden or `..` names).
fn file_name(s: &str) -> String {
    let mut name: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.starts_with('.') || name.is_empty() {
        name.insert(0, '_');
    }
    name
}

/// `to` as a hard link of `from` (a copy across file systems), replacing what an earlier import
/// left there.
fn link_or_copy(from: &Path, to: &Path) -> Result<(), String> {
    let err = |e: std::io::Error| format!("{}: {e}", to.display());
    if std::fs::symlink_metadata(to).is_ok() {
        std::fs::remove_file(to).map_err(err)?;
    }
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).map_err(err)?;
    }
    Ok(())
}

/// The image archive copied into `OUT/images/`; its path relative to `out`.
pub(crate) fn copy_environment(image: &Path, out: &Path) -> Result<String, TaskError> {
    let name = image
        .file_name()
        .map(|n| file_name(&n.to_string_lossy()))
        .unwrap_or_default();
    if !image.is_file() {
        return Err(TaskError::Io {
            path: image.to_path_buf(),
            source: std::io::Error::other(
                "not a file: give the image as an oci-archive (`podman save --format oci-archive`)",
            ),
        });
    }
    let dir = out.join("images");
    std::fs::create_dir_all(&dir).map_err(|source| TaskError::Io {
        path: dir.clone(),
        source,
    })?;
    link_or_copy(image, &dir.join(&name)).map_err(|m| TaskError::Io {
        path: image.to_path_buf(),
        source: std::io::Error::other(m),
    })?;
    Ok(format!("images/{name}"))
}
