//! Reward specifications (JSON, versioned) and their evaluation.
//!
//! A task carries one [`RewardSpec`]: weighted components (exit code, stdout match, substring, regex,
//! numeric tolerance, stdin/stdout cases, unit tests) and optional penalties. The reward is the
//! weighted mean of the component scores, each in [0, 1], minus the penalties that apply; a task is
//! *solved* when every component scores 1.
//!
//! Output checks ([`score`]) are pure functions of an [`ExecutionResult`](env_core::ExecutionResult);
//! unit tests run in a separate fresh process under a harness whose result record is authenticated with
//! a host-generated nonce ([`harness`]); [`run`] drives the sandbox.

pub mod compiled;
pub mod harness;
mod program;
pub mod run;
pub mod score;
pub mod splice;
pub(crate) mod strict;

use serde::{Deserialize, Serialize};

/// The reward-spec format this crate reads and writes.
pub const REWARD_SPEC_VERSION: u32 = 1;

/// How a reward is computed for one task.
///
/// ```json
/// {"version": 1,
///  "components": [{"type": "exit_code"}, {"type": "contains", "text": "Result: 338350"}],
///  "penalties": {"timeout": 0.1}}
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct RewardSpec {
    /// Must be [`REWARD_SPEC_VERSION`].
    pub version: u32,
    pub components: Vec<Component>,
    #[serde(default)]
    pub penalties: Penalties,
}

/// Subtracted from the reward when the condition holds (for the program run, or the test run when
/// there is no plain run).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", default, deny_unknown_fields)]
pub struct Penalties {
    /// The program hit its CPU or wall-clock limit.
    pub timeout: f64,
    /// The program does not compile.
    pub syntax_error: f64,
}

/// How stdout is compared with an expected text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchMode {
    /// Equal after stripping trailing whitespace of every line and trailing blank lines.
    #[default]
    Exact,
    /// Equal as sequences of whitespace-separated tokens.
    Normalized,
    /// `normalized`, ignoring case.
    CaseInsensitive,
}

/// One stdin/stdout case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct IoCase {
    #[serde(default)]
    pub stdin: String,
    pub stdout: String,
}

fn one() -> f64 {
    1.0
}

fn default_rel_tol() -> f64 {
    1e-6
}

