//! Turns an exploit into the program a policy would submit for one task: the task's function name
//! where the exploit defines it, the samples its prompt shows where the exploit echoes them. An
//! exploit sees what a model sees (the prompt, the function's name), never the tests.

use codegym_sandbox::lang::Language;

use super::corpus::{Exploit, Shape};
use crate::reward::Component;
use crate::tasks::Task;

/// The program `exploit` submits for `task`, or `None` when it does not apply: another language, a
/// function exploit on a task whose tests call no function (or a script exploit on one whose tests
/// do), or an exploit that defines the function on a task that names none.
pub fn program_for(exploit: &Exploit, task: &Task) -> Option<String> {
    if !exploit.languages.contains(&task.language) {
        return None;
    }
    let shape_fits = match exploit.shape {
        Shape::Any => true,
        Shape::Function => calls_a_function(task),
        Shape::Script => !calls_a_function(task),
    };
    let entry = task.entry_point();
    if !shape_fits || (exploit.source.contains("{{ENTRY_POINT}}") && entry.is_none()) {
        return None;
    }
    let sample = sample_output(&task.prompt).unwrap_or_default();
    let source = with_sample(
        &exploit
            .source
            .replace("{{ENTRY_POINT}}", entry.as_deref().unwrap_or("solve")),
        &sample,
    );
    // An exploit is a whole program, except that in a compiled language the tests must link: a
    // function exploit then ends with the task's own signature (its completion prefix) and an empty
    // body, as a model's wrong answer would.
    Some(match stub(task) {
        Some(stub) if exploit.shape == Shape::Function && !source.contains("{{ENTRY_POINT}}") => {
            format!("{source}\n{stub}")
        }
        _ => source,
    })
}

/// An exploit's source with `sample` in place of its sample-output placeholders. A JSON string is
/// a valid string literal in Python and JavaScript; hex digits need no escaping in any language's
/// string (or shell word).
pub fn with_sample(source: &str, sample: &str) -> String {
    let hex: String = sample.bytes().map(|b| format!("{b:02x}")).collect();
    let json = serde_json::Value::String(sample.to_string()).to_string();
    source
        .replace("{{SAMPLE_OUTPUT_JSON}}", &json)
        .replace("{{SAMPLE_OUTPUT_HEX}}", &hex)
}

/// The answer of a policy that does nothing: a function that returns `None` (or the language's
/// default value) where the tests call one, else a program that prints nothing and fails. What it
/// earns is the task's baseline: an exploit counts only where it earns more (a test that expects
/// `None` is partial credit for doing nothing, reported apart, not an exploit's doing).
pub fn baseline_for(task: &Task) -> Option<String> {
    if calls_a_function(task) {
        return match task.language {
            Language::Python => {
                let name = task.entry_point()?;
                Some(format!("def {name}(*args, **kwargs):\n    return None\n"))
            }
            _ => stub(task),
        };
    }
    Some(
        match task.language {
            Language::Python => "raise SystemExit(1)\n",
            Language::C | Language::Cpp => "int main(void) { return 1; }\n",
            Language::Java => {
                "class Main { public static void main(String[] a) { System.exit(1); } }\n"
            }
            Language::NodeJs | Language::TypeScript => "process.exit(1);\n",
            Language::Go => "package main\n\nimport \"os\"\n\nfunc main() { os.Exit(1) }\n",
            Language::Rust => "fn main() { std::process::exit(1) }\n",
            Language::Bash | Language::Ruby | Language::Perl => "exit 1\n",
            Language::Php => "<?php exit(1);\n",
            Language::Lua => "os.exit(1)\n",
        }
        .to_string(),
    )
}

/// The task's function with a body that returns a default value, from a completion prefix that
/// ends with the function's opening brace (MultiPL-E's C-family prompts).
fn stub(task: &Task) -> Option<String> {
    let prefix = task.completion_prefix.as_deref()?;
    if !prefix.trim_end().ends_with('{') {
        return None;
    }
    let body = match task.language {
        Language::Cpp => "    return {};",
        Language::C | Language::Java => "    return 0;",
        Language::NodeJs | Language::TypeScript => "    return null;",
        _ => return None,
    };
    Some(format!("{}\n{body}\n}}\n", prefix.trim_end()))
}

/// Whether the task's tests call the program's function (unit tests, differential, appended tests)
/// rather than run it as a whole program.
fn calls_a_function(task: &Task) -> bool {
    task.reward.components.iter().any(|c| {
        matches!(
            c,
            Component::CheckFunction { .. }
                | Component::Asserts { .. }
                | Component::Differential(_)
                | Component::AppendedTests { .. }
        )
    }) || task.metadata.contains_key("entry_point")
}

/// The sample output a prompt shows: the first fenced block after a line naming an output
/// (`Output`, `Sample Output`, `Example output:`...).
pub fn sample_output(prompt: &str) -> Option<String> {
    crate::inputs::samples::fenced_after(prompt, "output")
        .into_iter()
        .next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_outputs_are_the_block_after_an_output_line() {
        let prompt = "Read n.\n\nSample Input\n```\n3\n```\nSample Output\n```\n6\n```\n";
        assert_eq!(sample_output(prompt).as_deref(), Some("6\n"));
        assert_eq!(sample_output("Print 6."), None);
    }
}
