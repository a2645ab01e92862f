//! The crate's extraction as a line filter, for differential tests of its ports (the Python
//! package's `codegym.extract`, whose Hypothesis tests run this once and feed it every text).
//!
//! Each stdin line is a JSON object `{"text": ..., "mode": "fenced"|"auto"|"raw", "language": ...}`;
//! each answer line is `{"extract": <string or null>, "answer": <string>}`, flushed at once so
//! that a caller may send one text and read its answer. A line that is not such an object is
//! answered `{"error": "..."}`.

use std::io::{BufRead, Write};

use code_extract::{ExtractMode, answer, extract_in};
use serde_json::{Value, json};

fn reply(line: &str) -> Value {
    let request: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return json!({"error": e.to_string()}),
    };
    let (Some(text), Some(mode), Some(language)) = (
        request["text"].as_str(),
        request["mode"].as_str(),
        request["language"].as_str(),
    ) else {
        return json!({"error": "expected {\"text\", \"mode\", \"language\"} strings"});
    };
    let mode: ExtractMode = match serde_json::from_value(json!(mode)) {
        Ok(m) => m,
        Err(e) => return json!({"error": e.to_string()}),
    };
    json!({
        "extract": extract_in(text, mode, language),
        "answer": answer(text),
    })
}

fn main() -> std::io::Result<()> {
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        writeln!(stdout, "{}", reply(&line?))?;
        stdout.flush()?;
    }
    Ok(())
}
