//! AutoCoder records (schema 2, issue 13): the stage of each model call (plan, solution, tests,
//! diagnosis, fix), the runs of the model's own tests, and the episode's summary.
//!
//! The model's tests are a signal recorded beside the reward, never part of it: the reward comes only
//! from the task's hidden checks run on the final solution (the episode's last env step).

use serde::{Deserialize, Serialize};

/// A stage of the AutoCoder loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// A plan in prose.
    Plan,
    /// The solution: code and its requirements.
    Solution,
    /// A pytest suite for the solution.
    Tests,
    /// Why the model's tests failed ([`Diagnosis`]).
    Diagnose,
    /// The fix the diagnosis called for: new code, added requirements or corrected tests.
    Fix,
}

/// The model's verdict on a failed test run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Diagnosis {
    /// The solution is wrong: the code is patched.
    Logic,
    /// A package is missing: requirements are added.
    Environment,
    /// The test is wrong: the tests are fixed.
    Test,
}

/// What one AutoCoder model call was and what it produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageRecord {
    pub stage: Stage,
    /// The answer as parsed against the stage's JSON schema (absent when it could not be parsed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
    /// Whether the call asked for `response_format: json_schema`; `false` after the endpoint
    /// refused it (the answer is then a fenced JSON block in the text).
    pub structured: bool,
    /// Why the answer could not be used (not JSON, or not the schema's shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parse_error: Option<String>,
    /// The diagnosis this call made (diagnose) or acted on (fix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<Diagnosis>,
    /// The run of the model's tests that followed this call's output (tests and fix stages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_tests: Option<ModelTestRun>,
}

/// One run of the model's pytest suite against its solution, in the sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelTestRun {
    pub passed: u32,
    pub failed: u32,
    /// Collection and setup errors.
    pub errors: u32,
    /// `passed / (passed + failed + errors)`; 0 when nothing was collected.
    pub pass_rate: f64,
    /// Why the suite could not run at all (a refused package, a crash before pytest reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_run: Option<String>,
}

impl ModelTestRun {
    /// Whether every collected test passed (and at least one was collected).
    pub fn all_passed(&self) -> bool {
        self.not_run.is_none() && self.failed == 0 && self.errors == 0 && self.passed > 0
    }
}

/// The end state of an AutoCoder episode.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AutoCoderSummary {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// The final solution (what the hidden checks scored).
    pub code: String,
    pub requirements: Vec<String>,
    /// The model's final test suite.
    pub tests: String,
    /// Runs of the model's tests.
    pub test_runs: u32,
    /// Pass rate of the last run of the model's tests (absent when they never ran): a separate
    /// signal, never part of the reward.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_tests_pass_rate: Option<f64>,
    /// The diagnoses made, in order.
    #[serde(default)]
    pub diagnoses: Vec<Diagnosis>,
    /// Whether the endpoint refused `response_format` and fenced JSON was used instead.
    #[serde(default)]
    pub fenced_json_fallback: bool,
}
