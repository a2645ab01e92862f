//! Property-based fuzzing of the repository env's tool calls (`repo::tools::decode`, what every
//! `codegym/Repo-v0` step goes through before anything runs), against the tools' shapes as the
//! contract defines them once (`env_core::contract::REPO_TOOLS`, the table clients check calls
//! against too).
//!
//! Properties:
//! - a call is accepted exactly when the contract says it is well formed: its `tool` names a tool
//!   of the table, every required field is there, no field is outside the table's, the text fields
//!   are strings and `start`/`end` are non-negative integers (or null); the decoded call carries
//!   the values it was given;
//! - anything else (any JSON value, text that is not JSON, values of another kind) is an
//!   `InvalidAction` naming why, never a panic and never another error kind;
//! - text holding a call (with whitespace around it) decodes as the JSON value does.
//!
//! Cases: `CODEGYM_FUZZ_CASES` (default 512; see docs/fuzzing.md for the long mode).

use env_coding::repo::tools::{ToolCall, decode};
use env_core::contract::REPO_TOOLS;
use env_core::{EnvError, Value};
use proptest::prelude::*;
use serde_json::{Map, Value as J, json};

#[path = "../../tests/support/fuzz_config.rs"]
mod fuzz_config;

fn config(default: u32) -> proptest::test_runner::Config {
    fuzz_config::config(default, "tests/proptest-regressions/fuzz_repo_tools.txt")
}

/// The fields every tool's call may carry, the union of the table's.
fn all_fields() -> Vec<&'static str> {
    let mut fields: Vec<&str> = REPO_TOOLS
        .iter()
        .flat_map(|t| t.required.iter().chain(t.optional))
        .copied()
        .collect();
    fields.sort_unstable();
    fields.dedup();
    fields
}

/// Line-number fields; every other field is text.
fn is_line(field: &str) -> bool {
    matches!(field, "start" | "end")
}

fn leaf() -> impl Strategy<Value = J> {
    prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        any::<i64>().prop_map(J::from),
        any::<u64>().prop_map(J::from),
        Just(json!(1.5)),
        "\\PC{0,16}".prop_map(J::String),
        Just(json!([])),
        Just(json!({})),
    ]
}

/// A field's value: mostly of its own kind, sometimes of any other.
fn value_for(field: &'static str) -> BoxedStrategy<J> {
    let own = if is_line(field) {
        prop_oneof![any::<u32>().prop_map(J::from), Just(J::Null)].boxed()
    } else {
        "\\PC{0,24}".prop_map(J::String).boxed()
    };
    prop_oneof![4 => own, 1 => leaf()].boxed()
}

/// A call grown from a tool of the table: its fields each kept or dropped, maybe one unknown field,
/// maybe another tool's name.
fn call() -> impl Strategy<Value = J> {
    let names: Vec<&'static str> = REPO_TOOLS.iter().map(|t| t.name).collect();
    let fields = all_fields();
    (
        prop::sample::select(names.clone()),
        prop::collection::vec((prop::sample::select(fields), any::<bool>()), 0..6),
        prop::option::weighted(0.15, ("[a-z_]{1,8}", leaf())),
        prop::option::weighted(0.1, "[a-z_]{0,10}"),
    )
        .prop_flat_map(|(name, extra, unknown, renamed)| {
            let tool = REPO_TOOLS.iter().find(|t| t.name == name).expect("a tool");
            // Every field of its own, each kept with high probability, plus the extra ones asked for.
            let own: Vec<&'static str> =
                tool.required.iter().chain(tool.optional).copied().collect();
            let keep = prop::collection::vec(prop::bool::weighted(0.9), own.len());
            let extra: Vec<&'static str> = extra
                .into_iter()
                .filter(|(_, k)| *k)
                .map(|(f, _)| f)
                .collect();
            let values_own: Vec<BoxedStrategy<J>> = own.iter().map(|f| value_for(f)).collect();
            let values_extra: Vec<BoxedStrategy<J>> = extra.iter().map(|f| value_for(f)).collect();
            (keep, values_own, values_extra).prop_map(move |(keep, vo, ve)| {
                let mut m = Map::new();
                m.insert(
                    "tool".into(),
                    json!(renamed.clone().unwrap_or(name.to_string())),
                );
                for ((f, k), v) in own.iter().zip(keep).zip(vo) {
                    if k {
                        m.insert(f.to_string(), v);
                    }
                }
                for (f, v) in extra.iter().zip(ve) {
                    m.insert(f.to_string(), v);
                }
                if let Some((k, v)) = &unknown {
                    m.insert(k.clone(), v.clone());
                }
                J::Object(m)
            })
        })
}

