//! Text shown to the model besides the templates (which are the `prompts` crate's): execution
//! feedback (long output cut in the middle so both the start and the traceback at the end
//! survive), and the tool definitions of tools mode (the coding env's, and the repository env's
//! from the contract's table).

use env_core::contract::{field, repo, tool};
use env_core::{ExecutionResult, Value};
use prompts::render;
use serde_json::json;

/// Keeps at most `max` characters: the head and the tail, with a marker saying how much was cut.
pub fn truncate_middle(s: &str, max: usize) -> String {
    let count = s.chars().count();
    if count <= max {
        return s.to_string();
    }
    let head = max / 2;
    let tail = max - head;
    let head_end = s.char_indices().nth(head).map_or(s.len(), |(i, _)| i);
    let tail_start = s
        .char_indices()
        .nth(count - tail)
        .map_or(s.len(), |(i, _)| i);
    format!(
        "{}\n... [{} characters cut] ...\n{}",
        &s[..head_end],
        count - max,
        &s[tail_start..]
    )
}

/// A one-line verdict of an execution.
pub fn status(e: &ExecutionResult, solved: bool) -> String {
    if solved {
        "all checks passed".into()
    } else if e.timed_out {
        "the time limit was exceeded".into()
    } else if e.memory_exceeded {
        "the memory limit was exceeded".into()
    } else if let Some(sig) = e.signal {
        format!("the program was killed by signal {sig}")
    } else if e.exit_code == Some(0) {
        "the program ran but the task is not solved".into()
    } else {
        "the program failed".into()
    }
}

/// The feedback message after an execution, from the `feedback` template.
pub fn feedback(
    template: &str,
    obs: &Value,
    reward: f64,
    solved: bool,
    max_chars: usize,
) -> String {
    match obs {
        Value::Execution(e) => {
            let exit = e
                .exit_code
                .map_or_else(|| "none".to_string(), |c| c.to_string());
            let stdout = truncate_middle(&e.stdout, max_chars);
            let stderr = truncate_middle(&e.stderr, max_chars);
            let reward = format!("{reward}");
            render(
                template,
                &[
                    ("status", &status(e, solved)),
                    ("exit_code", &exit),
                    ("stdout", &stdout),
                    ("stderr", &stderr),
                    ("reward", &reward),
                ],
            )
        }
        other => truncate_middle(&observation_text(other), max_chars),
    }
}

/// The content of a tool message answering a call that produced `obs`.
pub fn tool_result(obs: &Value, solved: bool, max_chars: usize) -> String {
    match obs {
        Value::Execution(e) => {
            let exit = e
                .exit_code
                .map_or_else(|| "none".to_string(), |c| c.to_string());
            format!(
                "status: {}\nexit_code: {exit}\nstdout:\n{}\nstderr:\n{}",
                status(e, solved),
                truncate_middle(&e.stdout, max_chars),
                truncate_middle(&e.stderr, max_chars)
            )
        }
        other => truncate_middle(&observation_text(other), max_chars),
    }
}

/// Text of a non-execution observation (the task prompt, a file's content).
pub fn observation_text(obs: &Value) -> String {
    match obs {
        Value::Text(s) => s.clone(),
        Value::Json(serde_json::Value::String(s)) => s.clone(),
        Value::Json(v) => v.to_string(),
        other => serde_json::to_string(other).unwrap_or_else(|_| other.kind().to_string()),
    }
}

/// OpenAI tool definitions: `run_python` (issue 14: `run_code(code, language)` for an episode in
/// another `language`), plus `write_file` and `read_file` in session mode.
pub fn tool_definitions(session: bool, language: Option<&str>) -> serde_json::Value {
    let function =
        |name: &str, description: &str, properties: serde_json::Value, required: &[&str]| {
            json!({"type": "function", "function": {"name": name, "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required}}})
        };
    let run = match language {
        None => function(
            tool::RUN_PYTHON,
            "Run a complete Python program in a sandbox; the task's checks run with it. Returns \
             the status, exit code, stdout and stderr.",
            json!({"code": {"type": "string", "description": "The complete Python program."}}),
            &[field::CODE],
        ),
        Some(l) => function(
            tool::RUN_CODE,
            &format!(
                "Run a complete {l} program in a sandbox (compiled first if {l} is compiled); the \
                 task's checks run with it. Returns the status, exit code, stdout and stderr."
            ),
            json!({"code": {"type": "string", "description": format!("The complete {l} program.")},
                   "language": {"type": "string", "enum": [l],
                                "description": "The program's language."}}),
            &[field::CODE, field::LANGUAGE],
        ),
    };
    let mut tools = vec![run];
    if session {
        tools.push(function(
            tool::WRITE_FILE,
            "Write a text file in the working directory (kept between calls).",
            json!({"path": {"type": "string"}, "content": {"type": "string"}}),
            &[field::PATH, field::CONTENT],
        ));
        tools.push(function(
            tool::READ_FILE,
            "Read a text file from the working directory.",
            json!({"path": {"type": "string"}}),
            &[field::PATH],
        ));
    }
    serde_json::Value::Array(tools)
}

/// OpenAI tool definitions of the repository env's tools: the contract's table
/// (`env_core::contract::REPO_TOOLS`), each field with its type and meaning.
pub fn repo_tool_definitions() -> serde_json::Value {
    repo::shapes()
        .map(|(t, fields)| {
            let properties: serde_json::Map<String, serde_json::Value> = fields
                .iter()
                .map(|f| {
                    let schema = json!({"type": repo::field_type(f),
                                        "description": repo::field_meaning(f)});
                    (f.to_string(), schema)
                })
                .collect();
            json!({"type": "function", "function": {"name": t.name,
                "description": repo::tool_meaning(t.name),
                "parameters": {"type": "object", "properties": properties,
                               "required": t.required, "additionalProperties": false}}})
        })
        .collect()
}

/// An answer's JSON object: the whole text, else the first fenced `json` block's (AutoCoder's
/// stages, structured tool calls).
pub(super) fn json_object(text: &str) -> Result<serde_json::Value, String> {
    let whole = serde_json::from_str::<serde_json::Value>(text.trim());
    let value = match whole {
        Ok(v) => v,
        Err(_) => {
            let block = code_extract::first_block_tagged(text, &["json"])
                .ok_or("the answer is neither a JSON object nor holds a ```json block")?;
            serde_json::from_str(block.trim())
                .map_err(|e| format!("the ```json block is not valid JSON: {e}"))?
        }
    };
    if value.is_object() {
        Ok(value)
    } else {
        Err("the answer is JSON but not an object".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_tools_are_offered_from_the_contracts_table() {
        let tools = repo_tool_definitions();
        let names: Vec<&str> = tools
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["bash", "view", "create", "str_replace", "submit"]);
        let view = &tools[1]["function"]["parameters"];
        assert_eq!(view["required"], json!(["path"]));
        assert_eq!(view["properties"]["start"]["type"], "integer");
        assert_eq!(tools[4]["function"]["parameters"]["required"], json!([]));
    }

    #[test]
    fn truncates_in_the_middle_on_char_boundaries() {
        let s = "é".repeat(10) + &"z".repeat(10);
        let t = truncate_middle(&s, 6);
        assert!(t.starts_with("ééé\n"));
        assert!(t.ends_with("\nzzz"));
        assert!(t.contains("14 characters cut"));
        assert_eq!(truncate_middle("short", 10), "short");
    }
}
