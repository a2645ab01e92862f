//! The repository env's tools, the ones SWE-agent-style agents use: `bash` (a command in the
//! episode's copy; its changes persist), `view` (a file with line numbers, or a directory
//! listing), `create` (a file with the given content), `str_replace` (one occurrence of a string,
//! which must be unique) and `submit` (the episode's diff is its answer). Each call is a JSON
//! object with `tool` and its fields (or text that is one). Every tool but `submit` is one
//! sandboxed run in the episode's copy; what a file tool writes goes in as a file beside the
//! repository, never through the command line.

use env_core::contract::repo::{self, shapes};
use env_core::{EnvError, Value};

/// A decoded tool call: the contract's type (`env_core::contract::repo`), whose decoder the
/// rollout engine shares.
pub use env_core::contract::repo::RepoToolCall as ToolCall;

/// The tools as the reset's info lists them: each tool of the contract's table
/// (`env_core::contract::REPO_TOOLS`) with what its fields mean.
pub fn described() -> serde_json::Value {
    shapes()
        .map(|(t, fields)| {
            let fields: serde_json::Map<String, serde_json::Value> = fields
                .iter()
                .map(|f| (f.to_string(), repo::field_meaning(f).into()))
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
    ToolCall::decode(json).map_err(|e| EnvError::InvalidAction(format!("tool call: {e}")))
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

    /// The reset's info lists the contract's tools, in its order.
    #[test]
    fn the_listed_tools_are_the_contracts() {
        let listed: Vec<String> = described()
            .as_array()
            .expect("array")
            .iter()
            .map(|t| t["tool"].as_str().expect("name").to_string())
            .collect();
        assert_eq!(listed, ["bash", "view", "create", "str_replace", "submit"]);
    }
}
