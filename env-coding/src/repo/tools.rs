//! The repository env's tools, the ones SWE-agent-style agents use: `bash` (a command in the
//! episode's copy; its changes persist), `view` (a file with line numbers, or a directory
//! listing), `create` (a file with the given content), `str_replace` (one occurrence of a string,
//! which must be unique) and `submit` (the episode's diff is its answer). Each call is a JSON
//! object with `tool` and its fields (or text that is one). Every tool but `submit` is one
//! sandboxed run in the episode's copy; what a file tool writes goes in as a file beside the
//! repository, never through the command line.

use env_core::contract::REPO_TOOLS;
use env_core::{EnvError, Value};
use serde::Deserialize;

/// A decoded tool call.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "tool", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToolCall {
    Bash {
        command: String,
    },
    View {
        path: String,
        #[serde(default)]
        start: Option<u64>,
        #[serde(default)]
        end: Option<u64>,
    },
    Create {
        path: String,
        content: String,
    },
    StrReplace {
        path: String,
        old: String,
        new: String,
    },
    Submit {},
}

/// The tools as the reset's info lists them: each tool of the contract's table
/// (`env_core::contract::REPO_TOOLS`) with what its fields mean.
pub fn described() -> serde_json::Value {
    let meaning = |field: &str| match field {
        "command" => "a shell command, run in the repository",
        "path" => "a file or directory of the repository",
        "start" => "first line (optional)",
        "end" => "last line (optional)",
        "content" => "the file's whole content",
        "old" => "a string found exactly once",
        "new" => "its replacement",
        _ => "",
    };
    REPO_TOOLS
        .iter()
        .map(|t| {
            let fields: serde_json::Map<String, serde_json::Value> = t
                .required
                .iter()
                .chain(t.optional)
                .map(|f| (f.to_string(), meaning(f).into()))
                .collect();
            serde_json::json!({"tool": t.name, "fields": fields})
        })
        .collect()
}

/// Decodes an action: a JSON value, or text holding one.
pub fn decode(action: Value) -> Result<ToolCall, EnvError> {
    let json = match action {
        Value::Json(v) => v,
        Value::Text(t) => serde_json::from_str(t.trim())
            .map_err(|e| EnvError::InvalidAction(format!("a tool call is a JSON object: {e}")))?,
        other => {
            return Err(EnvError::InvalidAction(format!(
                "a tool call is JSON or text, not {}",
                other.kind()
            )));
        }
    };
    serde_json::from_value(json).map_err(|e| EnvError::InvalidAction(format!("tool call: {e}")))
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Files written beside the repository for one run: (relative path, bytes).
pub type Files = Vec<(String, Vec<u8>)>;

/// The shell command and the files (beside the repository) a tool runs as (`None`: `submit`).
pub fn command(call: &ToolCall) -> Option<(String, Files)> {
    Some(match call {
        ToolCall::Bash { command } => (command.clone(), Vec::new()),
        ToolCall::View { path, start, end } => {
            let (s, e) = (start.unwrap_or(1).max(1), end.unwrap_or(u64::MAX));
            let p = quote(path);
            (
                format!(
                    "if [ -d {p} ]; then ls -la -- {p}; else \
                     awk -v s={s} -v e={e} 'NR>=s && NR<=e {{printf \"%6d\\t%s\\n\", NR, $0}}' < {p}; fi"
                ),
                Vec::new(),
            )
        }
        ToolCall::Create { path, content } => {
            let p = quote(path);
            (
                format!(
                    "mkdir -p -- \"$(dirname -- {p})\" && cat -- \"$HOME/tool/content\" > {p} && \
                     printf 'created %s\\n' {p}"
                ),
                vec![("tool/content".into(), content.as_bytes().to_vec())],
            )
        }
        ToolCall::StrReplace { path, old, new } => (
            format!("python3 -I \"$HOME/tool/replace.py\" {}", quote(path)),
            vec![
                ("tool/replace.py".into(), REPLACE_PY.as_bytes().to_vec()),
                ("tool/old".into(), old.as_bytes().to_vec()),
                ("tool/new".into(), new.as_bytes().to_vec()),
            ],
        ),
        ToolCall::Submit {} => return None,
    })
}

/// `str_replace` in the sandbox: exactly one occurrence, else nothing changes and it says why.
const REPLACE_PY: &str = r#"import os, sys
home = os.environ["HOME"]
old = open(os.path.join(home, "tool/old"), encoding="utf-8").read()
new = open(os.path.join(home, "tool/new"), encoding="utf-8").read()
path = sys.argv[1]
text = open(path, encoding="utf-8").read()
n = text.count(old) if old else 0
if n != 1:
    print(f"no change: the string occurs {n} times in {path} (it must occur exactly once)")
    sys.exit(1)
open(path, "w", encoding="utf-8").write(text.replace(old, new, 1))
print(f"replaced one occurrence in {path}")
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_decode_from_json_and_text() {
        let call =
            decode(Value::Text(r#"{"tool": "bash", "command": "ls"}"#.into())).expect("text");
        assert_eq!(
            call,
            ToolCall::Bash {
                command: "ls".into()
            }
        );
        let call = decode(Value::Json(serde_json::json!({"tool": "submit"}))).expect("json");
        assert_eq!(call, ToolCall::Submit {});
        for bad in [
            r#"{"tool": "run_python", "code": "1"}"#,
            r#"{"tool": "rm"}"#,
            r#"{"tool": "bash"}"#,
            r#"{"tool": "bash", "command": "ls", "extra": 1}"#,
            "ls -la",
        ] {
            assert!(decode(Value::Text(bad.into())).is_err(), "{bad}");
        }
    }

    /// The serde shape of [`ToolCall`] is the contract's table: every tool decodes with its
    /// required fields (and its optional ones), and not without one of them.
    #[test]
    fn the_decoder_is_the_contracts_table() {
        let value = |field: &str| match field {
            "start" | "end" => serde_json::json!(1),
            _ => serde_json::json!("x"),
        };
        for t in REPO_TOOLS {
            let mut call = serde_json::json!({"tool": t.name});
            for f in t.required.iter().chain(t.optional) {
                call[*f] = value(f);
            }
            decode(Value::Json(call.clone())).unwrap_or_else(|e| panic!("{call}: {e}"));
            for f in t.required {
                let mut short = call.clone();
                short.as_object_mut().expect("object").remove(*f);
                assert!(
                    decode(Value::Json(short)).is_err(),
                    "{} without {f}",
                    t.name
                );
            }
            for f in t.optional {
                let mut short = call.clone();
                short.as_object_mut().expect("object").remove(*f);
                decode(Value::Json(short))
                    .unwrap_or_else(|e| panic!("{} without {f}: {e}", t.name));
            }
        }
        let listed: Vec<String> = described()
            .as_array()
            .expect("array")
            .iter()
            .map(|t| t["tool"].as_str().expect("name").to_string())
            .collect();
        assert_eq!(listed, ["bash", "view", "create", "str_replace", "submit"]);
    }
}
