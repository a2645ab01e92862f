//! Task sets: the native JSONL format and loaders for HumanEval and MBPP.
//!
//! # Native format (`schema_version` 1)
//! JSON Lines. Either every task line carries `"schema_version": 1`, or the first line is a header
//! `{"schema_version": 1}` (optionally with `"name"` and `"description"`) and task lines omit it.
//! Blank lines and lines starting with `//` are skipped. A task line:
//!
//! ```json
//! {"id": "sum-of-squares", "prompt": "...", "reward": {"version": 1, "components": [...]},
//!  "reference_solution": "print(...)", "completion_prefix": null, "metadata": {"difficulty": "easy"}}
//! ```
//!
//! `reward` is a [`RewardSpec`]; `reference_solution` is a whole program (checked by `codegym tasks
//! check`); `completion_prefix`, when set, is prepended to completions in `codegym evaluate` (the
//! HumanEval convention: the completion follows the prompt). `"deterministic": false` marks a task
//! whose programs' verdicts may differ between runs of the same code (clocks, randomness on purpose):
//! `Evaluate` then never shares one verdict between identical submissions.
//!
//! HumanEval (`task_id, prompt, canonical_solution, test, entry_point`) and MBPP (`task_id, text or
//! prompt, code, test_list, test_setup_code`) files are recognised by their fields, as JSONL or a JSON
//! array, optionally gzip-compressed (detected by the magic bytes, whatever the file name). So are
//! the stdin/stdout judged sets (issue 14, `contests.rs`): CodeContests (`description`,
//! `public_tests`), APPS / TACO (`question`, `input_output`) and LiveCodeBench
//! (`question_content`, `public_test_cases`); HumanEval+ / MBPP+ (`evalplus.rs`: `base_input`,
//! `canonical_solution`, `entry_point`), scored by differential testing; and MultiPL-E
//! (`multipl_e.rs`: `name`, `language`, `tests`, `stop_tokens`), tests appended in the language.
//!
//! Repository (SWE-style) task sets are a format of their own (`repository.rs`, [`RepoTaskSet`]):
//! a task is a repository, not a program, and is scored by [`crate::repo`]. SWE-bench instances
//! are imported into one (`swe_bench.rs`, [`import_swe_bench`]).

mod contests;
mod diff;
mod entry_point;
mod evalplus;
mod foreign;
mod multipl_e;
mod native;
mod repository;
mod swe_bench;

pub use multipl_e::language as multipl_e_language;

pub use contests::call_driver;

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::data::TaskData;
use crate::reward::RewardSpec;

pub use native::NATIVE_SCHEMA_VERSION;
pub(crate) use repository::read_tree_into;
pub use repository::{
    REPOSITORY_FORMAT_VERSION, RepoLimits, RepoTask, RepoTaskSet, RepositoryKind,
};
pub(crate) use swe_bench::copy_environment;
pub use swe_bench::{SWE_BENCH_TEST_COMMAND, SweBenchImport, import_swe_bench};

/// The bundled example set (`env-coding/tasks/examples.jsonl`).
pub const BUILTIN_EXAMPLES: &str = include_str!("../../tasks/examples.jsonl");

/// The name that selects [`TaskSet::builtin_examples`] where a path is expected.
pub const BUILTIN_EXAMPLES_NAME: &str = "builtin:examples";

/// One coding task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Task {
    pub id: String,
    /// What the model is asked (the observation of `reset`).
    pub prompt: String,
    pub reward: RewardSpec,
    /// A complete program that solves the task.
    pub reference_solution: Option<String>,
    /// Prepended to completions (HumanEval convention).
    pub completion_prefix: Option<String>,
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Whether a program's verdict depends only on its code, so identical submissions may share one
    /// (`verdicts.rs`). False for tasks whose programs read clocks, randomness or the environment
    /// on purpose.
    pub deterministic: bool,
    /// Data tasks (issue 13): input files, CLI inputs, typed outputs (empty for plain tasks).
    #[serde(flatten)]
    pub data: TaskData,
    /// Issue 14: the language solutions are written in (native field `language`, default
    /// `python`; a reset option `language` overrides it for an episode).
    pub language: codegym_sandbox::lang::Language,
}

impl Task {
    /// A task from its native JSON form (the `options.task` of `reset`); `schema_version` optional.
    pub fn from_json(value: serde_json::Value) -> Result<Task, String> {
        // An inline task defaults to the current version; an explicit other version is still refused.
        native::parse_task(value, Some(NATIVE_SCHEMA_VERSION), None)
    }

