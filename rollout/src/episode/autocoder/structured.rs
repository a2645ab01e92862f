//! The structured answers of the AutoCoder stages: each stage's JSON schema (sent as OpenAI
//! `response_format: {"type": "json_schema", ...}` and written into the instruction, so that a model
//! without structured outputs can follow it too), and the parser of an answer: the whole text as a
//! JSON object, else the first fenced ```json block (the fallback for endpoints that refuse
//! `response_format` or answer in prose).

use serde_json::{Value, json};

use trajectory::record::{Diagnosis, Stage};

use crate::episode::format;

/// What a stage asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ask {
    Plan,
    Solution,
    Tests,
    Diagnose,
    Fix(Diagnosis),
}

impl Ask {
    pub(super) fn stage(self) -> Stage {
        match self {
            Ask::Plan => Stage::Plan,
            Ask::Solution => Stage::Solution,
            Ask::Tests => Stage::Tests,
            Ask::Diagnose => Stage::Diagnose,
            Ask::Fix(_) => Stage::Fix,
        }
    }

    /// The schema's name in `response_format` (`[a-zA-Z0-9_-]`, as OpenAI requires).
    fn name(self) -> &'static str {
        match self {
            Ask::Plan => "plan",
            Ask::Solution => "solution",
            Ask::Tests => "tests",
            Ask::Diagnose => "diagnosis",
            Ask::Fix(Diagnosis::Logic) => "patched_code",
            Ask::Fix(Diagnosis::Environment) => "added_requirements",
            Ask::Fix(Diagnosis::Test) => "fixed_tests",
        }
    }

    /// The JSON schema of the answer (strict mode: every property required, no others).
    pub(super) fn schema(self) -> Value {
        let string = json!({"type": "string"});
        let strings = json!({"type": "array", "items": {"type": "string"}});
        let (properties, required): (Value, &[&str]) = match self {
            Ask::Plan => (json!({"plan": string}), &["plan"]),
            Ask::Solution | Ask::Fix(Diagnosis::Logic) => (
                json!({"code": string, "requirements": strings}),
                &["code", "requirements"],
            ),
            Ask::Tests | Ask::Fix(Diagnosis::Test) => (json!({"tests": string}), &["tests"]),
            Ask::Diagnose => (
                json!({"kind": {"type": "string", "enum": ["logic", "environment", "test"]},
                       "explanation": string}),
                &["kind", "explanation"],
            ),
            Ask::Fix(Diagnosis::Environment) => {
                (json!({"requirements": strings}), &["requirements"])
            }
        };
        json!({"type": "object", "properties": properties, "required": required,
               "additionalProperties": false})
    }

    /// OpenAI's `response_format` for this stage.
    pub(super) fn response_format(self) -> Value {
        json!({"type": "json_schema",
               "json_schema": {"name": self.name(), "strict": true, "schema": self.schema()}})
    }
}

/// A stage's answer, checked against its shape.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Answer {
    Plan(String),
    Code {
        code: String,
        requirements: Vec<String>,
    },
    Tests(String),
    Diagnosis {
        kind: Diagnosis,
        explanation: String,
    },
    Requirements(Vec<String>),
}

/// Parses the model's text for `ask`: the JSON object and the answer it holds.
pub(super) fn parse(ask: Ask, text: &str) -> Result<(Value, Answer), String> {
    let value = format::json_object(text)?;
    let answer = shape(ask, &value)?;
    Ok((value, answer))
}

fn shape(ask: Ask, v: &Value) -> Result<Answer, String> {
    let text = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("missing string field `{k}`"))
    };
    let list = |k: &str| -> Result<Vec<String>, String> {
        let items = v
            .get(k)
            .and_then(Value::as_array)
            .ok_or_else(|| format!("missing list field `{k}`"))?;
        items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(|s| s.trim().to_string())
                    .ok_or_else(|| format!("`{k}` must hold strings"))
            })
            .filter(|r| r.as_ref().map_or(true, |s| !s.is_empty()))
            .collect()
    };
    Ok(match ask {
        Ask::Plan => Answer::Plan(text("plan")?),
        Ask::Solution | Ask::Fix(Diagnosis::Logic) => Answer::Code {
            code: text("code")?,
            requirements: list("requirements")?,
        },
        Ask::Tests | Ask::Fix(Diagnosis::Test) => Answer::Tests(text("tests")?),
        Ask::Diagnose => {
            let kind = match text("kind")?.trim().to_ascii_lowercase().as_str() {
                "logic" => Diagnosis::Logic,
                "environment" => Diagnosis::Environment,
                "test" => Diagnosis::Test,
                other => {
                    return Err(format!(
                        "`kind` must be logic, environment or test, not {other:?}"
                    ));
                }
            };
            Answer::Diagnosis {
                kind,
                explanation: text("explanation").unwrap_or_default(),
            }
        }
        Ask::Fix(Diagnosis::Environment) => Answer::Requirements(list("requirements")?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_json_and_fenced_json_both_parse() {
        let bare = r#"{"code": "print(1)", "requirements": [" tabulate ", ""]}"#;
        let fenced =
            "Sure.\n\n```json\n{\"code\": \"print(1)\", \"requirements\": [\"tabulate\"]}\n```\n";
        let want = Answer::Code {
            code: "print(1)".into(),
            requirements: vec!["tabulate".into()],
        };
        assert_eq!(parse(Ask::Solution, bare).unwrap().1, want);
        assert_eq!(parse(Ask::Solution, fenced).unwrap().1, want);
    }

    #[test]
    fn wrong_shapes_are_reasons_not_panics() {
        for (ask, text) in [
            (Ask::Plan, "no json here"),
            (Ask::Plan, "[1, 2]"),
            (Ask::Plan, "```json\n{not json\n```"),
            (Ask::Solution, r#"{"code": 3, "requirements": []}"#),
            (Ask::Solution, r#"{"code": "x", "requirements": [1]}"#),
            (
                Ask::Diagnose,
                r#"{"kind": "cosmic rays", "explanation": ""}"#,
            ),
            (Ask::Fix(Diagnosis::Environment), r#"{"packages": []}"#),
        ] {
            assert!(parse(ask, text).is_err(), "{text}");
        }
        let (_, d) = parse(Ask::Diagnose, r#"{"kind": " Test ", "explanation": "x"}"#).unwrap();
        assert!(matches!(
            d,
            Answer::Diagnosis {
                kind: Diagnosis::Test,
                ..
            }
        ));
    }

    #[test]
    fn schemas_are_strict_objects() {
        for ask in [
            Ask::Plan,
            Ask::Solution,
            Ask::Tests,
            Ask::Diagnose,
            Ask::Fix(Diagnosis::Environment),
        ] {
            let f = ask.response_format();
            assert_eq!(f["type"], "json_schema");
            let schema = &f["json_schema"]["schema"];
            assert_eq!(schema["additionalProperties"], false);
            let props = schema["properties"].as_object().unwrap();
            assert_eq!(schema["required"].as_array().unwrap().len(), props.len());
        }
    }
}
