//! The native task format (see the parent module for the layout).

use std::path::Path;

use serde::Deserialize;

use super::Task;
use crate::data::{RawData, TaskData};
use crate::reward::RewardSpec;

/// The native task-file format this crate reads.
pub const NATIVE_SCHEMA_VERSION: u32 = 1;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    schema_version: u32,
    #[serde(default)]
    #[allow(dead_code)] // documented, informational fields
    name: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    #[serde(default)]
    schema_version: Option<u32>,
    id: String,
    prompt: String,
    reward: serde_json::Value,
    #[serde(default)]
    reference_solution: Option<String>,
    #[serde(default)]
    completion_prefix: Option<String>,
    #[serde(default)]
    metadata: serde_json::Map<String, serde_json::Value>,
    /// Issue 14: the solution language (SandboxFusion's names; default python).
    #[serde(default)]
    language: codegym_sandbox::lang::Language,
    // Data tasks (issue 13): input files, CLI inputs, typed outputs (see `crate::data`).
    #[serde(default)]
    files: Option<serde_json::Value>,
    #[serde(default)]
    inputs: Option<serde_json::Value>,
    #[serde(default)]
    outputs: Option<serde_json::Value>,
    #[serde(default)]
    requirements: Option<serde_json::Value>,
    /// `false` opts the task out of verdict sharing (see `verdicts.rs`).
    #[serde(default = "yes")]
    deterministic: bool,
}

fn yes() -> bool {
    true
}

fn check_version(v: u32) -> Result<(), String> {
    if v == NATIVE_SCHEMA_VERSION {
        Ok(())
    } else {
        Err(format!(
            "unsupported schema_version {v} (this build reads {NATIVE_SCHEMA_VERSION})"
        ))
    }
}

/// One task; `header_version` is the file header's version, if the file has one; `base` the task
/// file's directory (file paths of data tasks are relative to it; `None` for inline tasks).
pub(super) fn parse_task(
    value: serde_json::Value,
    header_version: Option<u32>,
    base: Option<&Path>,
) -> Result<Task, String> {
    let line: Line = serde_json::from_value(value).map_err(|e| format!("invalid task: {e}"))?;
    match line.schema_version.or(header_version) {
        Some(v) => check_version(v)?,
        None => {
            return Err("missing schema_version (on the line or in a header line)".into());
        }
    }
    if line.id.trim().is_empty() {
        return Err("empty task id".into());
    }
    let reward = RewardSpec::from_json(line.reward)
        .map_err(|e| format!("task {:?}: reward: {e}", line.id))?;
    let raw = RawData {
        files: line.files,
        inputs: line.inputs,
        outputs: line.outputs,
        requirements: line.requirements,
    };
    let data = TaskData::from_raw(raw, base).map_err(|e| format!("task {:?}: {e}", line.id))?;
    Ok(Task {
        data,
        id: line.id,
        prompt: line.prompt,
        reward,
        reference_solution: line.reference_solution,
        completion_prefix: line.completion_prefix,
        metadata: line.metadata,
        deterministic: line.deterministic,
        language: line.language,
    })
}

pub(super) fn parse_records(
    records: Vec<(usize, serde_json::Value)>,
    base: Option<&Path>,
) -> Result<Vec<(usize, Task)>, (usize, String)> {
    let mut iter = records.into_iter().peekable();
    let mut header_version = None;
    if let Some((line, first)) = iter.peek()
        && first.get("id").is_none()
        && first.get("schema_version").is_some()
    {
        let header: Header = serde_json::from_value(first.clone())
            .map_err(|e| (*line, format!("invalid header: {e}")))?;
        check_version(header.schema_version).map_err(|e| (*line, e))?;
        header_version = Some(header.schema_version);
        iter.next();
    }
    iter.map(|(line, v)| {
        parse_task(v, header_version, base)
            .map(|t| (line, t))
            .map_err(|e| (line, e))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reward() -> serde_json::Value {
        json!({"version": 1, "components": [{"type": "exit_code"}]})
    }

    #[test]
    fn header_or_per_line_versions() {
        let with_header = vec![
            (1, json!({"schema_version": 1, "name": "x"})),
            (2, json!({"id": "a", "prompt": "p", "reward": reward()})),
        ];
        assert_eq!(parse_records(with_header, None).unwrap()[0].0, 2);
        let per_line = vec![(
            1,
            json!({"schema_version": 1, "id": "a", "prompt": "p", "reward": reward()}),
        )];
        assert_eq!(parse_records(per_line, None).unwrap()[0].1.id, "a");
    }

    #[test]
    fn version_errors() {
        let missing = vec![(3, json!({"id": "a", "prompt": "p", "reward": reward()}))];
        assert_eq!(parse_records(missing, None).unwrap_err().0, 3);
        let future = vec![(1, json!({"schema_version": 2}))];
        assert!(
            parse_records(future, None)
                .unwrap_err()
                .1
                .contains("unsupported schema_version 2")
        );
        let unknown = vec![(
            1,
            json!({"schema_version": 1, "id": "a", "prompt": "p", "reward": reward(), "x": 1}),
        )];
        assert!(
            parse_records(unknown, None)
                .unwrap_err()
                .1
                .contains("unknown field")
        );
        let bad_reward = json!({"schema_version": 1, "id": "a", "prompt": "p", "reward": {"version": 1, "components": []}});
        assert!(
            parse_task(bad_reward, None, None)
                .unwrap_err()
                .contains("reward")
        );
    }
}