/// One scored check. Every kind has a `weight` (default 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    remote = "Self",
    tag = "type",
    rename_all = "snake_case",
    deny_unknown_fields
)]
pub enum Component {
    /// The program exits with `expected` (default 0) within its limits.
    ExitCode {
        #[serde(default)]
        expected: i32,
        #[serde(default = "one")]
        weight: f64,
    },
    /// Stdout equals `expected` under `match`.
    Stdout {
        expected: String,
        #[serde(default, rename = "match")]
        mode: MatchMode,
        #[serde(default = "one")]
        weight: f64,
    },
    /// Stdout contains `text`.
    Contains {
        text: String,
        #[serde(default)]
        case_insensitive: bool,
        #[serde(default = "one")]
        weight: f64,
    },
    /// Stdout matches the regular expression (Rust `regex` syntax, searched anywhere).
    Regex {
        pattern: String,
        #[serde(default = "one")]
        weight: f64,
    },
    /// A number printed by the program is within tolerance of `expected`
    /// (`|x - e| <= max(rel_tol * max(|x|, |e|), abs_tol)`, as Python's `math.isclose`). The number is
    /// capture group 1 of `pattern` when given, else the last number in stdout.
    Numeric {
        expected: f64,
        #[serde(default = "default_rel_tol")]
        rel_tol: f64,
        #[serde(default)]
        abs_tol: f64,
        #[serde(default)]
        pattern: Option<String>,
        #[serde(default = "one")]
        weight: f64,
    },
    /// The program run once per case with the case's stdin; the score is the fraction of cases whose
    /// run exits 0 and whose stdout matches.
    IoCases {
        cases: Vec<IoCase>,
        #[serde(default, rename = "match")]
        mode: MatchMode,
        #[serde(default = "one")]
        weight: f64,
    },
    /// HumanEval style: `code` defines `check(candidate)`, called with the program's `entry_point`.
    /// Every top-level statement of `check` containing an `assert` (or calling a function of the
    /// tests that asserts) is one test; any other statement that fails is a failed test too.
    ///
    /// The tests see the program only through `entry_point` and `candidate_names`: every other
    /// name they use is Python's builtin or the task's own, from `prelude` (the prompt's helpers,
    /// run in the tests' process from the task, never from the program's copy).
    CheckFunction {
        code: String,
        entry_point: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        prelude: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        candidate_names: Option<Vec<String>>,
        #[serde(default = "one")]
        weight: f64,
    },
    /// MBPP style: each string is one test (`assert f(x) == y`), run after `setup`. The tests see
    /// of the program the names in `candidate_names`, or when it is absent every name they load
    /// that neither they, `setup` nor Python's builtins define.
    Asserts {
        asserts: Vec<String>,
        #[serde(default)]
        setup: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        candidate_names: Option<Vec<String>>,
        #[serde(default = "one")]
        weight: f64,
    },
    // Data tasks (issue 13).
    /// The typed output `name` of the plain run (see [`crate::data`]) equals `expected`: numbers
    /// (and `timedelta` seconds) within `tolerance` (absolute; relative 1e-9 besides), datetimes
    /// within `tolerance` seconds, strings and bools exactly, a `file` output by its text. One
    /// component per output gives partial credit per output; a missing or malformed output scores 0.
    Output {
        name: String,
        expected: serde_json::Value,
        #[serde(default)]
        tolerance: f64,
        #[serde(default = "one")]
        weight: f64,
    },
    // Issue 14: the stdin/stdout judge.
    /// Competitive-programming judging in any language: `tests` (`input`/`output`), a `checker`,
    /// per-test `time_limit_ms`/`memory_limit_mb`, `partial` credit or stop at the first failure;
    /// per-test verdicts in the detail (see [`crate::judge`]).
    Judge(crate::judge::JudgeSpec),
    /// HumanEval+ / MBPP+ (EvalPlus): the program's function called on each input, its outputs
    /// compared on the host with the reference solution's (computed once, in the sandbox), with
    /// `atol` for floats; `tests` says whether the plus inputs count (see [`crate::differential`]).
    Differential(crate::differential::DiffSpec),
    /// MultiPL-E: `code` (tests in the program's language) appended to the program, which passes
    /// when the whole runs to exit 0 within its limits (and, with `fail_marker`, prints no line
    /// containing it, as MultiPL-E's Perl evaluator requires). A whole program's closing braces
    /// that the tests close themselves are taken out first ([`splice`]).
    ///
    /// In Python the tests do not share the program's process: they run in the unit-test
    /// harness's (`harness.py`), calling the program's functions across its process boundary, so
    /// leaving early, patching builtins or lying objects cannot pass them. `in_process: true` (or a
    /// `fail_marker`, which reads the program's own output) keeps MultiPL-E's way, which a program
    /// can fake: `codegym audit` reports such tasks.
    AppendedTests {
        code: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fail_marker: Option<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        in_process: bool,
        #[serde(default = "one")]
        weight: f64,
    },
}

// Structs from JSON objects only (`strict.rs`).
strict::object_only!(RewardSpec);
strict::object_only!(Penalties);
strict::object_only!(IoCase);
strict::object_only!(Component);

impl Component {
    /// The `type` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            Component::ExitCode { .. } => "exit_code",
            Component::Stdout { .. } => "stdout",
            Component::Contains { .. } => "contains",
            Component::Regex { .. } => "regex",
            Component::Numeric { .. } => "numeric",
            Component::IoCases { .. } => "io_cases",
            Component::CheckFunction { .. } => "check_function",
            Component::Asserts { .. } => "asserts",
            Component::Output { .. } => "output",
            Component::Judge(_) => "judge",
            Component::Differential(_) => "differential",
            Component::AppendedTests { .. } => "appended_tests",
        }
    }

    pub fn weight(&self) -> f64 {
        match self {
            Component::ExitCode { weight, .. }
            | Component::Stdout { weight, .. }
            | Component::Contains { weight, .. }
            | Component::Regex { weight, .. }
            | Component::Numeric { weight, .. }
            | Component::IoCases { weight, .. }
            | Component::CheckFunction { weight, .. }
            | Component::Asserts { weight, .. }
            | Component::Output { weight, .. }
            | Component::AppendedTests { weight, .. } => *weight,
            Component::Judge(j) => j.weight,
            Component::Differential(d) => d.weight,
        }
    }

    /// Whether the score comes from one plain run of the program (no stdin).
    pub fn uses_plain_run(&self) -> bool {
        matches!(
            self,
            Component::ExitCode { .. }
                | Component::Stdout { .. }
                | Component::Contains { .. }
                | Component::Regex { .. }
                | Component::Numeric { .. }
                | Component::Output { .. }
        )
    }
}

