//! Data tasks (issue 13): the sample files a program reads, the command-line inputs it is given and
//! the typed outputs it must produce, as a task declares them ([`TaskData`]).
//!
//! In a native task line (and inline in reset options and `Evaluate` items):
//!
//! ```json
//! {"files": {"sales.csv": {"path": "data/sales.csv"}, "notes.txt": {"text": "..."},
//!            "blob.bin": {"base64": "AAEC"}},
//!  "inputs": {"region": "west", "min_units": 2},
//!  "outputs": {"total_revenue": "float", "units": "int", "report": "file"}}
//! ```
//!
//! - `files` appear in the run's work dir under their names, owned by the server and mode 0444 (the
//!   program can read them, not write them). A `path` is read once, at load, relative to the task
//!   file's directory and beneath it (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`: no
//!   `..`, no absolute path, no symlink); inline tasks may only carry `text` or `base64`. Sizes are
//!   capped ([`MAX_FILE_BYTES`], [`MAX_TOTAL_BYTES`]).
//! - `inputs` become `--name value` arguments after `main.py`, in name order (strings as they are,
//!   numbers and bools as JSON writes them, arrays and objects as JSON text).
//! - `outputs` (see [`outputs`]): the program writes `outputs/<name>` (the directory's path is also
//!   `$CODEGYM_OUTPUTS`); the sandbox parses each by type after the run into the result's `outputs`.
//!
//! [`context`] summarises the CSV and JSON files for prompts, once per task.

pub mod context;
pub mod outputs;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use serde::{Deserialize, Serialize, Serializer};

pub use context::DataContext;
pub use outputs::OutputType;

/// Largest input file.
pub const MAX_FILE_BYTES: u64 = 16 << 20;
/// Largest sum of a task's input files.
pub const MAX_TOTAL_BYTES: u64 = 64 << 20;
/// Most files, inputs or outputs a task may declare (each).
pub const MAX_ENTRIES: usize = 64;
/// Longest rendered input value (it is one argv string).
pub const MAX_INPUT_BYTES: usize = 64 << 10;
/// The directory of the work dir the program writes its outputs to.
pub const OUTPUTS_DIR: &str = "outputs";

/// The data side of a task: input files, command-line inputs, declared outputs. Serialises back to
/// the inline native form (files as `text` or `base64`), so a task round-trips through JSON.
#[derive(Clone, Default, PartialEq, Eq, Serialize)]
pub struct TaskData {
    /// Set only by [`TaskData::overlay`], which keeps `files_sha256` in step ([`TaskData::files`]).
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        serialize_with = "inline_files"
    )]
    files: BTreeMap<String, Arc<[u8]>>,
    /// SHA-256 of `files` (each name and its bytes), made when they are set: what `Debug` shows
    /// of their bytes.
    #[serde(skip)]
    files_sha256: [u8; 32],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, serde_json::Value>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs: BTreeMap<String, OutputType>,
    /// pip requirement strings (see [`codegym_sandbox::packages`]): resolved once into a read-only site dir.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<String>,
    /// The prompt-ready summary of the CSV/JSON files, computed once when the files are set.
    #[serde(skip)]
    pub context: Option<DataContext>,
    /// The package cache's site dir for `requirements`, once resolved (first on the runs' path).
    #[serde(skip)]
    pub site_dir: Option<std::path::PathBuf>,
}

/// One entry of `files`: exactly one of the three sources.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    text: Option<String>,
    base64: Option<String>,
    path: Option<String>,
}

/// The raw JSON of the three fields, as they appear on a task line or in options.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct RawData {
    #[serde(default)]
    pub files: Option<serde_json::Value>,
    #[serde(default)]
    pub inputs: Option<serde_json::Value>,
    #[serde(default)]
    pub outputs: Option<serde_json::Value>,
    #[serde(default)]
    pub requirements: Option<serde_json::Value>,
}

