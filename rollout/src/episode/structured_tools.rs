//! Tools mode for models without native function calling (`episode.tool_calls = "structured"`):
//! the tools' definitions (the same ones native calls get) are written into the task's message,
//! every model call carries `response_format` with a JSON schema of one call, `{"name",
//! "parameters"}` (Llama 3's JSON tool-call shape) with one alternative per tool (its name a
//! constant, its parameters the tool's), and the answer's JSON is the call. The name comes first
//! (the keys sort so), so a decoder held to the schema picks the tool before its arguments. An endpoint that constrains its output to the
//! schema (llama.cpp's grammars, vLLM's guided decoding) so gets a valid call from any model.
//! The results come back as user messages: the assistant's message carries no `tool_calls` for a
//! `tool` message to answer.

use serde_json::{Value, json};
use trajectory::record::{ChatToolCall, FunctionCall};

use super::format;

/// The schema's name in `response_format`.
const SCHEMA_NAME: &str = "tool_call";

/// `response_format` for one call of one of `tools` (OpenAI's tool definitions).
pub(super) fn response_format(tools: &Value) -> Value {
    let alternatives: Vec<Value> = definitions(tools)
        .map(|(name, _, parameters)| {
            json!({
                "type": "object",
                "properties": {"name": {"const": name}, "parameters": parameters},
                "required": ["name", "parameters"],
                "additionalProperties": false,
            })
        })
        .collect();
    // Not `strict`: OpenAI's strict mode wants every property required, and the tools have
    // optional ones (a view's line range).
    json!({"type": "json_schema",
           "json_schema": {"name": SCHEMA_NAME, "strict": false,
                           "schema": {"anyOf": alternatives}}})
}

/// What the task's message gains: the tools and the shape of an answer.
pub(super) fn instruction(tools: &Value) -> String {
    let mut text = String::from(
        "\n\nAnswer every turn with exactly one tool call as a JSON object, \
         {\"name\": TOOL, \"parameters\": {...}}, and nothing else. The tools:\n",
    );
    for (name, description, parameters) in definitions(tools) {
        text.push_str(&format!(
            "- {name}: {description} Parameters: {parameters}\n"
        ));
    }
    text
}

/// A model's answer as the call it holds: the whole text as JSON, else its first fenced `json`
/// block (the parse AutoCoder's stages use).
/// `id` names the call in the record. `Err`: why it is no call (told to the model).
pub(super) fn parse(content: &str, id: String) -> Result<ChatToolCall, String> {
    let value = format::json_object(content).map_err(|why| {
        format!("{why}: answer with a JSON object {{\"name\": TOOL, \"parameters\": {{...}}}}")
    })?;
    let name = value
        .get("name")
        .and_then(Value::as_str)
        .ok_or("the call has no string `name`")?;
    // `arguments` too: OpenAI's word, which a model writing free text may use.
    let arguments = match value.get("parameters").or_else(|| value.get("arguments")) {
        None | Some(Value::Null) => json!({}),
        Some(a) => a.clone(),
    };
    Ok(ChatToolCall {
        id,
        kind: "function".into(),
        function: FunctionCall {
            name: name.to_string(),
            arguments: arguments.to_string(),
        },
    })
}

/// Each tool's (name, description, parameters).
fn definitions(tools: &Value) -> impl Iterator<Item = (&str, &str, &Value)> {
    tools.as_array().into_iter().flatten().filter_map(|t| {
        let f = t.get("function")?;
        Some((
            f.get("name")?.as_str()?,
            f.get("description").and_then(Value::as_str).unwrap_or(""),
            f.get("parameters")?,
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_has_one_alternative_per_tool_with_its_parameters() {
        let tools = format::repo_tool_definitions();
        let f = response_format(&tools);
        let alternatives = f["json_schema"]["schema"]["anyOf"].as_array().unwrap();
        assert_eq!(alternatives.len(), tools.as_array().unwrap().len());
        let bash = alternatives
            .iter()
            .find(|a| a["properties"]["name"]["const"] == "bash")
            .expect("bash");
        let defined = tools
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["function"]["name"] == "bash")
            .unwrap();
        assert_eq!(
            bash["properties"]["parameters"],
            defined["function"]["parameters"]
        );
        let told = instruction(&tools);
        for t in tools.as_array().unwrap() {
            let name = t["function"]["name"].as_str().unwrap();
            assert!(told.contains(&format!("- {name}: ")), "{told}");
        }
    }

    #[test]
    fn answers_become_calls_or_say_why_not() {
        let call = parse(
            r#"{"name": "bash", "arguments": {"command": "ls"}}"#,
            "s0".into(),
        )
        .expect("call");
        assert_eq!(
            (call.id.as_str(), call.function.name.as_str()),
            ("s0", "bash")
        );
        assert_eq!(call.function.arguments, r#"{"command":"ls"}"#);
        let fenced = "Sure:\n```json\n{\"name\": \"submit\", \"arguments\": {}}\n```\n";
        let call = parse(fenced, "s1".into()).expect("fenced call");
        assert_eq!(
            (
                call.function.name.as_str(),
                call.function.arguments.as_str()
            ),
            ("submit", "{}")
        );
        for bad in ["ls -la", r#"{"parameters": {}}"#, r#"{"name": 3}"#, "[1]"] {
            assert!(parse(bad, "x".into()).is_err(), "{bad}");
        }
    }
}
