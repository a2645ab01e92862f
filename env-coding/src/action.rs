//! The coding env's actions: what a step's action asks for ([`Action`]), decoded once from model
//! text (a fenced block in the episode's language) or a JSON tool call (a JSON value, or text that
//! is one).

use env_core::{EnvError, ExecutionResult, Result, Value};

use crate::tools::ToolAction;
use code_extract::{ExtractMode, extract_tagged};
use codegym_sandbox::ReportSpec;
use codegym_sandbox::lang::Language;

/// A program an action runs, with what it injects and reports (issue 12).
pub(crate) struct Run {
    pub code: String,
    /// Global names set before the code runs (checked).
    pub vars: serde_json::Map<String, serde_json::Value>,
    /// Report variables (`None`: the env's `variables` kwarg).
    pub variables: Option<bool>,
    /// Issue 14: the program's language (the episode's, or a `run_code` call's).
    pub language: Language,
}

impl Run {
    fn plain(code: String, language: Language) -> Run {
        Run {
            code,
            vars: serde_json::Map::new(),
            variables: None,
            language,
        }
    }
}

/// What an action asks for.
pub(crate) enum Action {
    /// A program; issue 14: in the episode's language unless a `run_code` call names one.
    Code(Run),
    /// `extract: fenced` and no fenced block: nothing runs.
    NoCode,
    WriteFile {
        path: String,
        content: String,
    },
    ReadFile {
        path: String,
    },
}

/// Decodes an action; text is searched for a fenced block of `language` (the episode's).
pub(crate) fn decode_action(
    action: Value,
    mode: ExtractMode,
    language: Language,
) -> Result<Action> {
    let action = match action {
        Value::Text(t) => match text_tool_call(&t) {
            Some(call) => Value::Json(call),
            None => Value::Text(t),
        },
        other => other,
    };
    match action {
        Value::Text(t) => Ok(match extract_tagged(&t, mode, language.fence_tags()) {
            Some(code) => Action::Code(Run::plain(code.to_string(), language)),
            None => Action::NoCode,
        }),
        Value::Json(v) => match ToolAction::parse(v).map_err(EnvError::InvalidAction)? {
            ToolAction::RunPython {
                code,
                vars,
                variables,
            } => {
                let vars = vars.unwrap_or_default();
                ReportSpec::check_vars(&vars).map_err(EnvError::InvalidAction)?;
                Ok(Action::Code(Run {
                    code,
                    vars,
                    variables,
                    language: Language::Python,
                }))
            }
            ToolAction::RunCode { code, language } => Ok(Action::Code(Run::plain(code, language))),
            ToolAction::WriteFile { path, content } => Ok(Action::WriteFile { path, content }),
            ToolAction::ReadFile { path } => Ok(Action::ReadFile { path }),
        },
        other => Err(EnvError::InvalidAction(format!(
            "expected text (source or model output) or a JSON tool call, got {}",
            other.kind()
        ))),
    }
}

/// A text action that is a JSON tool call (an object with a string `tool`): clients that send the
/// call's JSON as text mean the call. Run as source it would be a Python dict literal that does
/// nothing, scoring 0 without a word.
fn text_tool_call(text: &str) -> Option<serde_json::Value> {
    let text = text.trim();
    if !text.starts_with('{') {
        return None;
    }
    serde_json::from_str(text)
        .ok()
        .filter(env_core::contract::is_tool_call)
}

/// The observation when `extract: fenced` finds no code block.
pub(crate) fn no_code_result(language: Language) -> ExecutionResult {
    ExecutionResult {
        stderr: format!(
            "codegym: no ```{language} code block found in the response; nothing was run\n"
        ),
        ..ExecutionResult::default()
    }
}