/// The files by name and size, and one digest of all their bytes, never the bytes: a task's
/// `Debug` text is part of every verdict's cache key (`verdicts.rs`), and formatting a data file's
/// megabytes for each submission cost far more than its run (bench: a 4.6 MiB file, ~250 ms per
/// submission).
impl std::fmt::Debug for TaskData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sizes: BTreeMap<&str, usize> = self
            .files
            .iter()
            .map(|(k, v)| (k.as_str(), v.len()))
            .collect();
        f.debug_struct("TaskData")
            .field("files", &sizes)
            .field("files_sha256", &self.files_sha256)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .field("requirements", &self.requirements)
            .field("context", &self.context)
            .field("site_dir", &self.site_dir)
            .finish()
    }
}

impl TaskData {
    /// The input files, by name.
    pub fn files(&self) -> &BTreeMap<String, Arc<[u8]>> {
        &self.files
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
            && self.inputs.is_empty()
            && self.outputs.is_empty()
            && self.requirements.is_empty()
    }

    /// Parses and checks the fields; `base` is the task file's directory (`None`: an inline task,
    /// whose files cannot be paths).
    pub fn from_raw(raw: RawData, base: Option<&Path>) -> Result<TaskData, String> {
        let mut data = TaskData::default();
        data.overlay(raw, base)?;
        Ok(data)
    }

    /// Adds (or replaces, by name) the entries of `raw`: how reset options and `Evaluate` items run
    /// a task on other inputs or files.
    pub fn overlay(&mut self, raw: RawData, base: Option<&Path>) -> Result<(), String> {
        if let Some(files) = raw.files {
            for (name, spec) in object(files, "files")? {
                check_file_name(&name)?;
                let spec: FileSpec = serde_json::from_value(spec)
                    .map_err(|e| format!("files.{name}: {e} (expected text, base64 or path)"))?;
                let bytes = load_file(&name, spec, base)?;
                self.files.insert(name, bytes.into());
            }
            let total: u64 = self.files.values().map(|f| f.len() as u64).sum();
            if total > MAX_TOTAL_BYTES || self.files.len() > MAX_ENTRIES {
                return Err(format!(
                    "files: at most {MAX_ENTRIES} files of {MAX_TOTAL_BYTES} bytes in all"
                ));
            }
            self.context = DataContext::of(&self.files);
            self.files_sha256 = digest(&self.files);
        }
        if let Some(inputs) = raw.inputs {
            for (name, value) in object(inputs, "inputs")? {
                check_input_name(&name)?;
                if render(&value).is_none_or(|s| s.len() > MAX_INPUT_BYTES || s.contains('\0')) {
                    return Err(format!(
                        "inputs.{name}: expected a string, number, bool, array or object \
                         (no null, no NUL, at most {MAX_INPUT_BYTES} bytes)"
                    ));
                }
                self.inputs.insert(name, value);
            }
            if self.inputs.len() > MAX_ENTRIES {
                return Err(format!("inputs: at most {MAX_ENTRIES}"));
            }
        }
        if let Some(reqs) = raw.requirements {
            // Syntax and policy are the package cache's to check, when the task is used.
            self.requirements = serde_json::from_value(reqs)
                .map_err(|e| format!("requirements: expected a list of strings: {e}"))?;
            if self.requirements.len() > MAX_ENTRIES {
                return Err(format!("requirements: at most {MAX_ENTRIES}"));
            }
        }
        if let Some(outputs) = raw.outputs {
            for (name, kind) in object(outputs, "outputs")? {
                outputs::check_name(&name)?;
                let kind: OutputType = serde_json::from_value(kind).map_err(|e| {
                    format!(
                        "outputs.{name}: {e} (str, int, float, bool, datetime, timedelta, file)"
                    )
                })?;
                self.outputs.insert(name, kind);
            }
            if self.outputs.len() > MAX_ENTRIES {
                return Err(format!("outputs: at most {MAX_ENTRIES}"));
            }
        }
        Ok(())
    }

