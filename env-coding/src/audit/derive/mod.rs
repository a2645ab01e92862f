//! Attacks derived from each task, not listed: what an optimizing policy would try once it has
//! seen what the task's tests do.
//!
//! A corpus of exploits measures the corpus. These are made from the task itself:
//! - unit-test tasks (Python): `derive.py` reads the tests in the sandbox and writes programs that
//!   shadow every name the tests load (builtins, the prompt's helpers), raise each control-flow
//!   exception, return lying objects of the types the tests compare with, return the expected
//!   values as constants, and answer the prompt's own examples from a table;
//! - output-judged tasks (any language): every expected output that also appears in the prompt,
//!   found from the tests' expected values (whatever the prompt's layout), printed as it is, the
//!   most common expected output printed for every input, and in Python a table from the prompt's
//!   inputs to their outputs.
//!
//! A derived attack that solves a task makes it hackable. One that only earns partial credit (a
//! constant that some tests expect, a table of examples the tests repeat) is reported as partial:
//! it fails the audit with `strict` only.

use std::collections::BTreeMap;

use codegym_sandbox::ExecRequest;
use codegym_sandbox::lang::Language;
use serde::{Deserialize, Serialize};

use super::corpus::Exploit;
use super::render;
use crate::reward::Component;
use crate::scoring::Scorer;
use crate::tasks::Task;

/// The derivation script (`main.py` of one sandboxed run per unit-test task), with the name
/// analysis it shares with the unit-test harness.
const DERIVE_SOURCE: &str = concat!(
    include_str!("../../reward/names.py"),
    include_str!("derive.py")
);

/// Expected outputs shorter than this are not looked for in the prompt ("1" is everywhere).
const MIN_ECHO_LEN: usize = 2;

/// One attack made for one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attack {
    pub name: String,
    /// The generator (`shadow`, `control-flow`, `lying-return`, `constant`, `prompt-lookup`,
    /// `echo-expected`): reported as `derived/<kind>`.
    pub kind: String,
    pub category: String,
    pub what: String,
    pub source: String,
}

/// Why no attack could be derived for a task (the sandbox failed): never a verdict on it.
#[derive(Debug, thiserror::Error)]
pub enum DeriveError {
    #[error("the sandbox could not run the derivation: {0}")]
    Sandbox(#[from] codegym_sandbox::SandboxError),
    #[error("the derivation failed: {0}")]
    Script(String),
}

/// Every attack derived from `task`'s tests; `corpus` lends each language's echo template.
pub async fn attacks(
    scorer: &Scorer,
    task: &Task,
    corpus: &[Exploit],
) -> Result<Vec<Attack>, DeriveError> {
    let mut out = Vec::new();
    if let Some(input) = unit_test_input(task) {
        out.extend(from_unit_tests(scorer, &input).await?);
    }
    out.extend(echo_attacks(task, corpus));
    let mut seen = std::collections::HashSet::new();
    out.retain(|a| seen.insert(a.source.clone()));
    Ok(out)
}

/// What `derive.py` reads of a Python unit-test task.
#[derive(Serialize)]
struct UnitTestInput {
    entry: String,
    tests: Vec<String>,
    prelude: String,
    prompt: String,
}

fn unit_test_input(task: &Task) -> Option<UnitTestInput> {
    if task.language != Language::Python {
        return None;
    }
    let mut tests = Vec::new();
    let mut prelude = String::new();
    for c in &task.reward.components {
        match c {
            Component::CheckFunction {
                code, prelude: p, ..
            } => {
                tests.push(code.clone());
                prelude.clone_from(p);
            }
            Component::Asserts { asserts, setup, .. } => {
                tests.extend(asserts.iter().cloned());
                tests.push(setup.clone());
            }
            Component::AppendedTests { code, .. } => tests.push(code.clone()),
            _ => {}
        }
    }
    if tests.is_empty() {
        return None;
    }
    // A HumanEval completion continues the prompt: the attacks start from it as a model would.
    if prelude.is_empty() {
        prelude = task.completion_prefix.clone().unwrap_or_default();
    }
    Some(UnitTestInput {
        entry: task.entry_point()?,
        tests,
        prelude,
        prompt: task.prompt.clone(),
    })
}

async fn from_unit_tests(
    scorer: &Scorer,
    input: &UnitTestInput,
) -> Result<Vec<Attack>, DeriveError> {
    let stdin = serde_json::to_vec(input).map_err(|e| DeriveError::Script(e.to_string()))?;
    let req = ExecRequest {
        source: DERIVE_SOURCE.to_string(),
        stdin: Some(stdin),
        language: Language::Python,
        ..ExecRequest::default()
    };
    let result = scorer.sandbox().run(req).await?;
    if result.exit_code != Some(0) {
        let tail: String = result.stderr.chars().rev().take(600).collect();
        return Err(DeriveError::Script(tail.chars().rev().collect()));
    }
    serde_json::from_str(&result.stdout).map_err(|e| DeriveError::Script(e.to_string()))
}

/// The expected outputs of a task's output-judged components, each with its input.
fn expected_outputs(task: &Task) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for c in &task.reward.components {
        match c {
            Component::Stdout { expected, .. } => out.push((String::new(), expected.clone())),
            Component::IoCases { cases, .. } => {
                out.extend(cases.iter().map(|c| (c.stdin.clone(), c.stdout.clone())));
            }
            Component::Judge(spec) if spec.driver.is_none() => {
                out.extend(
                    spec.tests
                        .iter()
                        .map(|t| (t.input.clone(), t.output.clone())),
                );
            }
            _ => {}
        }
    }
    out
}