impl RewardSpec {
    /// A spec from its JSON value, validated. A type error names its field by its path
    /// (`components[1].expected: invalid type: ...`), as a task author needs to find it.
    pub fn from_json(value: serde_json::Value) -> Result<Self, String> {
        let spec: RewardSpec = strict::deserialize(value)?;
        spec.validate()?;
        Ok(spec)
    }

    /// Checks what serde cannot: the version, weights, regexes, non-empty test lists.
    pub fn validate(&self) -> Result<(), String> {
        if self.version != REWARD_SPEC_VERSION {
            return Err(format!(
                "unsupported reward spec version {} (this build reads version {REWARD_SPEC_VERSION})",
                self.version
            ));
        }
        if self.components.is_empty() {
            return Err("reward spec has no components".into());
        }
        let mut total = 0.0;
        for c in &self.components {
            let w = c.weight();
            if !w.is_finite() || w < 0.0 {
                return Err(format!(
                    "{} component: weight must be finite and >= 0",
                    c.kind()
                ));
            }
            total += w;
            match c {
                Component::Regex { pattern, .. } => {
                    regex::Regex::new(pattern).map_err(|e| format!("regex component: {e}"))?;
                }
                Component::Numeric {
                    expected,
                    rel_tol,
                    abs_tol,
                    pattern,
                    ..
                } => {
                    if !expected.is_finite() || *rel_tol < 0.0 || *abs_tol < 0.0 {
                        return Err(
                            "numeric component: expected must be finite, tolerances >= 0".into(),
                        );
                    }
                    if let Some(p) = pattern {
                        let re =
                            regex::Regex::new(p).map_err(|e| format!("numeric component: {e}"))?;
                        if re.captures_len() < 2 {
                            return Err("numeric component: pattern needs a capture group".into());
                        }
                    }
                }
                Component::Output {
                    name,
                    expected,
                    tolerance,
                    ..
                } => {
                    crate::data::outputs::check_name(name)
                        .map_err(|e| format!("output component: {e}"))?;
                    if expected.is_null() || !tolerance.is_finite() || *tolerance < 0.0 {
                        return Err(format!(
                            "output component {name:?}: expected must not be null, tolerance finite and >= 0"
                        ));
                    }
                }
                Component::IoCases { cases, .. } if cases.is_empty() => {
                    return Err("io_cases component has no cases".into());
                }
                Component::Asserts { asserts, .. } if asserts.is_empty() => {
                    return Err("asserts component has no asserts".into());
                }
                Component::CheckFunction { entry_point, .. }
                    if !harness::is_identifier(entry_point) =>
                {
                    return Err(format!(
                        "check_function: entry_point {entry_point:?} is not an identifier"
                    ));
                }
                Component::CheckFunction {
                    candidate_names: Some(names),
                    ..
                }
                | Component::Asserts {
                    candidate_names: Some(names),
                    ..
                } if !names.iter().all(|n| harness::is_identifier(n)) => {
                    return Err(format!(
                        "{}: candidate_names must be identifiers: {names:?}",
                        c.kind()
                    ));
                }
                Component::Judge(j) => j.validate()?,
                Component::Differential(d) => d.validate()?,
                Component::AppendedTests { code, .. } if code.trim().is_empty() => {
                    return Err("appended_tests component has no tests".into());
                }
                _ => {}
            }
        }
        if total <= 0.0 {
            return Err("reward spec weights sum to zero".into());
        }
        let p = &self.penalties;
        if !(p.timeout.is_finite()
            && p.syntax_error.is_finite()
            && p.timeout >= 0.0
            && p.syntax_error >= 0.0)
        {
            return Err("penalties must be finite and >= 0".into());
        }
        Ok(())
    }

    /// Whether the score reads the program's plain run (no stdin): an output component reads it,
    /// and a penalty counts its timeout or syntax error. A caller that needs no observation runs
    /// the program plainly only then ([`crate::Submission::ScoreOnly`]), for the same reward.
    pub fn needs_plain_run(&self) -> bool {
        self.components.iter().any(Component::uses_plain_run)
            || self.penalties.timeout > 0.0
            || self.penalties.syntax_error > 0.0
    }
}

/// The score of one component, with what explains it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComponentScore {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub weight: f64,
    /// In [0, 1].
    pub score: f64,
    /// Kind-specific explanation (per-case and per-test results, the number found, ...).
    pub detail: serde_json::Value,
}

