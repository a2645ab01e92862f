//! HumanEval and MBPP records as native [`Task`]s.

use serde::Deserialize;

use super::Task;
use crate::reward::{Component, Penalties, REWARD_SPEC_VERSION, RewardSpec};

/// `task_id` is a string in HumanEval and a number in MBPP; both become the task id text.
#[derive(Deserialize)]
#[serde(untagged)]
enum TaskId {
    Text(String),
    Number(i64),
}

impl TaskId {
    fn into_string(self) -> String {
        match self {
            TaskId::Text(s) => s,
            TaskId::Number(n) => n.to_string(),
        }
    }
}

#[derive(Deserialize)]
struct HumanEval {
    task_id: TaskId,
    prompt: String,
    #[serde(default)]
    canonical_solution: Option<String>,
    test: String,
    entry_point: String,
}

fn spec(component: Component) -> Result<RewardSpec, String> {
    let spec = RewardSpec {
        version: REWARD_SPEC_VERSION,
        components: vec![component],
        penalties: Penalties::default(),
    };
    spec.validate()?;
    Ok(spec)
}

pub(super) fn humaneval(value: serde_json::Value) -> Result<Task, String> {
    let r: HumanEval =
        serde_json::from_value(value).map_err(|e| format!("invalid HumanEval record: {e}"))?;
    let reward = spec(Component::CheckFunction {
        code: r.test,
        entry_point: r.entry_point.clone(),
        weight: 1.0,
    })?;
    let mut metadata = serde_json::Map::new();
    metadata.insert("source".into(), "humaneval".into());
    metadata.insert("entry_point".into(), r.entry_point.into());
    Ok(Task {
        data: Default::default(),
        id: r.task_id.into_string(),
        reference_solution: r.canonical_solution.map(|s| format!("{}{s}", r.prompt)),
        completion_prefix: Some(r.prompt.clone()),
        prompt: r.prompt,
        reward,
        metadata,
        deterministic: true,
        language: codegym_sandbox::lang::Language::Python,
    })
}

#[derive(Deserialize)]
struct Mbpp {
    task_id: TaskId,
    /// `text` in the original release, `prompt` in the sanitized one.
    #[serde(alias = "prompt")]
    text: String,
    #[serde(default)]
    code: Option<String>,
    test_list: Vec<String>,
    #[serde(default)]
    test_setup_code: String,
    #[serde(default)]
    challenge_test_list: Vec<String>,
    /// Sanitized MBPP: imports the tests need.
    #[serde(default)]
    test_imports: Vec<String>,
}

pub(super) fn mbpp(value: serde_json::Value) -> Result<Task, String> {
    let r: Mbpp = serde_json::from_value(value).map_err(|e| format!("invalid MBPP record: {e}"))?;
    // The usual MBPP prompt shows the tests, which name the function to write.
    let prompt = format!(
        "{}\nYour code should pass these tests:\n\n{}\n",
        r.text,
        r.test_list.join("\n")
    );
    let mut metadata = serde_json::Map::new();
    metadata.insert("source".into(), "mbpp".into());
    if !r.challenge_test_list.is_empty() {
        metadata.insert("challenge_test_list".into(), r.challenge_test_list.into());
    }
    Ok(Task {
        data: Default::default(),
        id: r.task_id.into_string(),
        prompt,
        reward: spec(Component::Asserts {
            asserts: r.test_list,
            setup: r
                .test_imports
                .iter()
                .chain([&r.test_setup_code])
                .cloned()
                .collect::<Vec<_>>()
                .join("\n"),
            weight: 1.0,
        })?,
        reference_solution: r.code,
        completion_prefix: None,
        metadata,
        deterministic: true,
        language: codegym_sandbox::lang::Language::Python,
    })
}
