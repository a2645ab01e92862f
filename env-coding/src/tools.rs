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
        /// Global names set before the code runs (session mode: in the live namespace).
        #[serde(default)]
        vars: Option<serde_json::Map<String, serde_json::Value>>,
        /// Report the top-level variables (default: the env's `variables` kwarg).
        #[serde(default)]
        variables: Option<bool>,
    },
    /// A program in any supported language (SandboxFusion's names).
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
    use env_core::contract::{TOOLS, tool};
    use serde_json::json;

    /// The serde names of [`ToolAction`] are the contract's: each tool with its required fields
    /// parses, without one of them it does not, and optional fields are accepted.
    #[test]
    fn tool_calls_are_the_contracts() {
        let sample = |field: &str| match field {
            "vars" => json!({"x": 1}),
            "variables" => json!(true),
            "language" => json!("python"),
            _ => json!("x"),
        };
        for shape in TOOLS {
            let mut call = serde_json::Map::new();
            call.insert(tool::KEY.into(), json!(shape.name));
            for f in shape.required {
                call.insert((*f).into(), sample(f));
            }
            let full: serde_json::Map<_, _> = shape
                .optional
                .iter()
                .map(|f| ((*f).to_string(), sample(f)))
                .chain(call.clone())
                .collect();
            assert!(ToolAction::parse(json!(full)).is_ok(), "{}", shape.name);
            assert!(
                ToolAction::parse(json!(call.clone())).is_ok(),
                "{}",
                shape.name
            );
            for f in shape.required {
                let mut missing = call.clone();
                missing.remove(*f);
                assert!(
                    ToolAction::parse(json!(missing)).is_err(),
                    "{} {f}",
                    shape.name
                );
            }
        }
    }

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