/// The evaluated reward of one program.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RewardOutcome {
    /// `base - sum(penalties)`.
    pub reward: f64,
    /// Weighted mean of the component scores, in [0, 1].
    pub base: f64,
    pub solved: bool,
    pub components: Vec<ComponentScore>,
    /// Penalties that applied, by name.
    pub penalties: serde_json::Map<String, serde_json::Value>,
    /// Runs that timed out on the wall clock under their CPU limit, and their re-runs
    /// (`crate::timeouts`); in the breakdown only when there were any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeout_reruns: Vec<crate::timeouts::TimeoutRerun>,
}

impl RewardOutcome {
    /// Combines component scores and penalties.
    pub fn combine(components: Vec<ComponentScore>, penalties: Vec<(&'static str, f64)>) -> Self {
        let total: f64 = components.iter().map(|c| c.weight).sum();
        let base = if total > 0.0 {
            components.iter().map(|c| c.weight * c.score).sum::<f64>() / total
        } else {
            0.0
        };
        let solved = !components.is_empty() && components.iter().all(|c| c.score >= 1.0);
        let applied: Vec<_> = penalties.into_iter().filter(|(_, p)| *p > 0.0).collect();
        let reward = base - applied.iter().map(|(_, p)| p).sum::<f64>();
        RewardOutcome {
            reward,
            base,
            solved,
            components,
            penalties: applied
                .into_iter()
                .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
                .collect(),
            timeout_reruns: Vec::new(),
        }
    }

    /// The outcome with the false timeouts its runs met.
    pub fn with_timeout_reruns(mut self, reruns: Vec<crate::timeouts::TimeoutRerun>) -> Self {
        self.timeout_reruns = reruns;
        self
    }

    /// A timeout in this verdict may be the machine's load, not the program's (a false timeout
    /// that was not re-run, or whose re-run timed out again under its CPU limit): such a verdict
    /// is never shared with identical submissions.
    pub fn has_unproven_timeout(&self) -> bool {
        self.timeout_reruns.iter().any(|t| t.unproven())
    }

    /// `info["reward_breakdown"]`.
    pub fn breakdown(&self) -> serde_json::Value {
        let mut b = serde_json::json!({
            "reward": self.reward,
            "base": self.base,
            "components": self.components,
            "penalties": self.penalties,
        });
        if !self.timeout_reruns.is_empty() {
            b["timeout_reruns"] = serde_json::json!(self.timeout_reruns);
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_and_defaults() {
        let s = RewardSpec::from_json(json!({"version": 1, "components": [
            {"type": "exit_code"},
            {"type": "stdout", "expected": "x", "match": "normalized", "weight": 2},
            {"type": "numeric", "expected": 2.5}
        ]}))
        .unwrap();
        assert_eq!(
            s.components[0],
            Component::ExitCode {
                expected: 0,
                weight: 1.0
            }
        );
        assert_eq!(s.components[1].weight(), 2.0);
        assert!(s.needs_plain_run());
    }

    #[test]
    fn rejects_bad_specs() {
        for bad in [
            json!({"version": 2, "components": [{"type": "exit_code"}]}),
            json!({"version": 1, "components": []}),
            json!({"version": 1, "components": [{"type": "exit_code", "bogus": 1}]}),
            json!({"version": 1, "components": [{"type": "nope"}]}),
            json!({"version": 1, "components": [{"type": "regex", "pattern": "("}]}),
            json!({"version": 1, "components": [{"type": "exit_code", "weight": -1}]}),
            json!({"version": 1, "components": [{"type": "io_cases", "cases": []}]}),
            json!({"version": 1, "components": [{"type": "check_function", "code": "", "entry_point": "a b"}]}),
            json!({"version": 1, "components": [{"type": "numeric", "expected": 1, "pattern": "\\d+"}]}),
            json!({"components": [{"type": "exit_code"}]}),
        ] {
            assert!(RewardSpec::from_json(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn combine_weights_and_penalties() {
        let c = |score, weight| ComponentScore {
            kind: "x",
            weight,
            score,
            detail: json!(null),
        };
        let o = RewardOutcome::combine(vec![c(1.0, 1.0), c(0.5, 3.0)], vec![("timeout", 0.0)]);
        assert!((o.base - 0.625).abs() < 1e-12);
        assert!(!o.solved);
        assert!(o.penalties.is_empty());
        let o = RewardOutcome::combine(vec![c(1.0, 1.0)], vec![("syntax_error", 0.25)]);
        assert!(o.solved);
        assert!((o.reward - 0.75).abs() < 1e-12);
        assert_eq!(o.breakdown()["penalties"]["syntax_error"], json!(0.25));
    }
}
