//! MultiPL-E records (HumanEval and MBPP translated to other languages) as tasks (issue 14).
//!
//! A record: `name`, `language` (MultiPL-E's short name: `cpp`, `js`, `rs`, ...), `prompt`,
//! `tests`, `stop_tokens` (`doctests`, `original`, `prompt_terminology` are accepted and unused).
//! The program is `prompt + completion` (the completion prefix), then the tests appended, run in
//! the task's language: it passes when it exits 0 within its limits, as MultiPL-E's evaluators
//! decide (Perl's also fails a run that prints `ERROR`). There is no reference solution.
//!
//! Languages map to codegym's; one MultiPL-E runs with `go test` (Go), which codegym's Go
//! toolchain does not, and the rest have no toolchain here: both are load-time errors naming the
//! language. A known language whose toolchain this machine lacks loads, and its runs fail with
//! `LanguageUnavailable` (FAILED_PRECONDITION).

use serde::Deserialize;

use super::Task;
use crate::reward::{Component, Penalties, REWARD_SPEC_VERSION, RewardSpec};
use codegym_sandbox::lang::Language;

#[derive(Deserialize)]
struct Record {
    name: String,
    language: String,
    prompt: String,
    tests: String,
    #[serde(default)]
    stop_tokens: Vec<String>,
}

/// codegym's language for a MultiPL-E language name.
pub fn language(name: &str) -> Result<Language, String> {
    Ok(match name {
        "cpp" => Language::Cpp,
        "java" => Language::Java,
        "js" | "javascript" => Language::NodeJs,
        "ts" | "typescript" => Language::TypeScript,
        "rs" | "rust" => Language::Rust,
        "sh" | "bash" => Language::Bash,
        "rb" | "ruby" => Language::Ruby,
        "php" => Language::Php,
        "lua" => Language::Lua,
        "pl" | "perl" => Language::Perl,
        "py" | "python" => Language::Python,
        "go" | "go_test.go" => {
            return Err(
                "MultiPL-E's Go tests run under `go test`, which codegym's Go toolchain does not run"
                    .into(),
            );
        }
        other => {
            return Err(format!(
                "MultiPL-E language {other:?} is not supported (supported: cpp, java, js, ts, rs, sh, rb, php, lua, pl, py)"
            ));
        }
    })
}

pub(super) fn multipl_e(value: serde_json::Value) -> Result<Task, String> {
    let r: Record =
        serde_json::from_value(value).map_err(|e| format!("invalid MultiPL-E record: {e}"))?;
    let lang = language(&r.language).map_err(|e| format!("{}: {e}", r.name))?;
    let reward = RewardSpec {
        version: REWARD_SPEC_VERSION,
        components: vec![Component::AppendedTests {
            code: r.tests,
            fail_marker: (lang == Language::Perl).then(|| "ERROR".to_string()),
            in_process: false,
            weight: 1.0,
        }],
        penalties: Penalties::default(),
    };
    reward
        .validate()
        .map_err(|e| format!("task {:?}: {e}", r.name))?;
    let mut metadata = serde_json::Map::new();
    metadata.insert("source".into(), "multipl_e".into());
    metadata.insert("multipl_e_language".into(), r.language.into());
    metadata.insert("stop_tokens".into(), r.stop_tokens.into());
    Ok(Task {
        id: r.name,
        completion_prefix: Some(r.prompt.clone()),
        prompt: r.prompt,
        reward,
        reference_solution: None,
        metadata,
        deterministic: true,
        data: Default::default(),
        language: lang,
    })
}