    /// The program's arguments after `main.py`: `--name value` per input, in name order.
    /// What the sandbox needs of this data for one run.
    pub fn run_data(&self) -> codegym_sandbox::RunData {
        let outputs = (!self.outputs.is_empty()).then(|| {
            Arc::new(outputs::Declared(self.outputs.clone()))
                as Arc<dyn codegym_sandbox::CollectOutputs>
        });
        codegym_sandbox::RunData {
            inputs: self.files.clone(),
            argv: self.argv(),
            site_dir: self.site_dir.clone(),
            outputs,
        }
    }

    pub fn argv(&self) -> Vec<String> {
        self.inputs
            .iter()
            .flat_map(|(k, v)| [format!("--{k}"), render(v).unwrap_or_default()])
            .collect()
    }
}

/// An input value as one argument; `None` for null.
fn render(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

fn object(
    v: serde_json::Value,
    what: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    match v {
        serde_json::Value::Object(m) => Ok(m),
        other => Err(format!("{what}: expected an object by name, got {other}")),
    }
}

/// SHA-256 over each file's name and bytes, each length-prefixed, so that no two different sets of
/// files hash the same byte stream; no files, zeros (as `Default`), so that equal data compares
/// equal however it was made.
fn digest(files: &BTreeMap<String, Arc<[u8]>>) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    if files.is_empty() {
        return [0; 32];
    }
    let mut h = Sha256::new();
    for (name, bytes) in files {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    h.finalize().into()
}

/// A plain relative path that the run does not reserve for itself.
fn check_file_name(name: &str) -> Result<(), String> {
    let p = codegym_sandbox::validate_rel_path(name).map_err(|e| format!("files: {e}"))?;
    let first = p
        .components()
        .find(|c| matches!(c, std::path::Component::Normal(_)))
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    let reserved = [
        "main.py",
        crate::reward::harness::CANDIDATE_FILE,
        OUTPUTS_DIR,
    ];
    if reserved.contains(&first.as_str()) || name.len() > 255 {
        return Err(format!(
            "files: {name:?} is reserved or too long (main.py, {}, {OUTPUTS_DIR}/)",
            crate::reward::harness::CANDIDATE_FILE
        ));
    }
    Ok(())
}

/// `--name`: a letter or `_`, then letters, digits, `_` or `-`.
fn check_input_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = name.len() <= 64
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "inputs: {name:?} is not a valid argument name ([A-Za-z_][A-Za-z0-9_-]*)"
        ))
    }
}

fn load_file(name: &str, spec: FileSpec, base: Option<&Path>) -> Result<Vec<u8>, String> {
    let bytes = match (spec.text, spec.base64, spec.path) {
        (Some(t), None, None) => t.into_bytes(),
        (None, Some(b), None) => base64::engine::general_purpose::STANDARD
            .decode(b.trim())
            .map_err(|e| format!("files.{name}: invalid base64: {e}"))?,
        (None, None, Some(p)) => {
            let Some(base) = base else {
                return Err(format!(
                    "files.{name}: a path is only allowed in a task file (inline tasks carry text or base64)"
                ));
            };
            // Beneath the task file's directory, no symlinks anywhere on the way.
            let (bytes, cut) = codegym_sandbox::read_beneath(base, &p, MAX_FILE_BYTES)
                .map_err(|e| format!("files.{name}: {e}"))?;
            if cut {
                return Err(format!("files.{name}: {p} exceeds {MAX_FILE_BYTES} bytes"));
            }
            bytes
        }
        _ => {
            return Err(format!(
                "files.{name}: give exactly one of text, base64, path"
            ));
        }
    };
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("files.{name}: exceeds {MAX_FILE_BYTES} bytes"));
    }
    Ok(bytes)
}

