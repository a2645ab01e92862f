//! The program a reward scores: its source, files, data, language and (for the plain run) how it
//! reports and which host tools it may call; and what every scoring run of it executes.

use super::harness::CANDIDATE_FILE;
use crate::data::TaskData;
use codegym_sandbox::lang::Language;
use codegym_sandbox::{ReportSpec, ToolHost};

/// A program to score: `main.py` plus files (session mode accumulates both).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Program {
    pub source: String,
    pub files: Vec<(String, Vec<u8>)>,
    /// Data tasks (issue 13): the task's input files, inputs and declared outputs, given to its
    /// runs (the unit-test harness gets the files only).
    pub data: TaskData,
    /// Issue 14: the source's language (default Python). Unit-test components (`check_function`,
    /// `asserts`) need Python; output checks, `io_cases` and `judge` run any language.
    pub language: Language,
    /// Issue 12: how the plain run (the observation) reports, with the vars it injects. Scoring
    /// runs get the same vars through [`vars_prologue`], so they run the same program.
    pub report: Option<ReportSpec>,
    /// Issue 12: host tools of the plain run (never of scoring runs).
    pub tools: Option<ToolHost>,
}

/// Python that sets `vars` as globals, one line (session mode's replayed program and scoring runs).
pub fn vars_prologue(vars: &serde_json::Map<String, serde_json::Value>) -> String {
    if vars.is_empty() {
        return String::new();
    }
    // A JSON string is a valid Python string literal (serde_json never writes `\/`).
    let text = serde_json::Value::Object(vars.clone()).to_string();
    let literal = serde_json::Value::String(text).to_string();
    format!("globals().update(__import__('json').loads({literal}))\n")
}

impl Program {
    pub fn new(source: impl Into<String>) -> Self {
        Program {
            source: source.into(),
            files: Vec::new(),
            data: TaskData::default(),
            language: Language::Python,
            report: None,
            tools: None,
        }
    }

    /// The source the scoring runs execute: the injected vars' prologue, then the program.
    pub(super) fn scored_source(&self) -> String {
        match &self.report {
            // The prologue is Python: other languages take no vars (refused before they get here).
            Some(r) if !r.vars.is_empty() && self.language == Language::Python => {
                format!("{}{}", vars_prologue(&r.vars), self.source)
            }
            _ => self.source.clone(),
        }
    }

    /// Issue 14: the same program in `language`.
    pub fn in_language(mut self, language: Language) -> Self {
        self.language = language;
        self
    }

    /// Files except the names the runs reserve (`main.py`, and the harness's candidate file).
    pub(super) fn extra_files(&self) -> impl Iterator<Item = &(String, Vec<u8>)> {
        self.files.iter().filter(|(p, _)| {
            let p = p.trim_start_matches("./");
            p != "main.py" && p != CANDIDATE_FILE
        })
    }
}
