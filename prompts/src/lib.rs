//! The prompt templates of an episode's conversation: the system prompt of each episode mode, the
//! task message and the execution feedback, with the one placeholder renderer they all use.
//!
//! Why a crate of its own: two layers need the same opening messages. The rollout engine opens
//! every episode with them, and the env server's `ListTasks` sends them so that trainers prompt a
//! model exactly as rollouts do. The server must not depend on the rollout engine for that, and
//! the engine knows no environment, so neither `rollout` nor `env-coding` (which brings the sandbox)
//! can be the home: the templates sit below both, depending only on the record schema for
//! [`EpisodeMode`] (a record's mode is what picks its system prompt).

use serde::{Deserialize, Serialize};

pub use trajectory::record::EpisodeMode;

/// The default system prompt of program-of-thought mode.
pub const PROGRAM_OF_THOUGHT_SYSTEM: &str = "You solve the task by writing Python in a persistent \
    session. The task's data is already in the variable `context` (do not expect it in this \
    message). You can call llm_query(prompt) -> str to ask a language model, and \
    llm_query_batched(prompts) -> list[str] for several prompts at once. Answer with one \
    ```python block per turn; you see its output. When you know the answer, call FINAL(answer) \
    in your code: the episode ends and the answer is checked.";

/// Prompt templates. Placeholders in braces are replaced: `{prompt}` (the task's observation text),
/// in the task template also `{data_context}` (the summary of a data task's CSV/JSON files from
/// `reset`'s info, empty for other tasks), and in feedback `{exit_code}`, `{stdout}`, `{stderr}`,
/// `{status}`, `{reward}`. `{language}` in the code-block system prompt and feedback is the
/// episode's language (SandboxFusion's name from `reset`'s info, e.g. `cpp`; `python` when the env
/// names none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Prompts {
    /// System prompt of code-block mode.
    pub system: String,
    /// System prompt of tools mode.
    pub tools_system: String,
    /// System prompt of AutoCoder mode (the stage instructions follow it).
    pub autocoder_system: String,
    /// First user message.
    pub task: String,
    /// User message after each execution in code-block mode (tools mode answers with tool
    /// messages holding the same fields).
    pub feedback: String,
    /// System prompt of program-of-thought mode.
    pub pot_system: String,
}

impl Default for Prompts {
    fn default() -> Self {
        Prompts {
            system:
                "You are an expert programmer. Solve the task in {language}. Put your complete \
                     solution in a single ```{language} fenced code block; it is executed and \
                     checked. If it fails you will see the output and may try again."
                    .to_string(),
            tools_system: "You are an expert programmer. Solve the task in {language} using the \
                           tools: the run tool executes your complete program and checks it. When \
                           the checks pass, or you are done, answer without calling a tool."
                .to_string(),
            autocoder_system: "You are an expert Python programmer. You solve the task in stages: \
                               a plan, a solution, then pytest tests for it; failing tests are \
                               diagnosed and fixed. Answer every stage with one JSON object in the \
                               requested shape."
                .to_string(),
            task: "{prompt}".to_string(),
            feedback: "Your code was executed: {status}.\nexit code: {exit_code}\n\nstdout:\n\
                       {stdout}\n\nstderr:\n{stderr}\n\nFix the problem and answer with the \
                       complete corrected program in one ```{language} block."
                .to_string(),
            pot_system: PROGRAM_OF_THOUGHT_SYSTEM.to_string(),
        }
    }
}

impl Prompts {
    /// The opening of every episode: the system prompt of `mode` and the first user message, the
    /// task template rendered over the task's prompt. `ListTasks` sends the same opening, so that
    /// trainers prompt the model exactly as rollouts do.
    pub fn opening(&self, mode: EpisodeMode, task_prompt: &str) -> (String, String) {
        self.opening_with_data(mode, task_prompt, "")
    }

    /// [`Prompts::opening`] with a data task's context for `{data_context}`.
    pub fn opening_with_data(
        &self,
        mode: EpisodeMode,
        task_prompt: &str,
        data_context: &str,
    ) -> (String, String) {
        self.opening_in(mode, task_prompt, data_context, "python")
    }

    /// [`Prompts::opening_with_data`] for an episode in `language` (`{language}`).
    pub fn opening_in(
        &self,
        mode: EpisodeMode,
        task_prompt: &str,
        data_context: &str,
        language: &str,
    ) -> (String, String) {
        let system = match mode {
            EpisodeMode::CodeBlock => &self.system,
            EpisodeMode::Tools => &self.tools_system,
            EpisodeMode::ProgramOfThought => &self.pot_system,
            EpisodeMode::Autocoder => &self.autocoder_system,
        };
        (
            render(system, &[("language", language)]),
            render(
                &self.task,
                &[("prompt", task_prompt), ("data_context", data_context)],
            ),
        )
    }
}

/// Replaces `{name}` placeholders in one pass (substituted text is never re-scanned, so output that
/// happens to contain `{stdout}` stays as is). Unknown placeholders are kept literally.
pub fn render(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 256);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let known = after.find('}').and_then(|close| {
            let name = &after[..close];
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v, close))
        });
        match known {
            Some((value, close)) => {
                out.push_str(value);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_in_one_pass() {
        let out = render("a {x} b {y} {unknown} {", &[("x", "{y}"), ("y", "2")]);
        assert_eq!(out, "a {y} b 2 {unknown} {");
    }

    #[test]
    fn task_template_can_include_the_data_context() {
        let prompts = Prompts {
            task: "{prompt}\n\nData:\n{data_context}".into(),
            ..Prompts::default()
        };
        let (_, user) = prompts.opening_with_data(
            EpisodeMode::CodeBlock,
            "Sum it.",
            "File a.csv: 2 rows, 1 columns",
        );
        assert_eq!(user, "Sum it.\n\nData:\nFile a.csv: 2 rows, 1 columns");
        let (_, plain) = Prompts::default().opening(EpisodeMode::CodeBlock, "Sum it.");
        assert_eq!(plain, "Sum it.");
    }

    #[test]
    fn each_mode_opens_with_its_own_system_prompt_in_the_language() {
        let p = Prompts::default();
        let (code, _) = p.opening_in(EpisodeMode::CodeBlock, "t", "", "cpp");
        assert!(code.contains("```cpp"), "{code}");
        let (pot, _) = p.opening(EpisodeMode::ProgramOfThought, "t");
        assert_eq!(pot, PROGRAM_OF_THOUGHT_SYSTEM);
        let (tools, _) = p.opening(EpisodeMode::Tools, "t");
        assert_ne!(tools, code);
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = serde_json::from_str::<Prompts>(r#"{"sytem": "x"}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }
}