/// Files as the inline form: `text` when UTF-8, else `base64`.
fn inline_files<S: Serializer>(
    files: &BTreeMap<String, Arc<[u8]>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(files.len()))?;
    for (name, bytes) in files {
        let v = match std::str::from_utf8(bytes) {
            Ok(t) => serde_json::json!({"text": t}),
            Err(_) => {
                serde_json::json!({"base64": base64::engine::general_purpose::STANDARD.encode(bytes)})
            }
        };
        map.serialize_entry(name, &v)?;
    }
    map.end()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(v: serde_json::Value) -> RawData {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn parses_renders_and_round_trips() {
        let d = TaskData::from_raw(
            raw(json!({
                "files": {"a.csv": {"text": "x\n1\n"}, "b.bin": {"base64": "AP8="}},
                "inputs": {"region": "west", "n": 3, "flag": true},
                "outputs": {"total": "float", "rows": "int"}
            })),
            None,
        )
        .unwrap();
        assert_eq!(&*d.files["b.bin"], &[0u8, 255]);
        assert_eq!(d.argv(), ["--flag", "true", "--n", "3", "--region", "west"]);
        let back = TaskData::from_raw(raw(serde_json::to_value(&d).unwrap()), None).unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn debug_shows_a_digest_of_the_files_not_their_bytes() {
        // `Debug` is part of every verdict's cache key: it must tell any two sets of files apart
        // (one byte, or the same bytes under another name), and stay small whatever their size.
        let with = |files: serde_json::Value| {
            let d = TaskData::from_raw(raw(json!({"files": files})), None).unwrap();
            format!("{d:?}")
        };
        let big = "x".repeat(1 << 20);
        let mut other = big.clone();
        other.replace_range(512..513, "y");
        let a = with(json!({"a.txt": {"text": big}}));
        assert!(a.len() < 1000, "{} bytes of Debug", a.len());
        assert_eq!(a, with(json!({"a.txt": {"text": big}})));
        assert_ne!(a, with(json!({"a.txt": {"text": other}})));
        assert_ne!(a, with(json!({"b.txt": {"text": big}})));
        // (A CSV or JSON file's capped prompt summary shows in it too, but only the digest tells
        // all bytes apart: these files have none.) Files replaced by an overlay (reset options,
        // `Evaluate` items) change the digest too.
        let mut d =
            TaskData::from_raw(raw(json!({"files": {"a.txt": {"text": big}}})), None).unwrap();
        d.overlay(raw(json!({"files": {"a.txt": {"text": other}}})), None)
            .unwrap();
        assert_eq!(format!("{d:?}"), with(json!({"a.txt": {"text": other}})));
        assert_ne!(
            format!("{:?}", TaskData::default()),
            with(json!({"e.txt": {"text": ""}}))
        );
        assert_eq!(
            TaskData::default(),
            TaskData::from_raw(raw(json!({"files": {}})), None).unwrap()
        );
    }

    #[test]
    fn refuses_bad_names_paths_and_sizes() {
        for bad in [
            json!({"files": {"../x": {"text": ""}}}),
            json!({"files": {"/etc/passwd": {"text": ""}}}),
            json!({"files": {"main.py": {"text": ""}}}),
            json!({"files": {"outputs/x": {"text": ""}}}),
            json!({"files": {"a": {"text": "", "base64": ""}}}),
            json!({"files": {"a": {"path": "x.csv"}}}),
            json!({"files": {"a": {"base64": "!!"}}}),
            json!({"files": ["a"]}),
            json!({"inputs": {"--x": 1}}),
            json!({"inputs": {"a b": 1}}),
            json!({"inputs": {"x": null}}),
            json!({"outputs": {"x": "complex"}}),
            json!({"outputs": {"../x": "int"}}),
        ] {
            assert!(TaskData::from_raw(raw(bad.clone()), None).is_err(), "{bad}");
        }
    }

    #[test]
    fn paths_stay_beneath_the_task_dir() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        std::fs::write(dir.path().join("data/s.csv"), "a\n1\n").unwrap();
        std::fs::write(outside.path().join("secret"), "s3cret").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("link")).unwrap();
        let ok = TaskData::from_raw(
            raw(json!({"files": {"s.csv": {"path": "data/s.csv"}}})),
            Some(dir.path()),
        )
        .unwrap();
        assert_eq!(&*ok.files["s.csv"], b"a\n1\n");
        for p in ["link", "../secret", "/etc/hostname", "data"] {
            let r = TaskData::from_raw(raw(json!({"files": {"x": {"path": p}}})), Some(dir.path()));
            assert!(r.is_err(), "{p}");
        }
    }
}
