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
    // The prompt's helpers (HumanEval/32's `poly`, /38's `encode_cyclic`) are the task's: the
    // tests call the prompt's own copies, never the program's.
    let reward = spec(Component::CheckFunction {
        code: r.test,
        entry_point: r.entry_point.clone(),
        prelude: r.prompt.clone(),
        candidate_names: None,
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
    // The prompt shows the first test, which names the function to write and its signature. Not
    // all of them, as MBPP's paper did: a table of the shown cases would then earn the whole
    // reward (the audit's `prompt-lookup` attack).
    let prompt = format!(
        "{}\nYour code should pass this test:\n\n{}\n",
        r.text,
        r.test_list.first().map_or("", String::as_str)
    );
    let candidate_names = r
        .code
        .as_deref()
        .and_then(|c| defined_and_used(c, &r.test_list));
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
            candidate_names,
            weight: 1.0,
        })?,
        reference_solution: r.code,
        completion_prefix: None,
        metadata,
        deterministic: true,
        language: codegym_sandbox::lang::Language::Python,
    })
}

/// The names a reference solution defines at its top level (`def f(`, `class C`) that the tests
/// use: what the tests may see of a program (a function named like a builtin included). `None`
/// when it defines none of them (the harness then derives the names from the tests).
fn defined_and_used(reference: &str, tests: &[String]) -> Option<Vec<String>> {
    let used: std::collections::HashSet<&str> = tests
        .iter()
        .flat_map(|t| t.split(|c: char| !(c == '_' || c.is_alphanumeric())))
        .collect();
    let mut names: Vec<String> = reference
        .lines()
        .filter_map(|l| {
            let rest = l
                .strip_prefix("def ")
                .or_else(|| l.strip_prefix("class "))?;
            let end = rest
                .find(|c: char| !(c == '_' || c.is_alphanumeric()))
                .unwrap_or(rest.len());
            Some(&rest[..end])
        })
        .filter(|n| !n.is_empty() && used.contains(n))
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    (!names.is_empty()).then_some(names)
}

#[cfg(test)]
mod tests {
    use super::defined_and_used;

    #[test]
    fn a_reference_declares_the_names_the_tests_use() {
        let reference = "import math\nclass Pair:\n    pass\ndef helper(x):\n    return x\ndef max(xs):\n    def inner(): pass\n    return helper(xs)\n";
        let tests = ["assert max([Pair()]) == 1".to_string()];
        assert_eq!(
            defined_and_used(reference, &tests),
            Some(vec!["Pair".into(), "max".into()])
        );
        assert_eq!(defined_and_used("x = 1\n", &tests), None);
    }
}
