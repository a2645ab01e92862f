//! The coding envs' contract with their clients, defined once: the info keys a step reports, the
//! tool-call actions (`{"tool": name, ...fields}`) and their fields, those of the coding envs and
//! those of the repository env (every tool name is distinct, so a call's shape follows its name).
//!
//! It lives in env-core because everything that speaks it sits above env-core: the coding env
//! (which produces the info and parses the calls), the rollout engine and the server (which read
//! and send them). The Python package's copy (`codegym/_contract.py`) is tested equal to
//! `contract.json` beside this crate's manifest, which `tests/contract.rs` keeps equal to
//! [`to_json`]: a change here fails a test until both copies follow. [`repo`]: the repository
//! tools' calls as types, their one decoder (the env's and the rollout engine's) and what their
//! fields mean.

use serde_json::{Value, json};

pub mod repo;

/// The contract's version in `contract.json`. Changelog: 1, the first contract; 2, the repository
/// env's tools (`repo_tools`).
pub const VERSION: u32 = 2;

/// Keys of the info a coding env's reset and step return.
pub mod info {
    /// Bool: the task is solved (the step's reward components all passed).
    pub const SOLVED: &str = "solved";
    /// The episode's task id.
    pub const TASK_ID: &str = "task_id";
    /// The language programs of the episode are written in (SandboxFusion's names).
    pub const LANGUAGE: &str = "language";
    /// Object: the reward components' scores and details.
    pub const REWARD_BREAKDOWN: &str = "reward_breakdown";
    /// The step number in the episode.
    pub const STEP: &str = "step";
    /// The episode's mode (`single` or `multi`).
    pub const MODE: &str = "mode";
    /// Wall time of the step's program.
    pub const EXECUTION_TIME_MS: &str = "execution_time_ms";
    /// Peak resident memory of the step's program.
    pub const MEMORY_USED_BYTES: &str = "memory_used_bytes";
    /// The task's data context (files it reads), as text for the prompt.
    pub const DATA_CONTEXT: &str = "data_context";
    /// Bool: the step's verdict was shared from an identical submission, not run for it.
    pub const CACHE_HIT: &str = "cache_hit";
    /// Object: what produced the step's reward (task and reward-spec hashes, limits, sandbox,
    /// toolchain, codegym version); a shared verdict carries the provenance of its run.
    pub const PROVENANCE: &str = "provenance";

    /// Every key above.
    pub const ALL: &[&str] = &[
        SOLVED,
        TASK_ID,
        LANGUAGE,
        REWARD_BREAKDOWN,
        STEP,
        MODE,
        EXECUTION_TIME_MS,
        MEMORY_USED_BYTES,
        DATA_CONTEXT,
        CACHE_HIT,
        PROVENANCE,
    ];
}

/// Tool-call actions: a JSON object whose [`tool::KEY`] names the tool, plus its fields.
pub mod tool {
    /// The key naming the tool of a call.
    pub const KEY: &str = "tool";
    /// Runs Python (`code`; optional `vars`, `variables`).
    pub const RUN_PYTHON: &str = "run_python";
    /// Runs a program in a language (`code`, `language`).
    pub const RUN_CODE: &str = "run_code";
    /// Writes a file in the session's work dir (`path`, `content`).
    pub const WRITE_FILE: &str = "write_file";
    /// Reads a file of the session's work dir (`path`).
    pub const READ_FILE: &str = "read_file";
    /// Repository env: a shell command in the episode's copy (`command`).
    pub const BASH: &str = "bash";
    /// Repository env: a file with line numbers, or a directory (`path`; optional `start`, `end`).
    pub const VIEW: &str = "view";
    /// Repository env: writes a whole file (`path`, `content`).
    pub const CREATE: &str = "create";
    /// Repository env: replaces a string found exactly once (`path`, `old`, `new`).
    pub const STR_REPLACE: &str = "str_replace";
    /// Repository env: the episode's diff is its answer (no fields).
    pub const SUBMIT: &str = "submit";
}

/// Fields of tool calls.
pub mod field {
    /// The program's source.
    pub const CODE: &str = "code";
    /// Object: global names set before the Python code runs.
    pub const VARS: &str = "vars";
    /// Bool: report the program's top-level variables.
    pub const VARIABLES: &str = "variables";
    /// The program's language (SandboxFusion's names).
    pub const LANGUAGE: &str = "language";
    /// A path in the session's work dir.
    pub const PATH: &str = "path";
    /// A file's content.
    pub const CONTENT: &str = "content";
    /// A shell command.
    pub const COMMAND: &str = "command";
    /// Int: the first line to show.
    pub const START: &str = "start";
    /// Int: the last line to show.
    pub const END: &str = "end";
    /// The string to replace.
    pub const OLD: &str = "old";
    /// Its replacement.
    pub const NEW: &str = "new";
}

/// One tool's shape: its name, required fields and optional fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolShape {
    pub name: &'static str,
    pub required: &'static [&'static str],
    pub optional: &'static [&'static str],
}

/// Every tool the coding envs accept.
pub const TOOLS: &[ToolShape] = &[
    ToolShape {
        name: tool::RUN_PYTHON,
        required: &[field::CODE],
        optional: &[field::VARS, field::VARIABLES],
    },
    ToolShape {
        name: tool::RUN_CODE,
        required: &[field::CODE, field::LANGUAGE],
        optional: &[],
    },
    ToolShape {
        name: tool::WRITE_FILE,
        required: &[field::PATH, field::CONTENT],
        optional: &[],
    },
    ToolShape {
        name: tool::READ_FILE,
        required: &[field::PATH],
        optional: &[],
    },
];

/// Every tool the repository env (`codegym/Repo-v0`) accepts.
pub const REPO_TOOLS: &[ToolShape] = &[
    ToolShape {
        name: tool::BASH,
        required: &[field::COMMAND],
        optional: &[],
    },
    ToolShape {
        name: tool::VIEW,
        required: &[field::PATH],
        optional: &[field::START, field::END],
    },
    ToolShape {
        name: tool::CREATE,
        required: &[field::PATH, field::CONTENT],
        optional: &[],
    },
    ToolShape {
        name: tool::STR_REPLACE,
        required: &[field::PATH, field::OLD, field::NEW],
        optional: &[],
    },
    ToolShape {
        name: tool::SUBMIT,
        required: &[],
        optional: &[],
    },
];

/// A `run_python` call of `code`.
pub fn run_python(code: &str) -> Value {
    json!({ tool::KEY: tool::RUN_PYTHON, field::CODE: code })
}

/// A `run_code` call of `code` in `language`.
pub fn run_code(code: &str, language: &str) -> Value {
    json!({ tool::KEY: tool::RUN_CODE, field::CODE: code, field::LANGUAGE: language })
}

/// Whether `value` is shaped as a tool call (an object with a string [`tool::KEY`]); whether the
/// call is valid is the env's to decide.
pub fn is_tool_call(value: &Value) -> bool {
    value.get(tool::KEY).is_some_and(Value::is_string)
}

/// The contract as the JSON of `contract.json`.
pub fn to_json() -> Value {
    let table = |shapes: &[ToolShape]| -> serde_json::Map<String, Value> {
        shapes
            .iter()
            .map(|t| {
                let shape = json!({ "required": t.required, "optional": t.optional });
                (t.name.to_string(), shape)
            })
            .collect()
    };
    json!({
        "version": VERSION,
        "info_keys": info::ALL,
        "tool_key": tool::KEY,
        "tools": table(TOOLS),
        "repo_tools": table(REPO_TOOLS),
    })
}