/// The contract's verdict on `call`: `Ok` when well formed, else why not.
fn contract_says(call: &J) -> Result<(), String> {
    let m = call.as_object().ok_or("not an object")?;
    let name = m.get("tool").and_then(J::as_str).ok_or("no tool name")?;
    let tool = REPO_TOOLS
        .iter()
        .find(|t| t.name == name)
        .ok_or("unknown tool")?;
    for f in tool.required {
        if !m.contains_key(*f) {
            return Err(format!("missing {f}"));
        }
    }
    for (k, v) in m {
        if k == "tool" {
            continue;
        }
        if !tool.required.contains(&k.as_str()) && !tool.optional.contains(&k.as_str()) {
            return Err(format!("unknown field {k}"));
        }
        let fits = if is_line(k) {
            v.is_null() || v.is_u64()
        } else {
            v.is_string()
        };
        if !fits {
            return Err(format!("{k} of the wrong kind"));
        }
    }
    Ok(())
}

/// The decoded call's tool name and fields, to compare with what was sent.
fn fields_of(call: &ToolCall) -> J {
    match call {
        ToolCall::Bash { command } => json!({"tool": "bash", "command": command}),
        ToolCall::View { path, start, end } => {
            let mut v = json!({"tool": "view", "path": path});
            if let Some(s) = start {
                v["start"] = json!(s);
            }
            if let Some(e) = end {
                v["end"] = json!(e);
            }
            v
        }
        ToolCall::Create { path, content } => {
            json!({"tool": "create", "path": path, "content": content})
        }
        ToolCall::StrReplace { path, old, new } => {
            json!({"tool": "str_replace", "path": path, "old": old, "new": new})
        }
        ToolCall::Submit {} => json!({"tool": "submit"}),
    }
}

/// What was sent, with null line numbers left out (they mean "not given").
fn without_nulls(call: &J) -> J {
    let mut m = call.as_object().cloned().unwrap_or_default();
    m.retain(|_, v| !v.is_null());
    J::Object(m)
}

fn invalid_action(result: &Result<ToolCall, EnvError>) -> bool {
    matches!(result, Err(EnvError::InvalidAction(why)) if !why.is_empty())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn a_call_is_accepted_exactly_when_the_contract_says_it_is_well_formed(call in call()) {
        let decoded = decode(Value::Json(call.clone()));
        match contract_says(&call) {
            Ok(()) => {
                prop_assert!(decoded.is_ok(), "{} is well formed, refused: {:?}", call, decoded);
                let got = fields_of(decoded.as_ref().unwrap());
                prop_assert_eq!(got, without_nulls(&call));
            }
            Err(why) => prop_assert!(
                invalid_action(&decoded),
                "{} is not well formed ({}), got {:?}", call, why, decoded
            ),
        }
        // The same call as text, with whitespace around it, decodes alike.
        let text = decode(Value::Text(format!("\n  {call}\t\n")));
        prop_assert_eq!(format!("{text:?}"), format!("{decoded:?}"));
    }

    #[test]
    fn anything_else_is_an_invalid_action(
        value in leaf().prop_recursive(2, 8, 3, |inner| prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(J::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..3)
                .prop_map(|m| J::Object(m.into_iter().collect())),
        ]),
        text in "\\PC{0,40}",
    ) {
        let decoded = decode(Value::Json(value.clone()));
        match contract_says(&value) {
            Ok(()) => prop_assert!(decoded.is_ok(), "{} refused: {:?}", value, decoded),
            Err(_) => prop_assert!(invalid_action(&decoded), "{} got {:?}", value, decoded),
        }
        let from_text = decode(Value::Text(text.clone()));
        let parsed = serde_json::from_str::<J>(text.trim());
        prop_assert!(
            from_text.is_ok() || invalid_action(&from_text),
            "{:?} got {:?}", text, from_text
        );
        if parsed.is_err() {
            prop_assert!(invalid_action(&from_text), "{:?} is not JSON, got {:?}", text, from_text);
        }
        // Values of another kind than JSON or text are refused the same way.
        prop_assert!(invalid_action(&decode(Value::Discrete(7))));
    }
}