    /// The task's native JSON form, which [`Task::from_json`] reads back (tasks sent inline in
    /// `reset`'s `task` option, e.g. by a rollout to remote env servers).
    pub fn to_json(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let serde_json::Value::Object(map) = &mut value {
            map.insert("schema_version".into(), NATIVE_SCHEMA_VERSION.into());
        }
        value
    }

    /// A SHA-256 of the task's whole in-memory description (`Debug`: every field, so fields added
    /// later are covered; data files by a digest of their bytes), made once per scoring and shared
    /// by the verdict key and the provenance. Equal tasks give equal fingerprints within one
    /// process (where `Debug` text could differ for equal tasks, the result is a miss, never a
    /// wrong hit).
    pub(crate) fn fingerprint(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        Sha256::digest(format!("{self:?}").as_bytes()).into()
    }

    /// The program scored for `completion` (HumanEval convention).
    pub fn program_from_completion(&self, completion: &str) -> String {
        match &self.completion_prefix {
            Some(prefix) => format!("{prefix}{completion}"),
            None => completion.to_string(),
        }
    }
}

/// Where a task file failed to load.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{path}: no tasks")]
    Empty { path: PathBuf },
}

/// The file formats [`TaskSet::load`] recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskFormat {
    Native,
    HumanEval,
    Mbpp,
    // Issue 14: stdin/stdout judged datasets (`contests.rs`).
    CodeContests,
    Apps,
    LiveCodeBench,
    /// HumanEval+ and MBPP+ (`evalplus.rs`).
    EvalPlus,
    /// MultiPL-E (`multipl_e.rs`).
    MultiplE,
}

/// An ordered set of tasks with unique ids.
#[derive(Debug, Clone)]
pub struct TaskSet {
    tasks: Vec<Arc<Task>>,
    index: HashMap<String, usize>,
    format: TaskFormat,
    source: String,
}

impl TaskSet {
    /// Loads a task file, detecting the format; `builtin:examples` is the bundled set.
    pub fn load(path: impl AsRef<Path>) -> Result<TaskSet, TaskError> {
        let path = path.as_ref();
        if path.as_os_str() == BUILTIN_EXAMPLES_NAME {
            return Ok(Self::builtin_examples());
        }
        let io = |source| TaskError::Io {
            path: path.to_path_buf(),
            source,
        };
        let bytes = read_maybe_gzip(path).map_err(io)?;
        let text = String::from_utf8(bytes).map_err(|e| TaskError::Parse {
            path: path.to_path_buf(),
            line: 0,
            message: format!("not UTF-8: {e}"),
        })?;
        Self::parse(&text, path)
    }

