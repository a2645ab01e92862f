//! The repository env's tool calls as types: the one decoder of a call (`{"tool": name, ...}`),
//! used by the env (`codegym/Repo-v0`, which runs the call) and by the rollout engine (which turns
//! a model's function call into the env's action and records it), and what each field of the
//! contract's [`REPO_TOOLS`](super::REPO_TOOLS) table means, from which the env's reset lists its
//! tools and the engine describes them to the model. Here, below both, so that neither holds a
//! second copy of the schemas.

use serde::Deserialize;
use serde_json::Value;

use super::{REPO_TOOLS, ToolShape, field, tool};

/// The repository env's id.
pub const REPO_ENV_ID: &str = "codegym/Repo-v0";

/// A decoded repository tool call.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "tool", rename_all = "snake_case", deny_unknown_fields)]
pub enum RepoToolCall {
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

impl RepoToolCall {
    /// Decodes a call: a JSON object naming its tool under [`tool::KEY`] with that tool's fields,
    /// each of its required ones and no field the tool does not have. The error says why not.
    pub fn decode(call: Value) -> Result<RepoToolCall, String> {
        serde_json::from_value(call).map_err(|e| e.to_string())
    }
}

/// What a field of a repository tool means, for the model.
pub fn field_meaning(name: &str) -> &'static str {
    match name {
        field::COMMAND => "a shell command, run in the repository",
        field::PATH => "a file or directory of the repository",
        field::START => "first line (optional)",
        field::END => "last line (optional)",
        field::CONTENT => "the file's whole content",
        field::OLD => "a string found exactly once",
        field::NEW => "its replacement",
        _ => "",
    }
}

/// The JSON Schema type of a field of a repository tool.
pub fn field_type(name: &str) -> &'static str {
    match name {
        field::START | field::END => "integer",
        _ => "string",
    }
}

/// What a repository tool does, for the model.
pub fn tool_meaning(name: &str) -> &'static str {
    match name {
        tool::BASH => {
            "Run a shell command in the repository (its changes persist); returns its output and \
             exit code."
        }
        tool::VIEW => {
            "Show a file with line numbers (optionally lines start..end), or list a directory."
        }
        tool::CREATE => "Write a file with the given content (created or replaced).",
        tool::STR_REPLACE => {
            "Replace a string that occurs exactly once in a file; otherwise nothing changes."
        }
        tool::SUBMIT => {
            "Submit: the repository's changes are your answer, scored with hidden tests. Ends the \
             episode."
        }
        _ => "",
    }
}

/// Each tool of the table with its fields (required first).
pub fn shapes() -> impl Iterator<Item = (&'static ToolShape, Vec<&'static str>)> {
    REPO_TOOLS.iter().map(|t| {
        let fields = t.required.iter().chain(t.optional).copied().collect();
        (t, fields)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn calls_decode_with_their_fields_and_not_without() {
        assert_eq!(
            RepoToolCall::decode(json!({"tool": "bash", "command": "ls"})),
            Ok(RepoToolCall::Bash {
                command: "ls".into()
            })
        );
        assert_eq!(
            RepoToolCall::decode(json!({"tool": "submit"})),
            Ok(RepoToolCall::Submit {})
        );
        for bad in [
            json!({"tool": "run_python", "code": "1"}),
            json!({"tool": "rm"}),
            json!({"tool": "bash"}),
            json!({"tool": "bash", "command": "ls", "extra": 1}),
            json!({"tool": "view", "path": "a", "start": "1"}),
            json!("ls -la"),
        ] {
            assert!(RepoToolCall::decode(bad.clone()).is_err(), "{bad}");
        }
    }

    /// The serde shape of [`RepoToolCall`] is the contract's table: every tool decodes with its
    /// required fields (and its optional ones, of their types), and not without one of them; every
    /// field is described.
    #[test]
    fn the_decoder_is_the_contracts_table() {
        let value = |f: &str| match field_type(f) {
            "integer" => json!(1),
            _ => json!("x"),
        };
        for (t, fields) in shapes() {
            assert!(!tool_meaning(t.name).is_empty(), "{}", t.name);
            let mut call = json!({"tool": t.name});
            for f in &fields {
                assert!(!field_meaning(f).is_empty(), "{f}");
                call[*f] = value(f);
            }
            RepoToolCall::decode(call.clone()).unwrap_or_else(|e| panic!("{call}: {e}"));
            for f in t.required {
                let mut short = call.clone();
                short.as_object_mut().expect("object").remove(*f);
                assert!(
                    RepoToolCall::decode(short).is_err(),
                    "{} without {f}",
                    t.name
                );
            }
            for f in t.optional {
                let mut short = call.clone();
                short.as_object_mut().expect("object").remove(*f);
                RepoToolCall::decode(short)
                    .unwrap_or_else(|e| panic!("{} without {f}: {e}", t.name));
            }
        }
    }
}
