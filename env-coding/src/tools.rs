//! Tool-call actions (`Value::Json`) of the rollout engine's tools mode. The file tools reach a
//! session's work dir only through the sandbox's safe access (`codegym_sandbox::read_beneath`).

use serde::Deserialize;

/// An env action naming its tool (`{"tool": "run_python", ...}`): how the env receives a tool call
/// of the model. Distinct from the chat message's call (`trajectory::record::ChatToolCall`) and from
/// a program's call of a host tool (`host_tool_calls::HostToolCall`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "tool", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToolAction {
    RunPython {
        code: String,
        /// Issue 12: global names set before the code runs (session mode: in the live namespace).
        #[serde(default)]
        vars: Option<serde_json::Map<String, serde_json::Value>>,
        /// Issue 12: report the top-level variables (default: the env's `variables` kwarg).
        #[serde(default)]
        variables: Option<bool>,
    },
    /// Issue 14: a program in any supported language (SandboxFusion's names).
    RunCode {
        code: String,
        language: codegym_sandbox::lang::Language,
    },
    WriteFile {
        path: String,
        content: String,
    },
    ReadFile {
        path: String,
    },
}

impl ToolAction {
    pub fn parse(value: serde_json::Value) -> Result<ToolAction, String> {
        serde_json::from_value(value).map_err(|e| format!("bad tool call: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_tool_calls() {
        assert_eq!(
            ToolAction::parse(json!({"tool": "run_python", "code": "print(1)"})),
            Ok(ToolAction::RunPython {
                code: "print(1)".into(),
                vars: None,
                variables: None,
            })
        );
        let with = ToolAction::parse(
            json!({"tool": "run_python", "code": "x", "vars": {"x": 1}, "variables": true}),
        );
        assert!(matches!(
            with,
            Ok(ToolAction::RunPython {
                vars: Some(_),
                variables: Some(true),
                ..
            })
        ));
        assert!(
            ToolAction::parse(json!({"tool": "run_python", "code": "x", "vars": [1]})).is_err()
        );
        assert!(ToolAction::parse(json!({"tool": "rm_rf"})).is_err());
        assert!(ToolAction::parse(json!({"tool": "read_file"})).is_err());
        assert!(ToolAction::parse(json!({"tool": "read_file", "path": "a", "x": 1})).is_err());
    }
}