    /// Parses task-file text; `path` only names the source in errors.
    pub fn parse(text: &str, path: &Path) -> Result<TaskSet, TaskError> {
        let err = |line: usize, message: String| TaskError::Parse {
            path: path.to_path_buf(),
            line,
            message,
        };
        // Issue 14: EvalPlus files hold integers too large for a JSON value (f64): their records
        // are read from their own text, and the format is told from the first record's keys.
        if first_raw_keys(text).is_some_and(|keys| detect(&keys) == TaskFormat::EvalPlus) {
            let tasks = raw_records(text)
                .map_err(|(line, m)| err(line, m))?
                .into_iter()
                .map(|(line, raw)| {
                    evalplus::evalplus(raw)
                        .map(|t| (line, t))
                        .map_err(|m| err(line, m))
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Self::from_tasks(tasks, TaskFormat::EvalPlus, path.display().to_string())
                .map_err(|(line, m)| err(line, m))?
                .non_empty(path);
        }
        let records = records(text).map_err(|(line, m)| err(line, m))?;
        let Some((_, first)) = records.first() else {
            return Err(TaskError::Empty {
                path: path.to_path_buf(),
            });
        };
        let format = detect(first);
        let tasks = match format {
            TaskFormat::Native => {
                // Data files given by path are relative to the task file's directory.
                let base = match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                native::parse_records(records, Some(base)).map_err(|(line, m)| err(line, m))?
            }
            TaskFormat::HumanEval => records
                .into_iter()
                .map(|(line, v)| {
                    foreign::humaneval(v)
                        .map(|t| (line, t))
                        .map_err(|m| err(line, m))
                })
                .collect::<Result<Vec<_>, _>>()?,
            TaskFormat::Mbpp => records
                .into_iter()
                .map(|(line, v)| {
                    foreign::mbpp(v)
                        .map(|t| (line, t))
                        .map_err(|m| err(line, m))
                })
                .collect::<Result<Vec<_>, _>>()?,
            // Read above, from the records' own text; `detect` agrees with `first_raw_keys`.
            TaskFormat::EvalPlus => unreachable_evalplus(path)?,
            TaskFormat::MultiplE => records
                .into_iter()
                .map(|(line, v)| {
                    multipl_e::multipl_e(v)
                        .map(|t| (line, t))
                        .map_err(|m| err(line, m))
                })
                .collect::<Result<Vec<_>, _>>()?,
            TaskFormat::CodeContests | TaskFormat::Apps | TaskFormat::LiveCodeBench => {
                let parse = match format {
                    TaskFormat::CodeContests => contests::code_contests,
                    TaskFormat::Apps => contests::apps,
                    _ => contests::livecodebench,
                };
                records
                    .into_iter()
                    .map(|(line, v)| parse(v).map(|t| (line, t)).map_err(|m| err(line, m)))
                    .collect::<Result<Vec<_>, _>>()?
            }
        };
        Self::from_tasks(tasks, format, path.display().to_string())
            .map_err(|(line, m)| err(line, m))?
            .non_empty(path)
    }

    fn non_empty(self, path: &Path) -> Result<TaskSet, TaskError> {
        if self.tasks.is_empty() {
            Err(TaskError::Empty {
                path: path.to_path_buf(),
            })
        } else {
            Ok(self)
        }
    }

    /// `(line, task)` pairs into a set; a duplicate id is an error at its line.
    fn from_tasks(
        tasks: Vec<(usize, Task)>,
        format: TaskFormat,
        source: String,
    ) -> Result<TaskSet, (usize, String)> {
        let mut set = TaskSet {
            tasks: Vec::new(),
            index: HashMap::new(),
            format,
            source,
        };
        for (line, task) in tasks {
            if set.index.contains_key(&task.id) {
                return Err((line, format!("duplicate task id {:?}", task.id)));
            }
            set.index.insert(task.id.clone(), set.tasks.len());
            set.tasks.push(Arc::new(task));
        }
        Ok(set)
    }

    /// The bundled example tasks.
    pub fn builtin_examples() -> TaskSet {
        match Self::parse(BUILTIN_EXAMPLES, Path::new(BUILTIN_EXAMPLES_NAME)) {
            Ok(set) => set,
            // The file is compiled in and parsed by a unit test, so this is unreachable in a build
            // that passed its tests; an empty set keeps it from panicking regardless.
            Err(e) => {
                tracing::error!(error = %e, "the bundled example tasks do not parse");
                TaskSet {
                    tasks: Vec::new(),
                    index: HashMap::new(),
                    format: TaskFormat::Native,
                    source: BUILTIN_EXAMPLES_NAME.into(),
                }
            }
        }
    }

    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.tasks.iter().map(|t| t.id.as_str())
    }

    pub fn get(&self, id: &str) -> Option<&Arc<Task>> {
        self.index.get(id).map(|&i| &self.tasks[i])
    }

    /// The task at position `i` (file order).
    pub fn by_index(&self, i: usize) -> Option<&Arc<Task>> {
        self.tasks.get(i)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Task>> {
        self.tasks.iter()
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    pub fn format(&self) -> TaskFormat {
        self.format
    }

    /// The file (or `builtin:examples`) the set came from.
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// JSON records with their 1-based line numbers: JSON Lines (blank and `//` lines skipped), or a JSON
/// array, whose records are numbered by position instead.
fn records(text: &str) -> Result<Vec<(usize, serde_json::Value)>, (usize, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim_start().starts_with('[') {
        let values: Vec<serde_json::Value> = serde_json::from_str(text)
            .map_err(|e| (e.line(), format!("invalid JSON array: {e}")))?;
        return Ok(values
            .into_iter()
            .enumerate()
            .map(|(i, v)| (i + 1, v))
            .collect());
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with("//") {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(trimmed).map_err(|e| (i + 1, format!("invalid JSON: {e}")))?;
        if !value.is_object() {
            return Err((i + 1, "expected a JSON object".into()));
        }
        out.push((i + 1, value));
    }
    Ok(out)
}

/// The first record's keys (values unparsed, so numbers of any size are fine), as a JSON object
/// `detect` reads; `None` when it is not an object.
fn first_raw_keys(text: &str) -> Option<serde_json::Value> {
    let (_, first) = *raw_records(text).ok()?.first()?;
    let keys: HashMap<String, &serde_json::value::RawValue> = serde_json::from_str(first).ok()?;
    Some(serde_json::Value::Object(
        keys.into_keys()
            .map(|k| (k, serde_json::Value::Null))
            .collect(),
    ))
}

/// `detect` found EvalPlus where `first_raw_keys` did not (the first record parsed as a value but
/// not as raw keys): cannot happen, reported as a parse error rather than a panic.
fn unreachable_evalplus(path: &Path) -> Result<Vec<(usize, Task)>, TaskError> {
    Err(TaskError::Parse {
        path: path.to_path_buf(),
        line: 1,
        message: "EvalPlus records could not be read as text".into(),
    })
}

/// The records' JSON texts with their line numbers (as [`records`] numbers them), unparsed.
fn raw_records(text: &str) -> Result<Vec<(usize, &str)>, (usize, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim_start().starts_with('[') {
        let values: Vec<&serde_json::value::RawValue> = serde_json::from_str(text)
            .map_err(|e| (e.line(), format!("invalid JSON array: {e}")))?;
        return Ok(values
            .into_iter()
            .enumerate()
            .map(|(i, v)| (i + 1, v.get()))
            .collect());
    }
    Ok(text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with("//"))
        .collect())
}

fn detect(first: &serde_json::Value) -> TaskFormat {
    let has = |k: &str| first.get(k).is_some();
    if has("schema_version") || has("reward") {
        TaskFormat::Native
    } else if has("base_input") && has("canonical_solution") && has("entry_point") {
        TaskFormat::EvalPlus
    } else if has("stop_tokens") && has("tests") && has("language") && has("prompt") {
        TaskFormat::MultiplE
    } else if has("entry_point") && has("test") {
        TaskFormat::HumanEval
    } else if has("test_list") {
        TaskFormat::Mbpp
    } else if has("public_tests") && has("description") {
        TaskFormat::CodeContests
    } else if has("input_output") && has("question") {
        TaskFormat::Apps
    } else if has("public_test_cases") && has("question_content") {
        TaskFormat::LiveCodeBench
    } else {
        TaskFormat::Native
    }
}

/// Reads a file, gunzipping it when it starts with the gzip magic bytes (task and sample files may be
/// `.jsonl.gz`, whatever their name says).
pub(crate) fn read_maybe_gzip(path: &Path) -> std::io::Result<Vec<u8>> {
    let raw = std::fs::read(path)?;
    if !raw.starts_with(&[0x1f, 0x8b]) {
        return Ok(raw);
    }
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(raw.as_slice()).read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_round_trips_through_its_inline_json() {
        // Native and foreign (HumanEval-style, with a completion prefix) tasks alike.
        let humaneval = r#"{"task_id": "HumanEval/0", "prompt": "def f(x):\n", "canonical_solution": "    return x\n", "test": "def check(candidate):\n    assert candidate(1) == 1\n", "entry_point": "f"}"#;
        let foreign = TaskSet::parse(humaneval, Path::new("he.jsonl")).unwrap();
        let builtin = TaskSet::builtin_examples();
        for task in builtin.iter().chain(foreign.iter()) {
            let back = Task::from_json(task.to_json()).unwrap();
            assert_eq!(&back, task.as_ref(), "{}", task.id);
        }
    }

    #[test]
    fn builtin_examples_parse() {
        let set = TaskSet::parse(BUILTIN_EXAMPLES, Path::new("examples.jsonl")).unwrap();
        assert!((10..=20).contains(&set.len()), "{}", set.len());
        assert!(set.iter().all(|t| t.reference_solution.is_some()));
        assert_eq!(TaskSet::builtin_examples().len(), set.len());
        assert!(set.get("sum-of-squares").is_some());
    }

    #[test]
    fn errors_name_the_line() {
        let text = "{\"schema_version\": 1}\n\n{\"id\": \"a\", \"prompt\": \"p\", \"reward\": {\"version\": 1, \"components\": [{\"type\": \"exit_code\"}]}}\n{oops\n";
        let e = TaskSet::parse(text, Path::new("t.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.jsonl:4: invalid JSON"), "{e}");
    }

    #[test]
    fn duplicate_ids_and_empty_files() {
        let line = "{\"schema_version\": 1, \"id\": \"a\", \"prompt\": \"p\", \"reward\": {\"version\": 1, \"components\": [{\"type\": \"exit_code\"}]}}";
        let e = TaskSet::parse(&format!("{line}\n{line}\n"), Path::new("d.jsonl")).unwrap_err();
        assert!(
            e.to_string().contains("d.jsonl:2: duplicate task id"),
            "{e}"
        );
        assert!(matches!(
            TaskSet::parse("\n\n", Path::new("e")),
            Err(TaskError::Empty { .. })
        ));
        assert!(matches!(
            TaskSet::parse("{\"schema_version\": 1}\n", Path::new("e")),
            Err(TaskError::Empty { .. })
        ));
    }
}
