//! Reward specs parsed more strictly than serde's derive does by itself.
//!
//! - **Errors name their field** by its path (`components[1].cases[0].stdout: invalid type: ...`),
//!   so that a task author finds it. Serde's own path tracking (`serde_path_to_error`) stops where
//!   a value is buffered, as every internally tagged enum (a component) and every struct below
//!   is: the field is found instead by taking children out one at a time. Serde reports the first
//!   bad value it visits, so removing an innocent field leaves the error as it was, and removing
//!   the culprit changes it (to success, a missing-field error, or a later field's error). Only
//!   failing specs pay for this, one parse per child on the way down.
//! - **Structs come from objects only** ([`object_only!`]): serde's derive also reads a struct from
//!   a sequence of its field values, so `"penalties": []` would load as no penalties and a
//!   component `["exit_code"]` as an exit-code check, defaults standing in for what was meant.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// The key of the spec's tagged enums (`Component`, `Checker`).
const TAG: &str = "type";

/// One step of a path into a JSON value.
#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// Implements `Serialize` and `Deserialize` for a spec struct or enum whose derives carry
/// `#[serde(remote = "Self")]` (which makes them inherent functions): serialized as derived,
/// deserialized as derived from a JSON object, and from nothing else.
macro_rules! object_only {
    ($t:ty) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                <$t>::serialize(self, s)
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let value = <serde_json::Value as serde::Deserialize>::deserialize(d)?;
                $crate::reward::strict::object(&value).map_err(serde::de::Error::custom)?;
                <$t>::deserialize(value).map_err(serde::de::Error::custom)
            }
        }
    };
}
pub(crate) use object_only;

/// `Ok` for a JSON object; otherwise serde's "invalid type" error.
pub(crate) fn object(value: &Value) -> Result<(), serde_json::Error> {
    use serde::de::{Error, Unexpected};
    let unexpected = match value {
        Value::Object(_) => return Ok(()),
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(_) => Unexpected::Other("a number"),
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
    };
    Err(serde_json::Error::invalid_type(unexpected, &"an object"))
}

/// Deserializes `value` as a `T`; an error is `PATH: message` (just the message at the root).
pub(super) fn deserialize<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    // From a reference: the value is kept, uncloned, for locating an error.
    let message = match T::deserialize(&value) {
        Ok(t) => return Ok(t),
        Err(e) => e.to_string(),
    };
    let mut path = Vec::new();
    while let Some(child) = culprit::<T>(&value, &path, &message) {
        path.push(child);
    }
    if path.is_empty() {
        return Err(message);
    }
    Err(format!("{}: {message}", shown(&path)))
}

/// The child of the value at `path` whose removal changes the error `message`, if exactly that.
fn culprit<T: DeserializeOwned>(root: &Value, path: &[Step], message: &str) -> Option<Step> {
    let children: Vec<Step> = match node(root, path)? {
        // The tag of a tagged enum (a component's or a checker's `type`) last: without it any
        // error becomes "missing field `type`", so it is the culprit only when no other field is.
        Value::Object(map) => {
            let (tags, fields): (Vec<&String>, Vec<&String>) =
                map.keys().partition(|k| k.as_str() == TAG);
            fields
                .into_iter()
                .chain(tags)
                .cloned()
                .map(Step::Key)
                .collect()
        }
        Value::Array(items) => (0..items.len()).map(Step::Index).collect(),
        _ => return None,
    };
    children.into_iter().find(|child| {
        let mut without = root.clone();
        match (node_mut(&mut without, path), child) {
            (Some(Value::Object(map)), Step::Key(k)) => {
                map.remove(k);
            }
            (Some(Value::Array(items)), Step::Index(i)) => {
                items.remove(*i);
            }
            _ => return false,
        }
        match serde_json::from_value::<T>(without) {
            Ok(_) => true,
            Err(e) => e.to_string() != message,
        }
    })
}

fn node<'a>(v: &'a Value, path: &[Step]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, step| match step {
        Step::Key(k) => v.get(k),
        Step::Index(i) => v.get(i),
    })
}

fn node_mut<'a>(v: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, step| match step {
        Step::Key(k) => v.get_mut(k),
        Step::Index(i) => v.get_mut(i),
    })
}

/// `components[1].cases[0].stdout`, as serde_path_to_error prints a path.
fn shown(path: &[Step]) -> String {
    let mut s = String::new();
    for step in path {
        match step {
            Step::Key(k) if s.is_empty() => s.push_str(k),
            Step::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Step::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reward::RewardSpec;
    use serde_json::json;

    #[test]
    fn names_the_field_inside_a_component() {
        let spec = json!({"version": 1, "components": [
            {"type": "exit_code"},
            {"type": "io_cases", "cases": [{"stdout": "1"}, {"stdin": "", "stdout": 2}]}
        ]});
        let e = deserialize::<RewardSpec>(spec).unwrap_err();
        assert!(
            e.starts_with("components[1].cases[1].stdout: invalid type"),
            "{e}"
        );
        let e = deserialize::<RewardSpec>(json!({"version": "1", "components": []})).unwrap_err();
        assert!(e.starts_with("version: invalid type"), "{e}");
    }

    #[test]
    fn structs_come_from_objects_only() {
        for (bad, at) in [
            (json!([1, [{"type": "exit_code"}]]), ""),
            (
                json!({"version": 1, "components": [["exit_code"]]}),
                "components[0]: ",
            ),
            (
                json!({"version": 1, "components": [{"type": "exit_code"}], "penalties": []}),
                "penalties: ",
            ),
            (
                json!({"version": 1, "components": [{"type": "io_cases", "cases": [["", "1"]]}]}),
                "components[0].cases[0]: ",
            ),
        ] {
            let e = deserialize::<RewardSpec>(bad.clone()).unwrap_err();
            assert!(
                e.starts_with(at) && e.contains("expected an object"),
                "{bad}: {e}"
            );
        }
    }
}