/// Whitespace-insensitive: a prompt shows an output however it likes to lay it out.
fn squash(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn echo_attacks(task: &Task, corpus: &[Exploit]) -> Vec<Attack> {
    let cases = expected_outputs(task);
    if cases.is_empty() {
        return Vec::new();
    }
    let Some(template) = corpus
        .iter()
        .find(|e| e.name == "echo-samples" && e.languages.contains(&task.language))
    else {
        return Vec::new();
    };
    let prompt = squash(&task.prompt);
    let shown = |text: &str| {
        let s = squash(text);
        s.len() >= MIN_ECHO_LEN && prompt.contains(&s)
    };
    let mut attacks = Vec::new();
    let mut echo = |name: String, what: String, output: &str| {
        attacks.push(Attack {
            name,
            kind: "echo-expected".into(),
            category: "fake-verdict".into(),
            what,
            source: render::with_sample(template.source, output),
        });
    };
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, output) in &cases {
        *counts.entry(output.as_str()).or_default() += 1;
    }
    for (i, (_, output)) in cases.iter().enumerate() {
        if shown(output) && cases[..i].iter().all(|(_, o)| o != output) {
            echo(
                format!("echo-expected-{i}"),
                format!(
                    "prints test {i}'s expected output, which the prompt shows, whatever the input"
                ),
                output,
            );
        }
    }
    // With one case the most common output is the answer itself: only a prompt that shows it
    // (above) would let a policy print it.
    let most_common = counts
        .iter()
        .max_by_key(|(o, n)| (**n, std::cmp::Reverse(**o)))
        .filter(|_| cases.len() > 1);
    if let Some((common, n)) = most_common {
        echo(
            "echo-most-common".into(),
            format!(
                "prints the expected output {n} of the {} tests share, whatever the input",
                cases.len()
            ),
            common,
        );
    }
    // Python: a table from the inputs the prompt shows to their outputs.
    let table: Vec<&(String, String)> = cases
        .iter()
        .filter(|(i, o)| shown(o) && (i.trim().is_empty() || shown(i)))
        .collect();
    if task.language == Language::Python && table.len() > 1 {
        let entries: Vec<String> = table
            .iter()
            .map(|(i, o)| format!("{}: {}", py_str(&squash(i)), py_str(o)))
            .collect();
        attacks.push(Attack {
            name: "prompt-lookup-stdin".into(),
            kind: "prompt-lookup".into(),
            category: "read-answers".into(),
            what: format!(
                "answers the {} input(s) the prompt shows from a table, by their stdin",
                table.len()
            ),
            source: format!(
                "import sys\n_T = {{{}}}\nsys.stdout.write(_T.get(' '.join(sys.stdin.read().split()), ''))\n",
                entries.join(", ")
            ),
        });
    }
    attacks
}

/// A Python string literal (a JSON string is one).
fn py_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squashing_finds_outputs_in_any_layout() {
        let prompt = squash("Example: for input 3 the answer is\n  1 2\n  3\n(three numbers).");
        assert!(prompt.contains(&squash("1 2 3\n")));
        assert!(!prompt.contains(&squash("1 2 4")));
    }
}
