//! Tool-call actions (`Value::Json`) of the rollout engine's tools mode. The file tools reach a
//! session's work dir only through the sandbox's safe access (`codegym_sandbox::read_beneath`).

use serde::Deserialize;

/// A tool call.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "tool", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToolCall {
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

impl ToolCall {
    pub fn parse(value: serde_json::Value) -> Result<ToolCall, String> {
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
            ToolCall::parse(json!({"tool": "run_python", "code": "print(1)"})),
            Ok(ToolCall::RunPython {
                code: "print(1)".into(),
                vars: None,
                variables: None,
            })
        );
        let with = ToolCall::parse(
            json!({"tool": "run_python", "code": "x", "vars": {"x": 1}, "variables": true}),
        );
        assert!(matches!(
            with,
            Ok(ToolCall::RunPython {
                vars: Some(_),
                variables: Some(true),
                ..
            })
        ));
        assert!(ToolCall::parse(json!({"tool": "run_python", "code": "x", "vars": [1]})).is_err());
        assert!(ToolCall::parse(json!({"tool": "rm_rf"})).is_err());
        assert!(ToolCall::parse(json!({"tool": "read_file"})).is_err());
        assert!(ToolCall::parse(json!({"tool": "read_file", "path": "a", "x": 1})).is_err());
    }
}
