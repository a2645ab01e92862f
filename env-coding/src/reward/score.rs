//! Output checks: pure functions of an [`ExecutionResult`], so they are tested without processes.
//!
//! They compare text, the result's lossily decoded output: output that is valid UTF-8 (all that
//! `print` produces) compares exactly as its bytes would; an invalid byte is U+FFFD, which only a
//! U+FFFD in the expected text matches.

use std::sync::OnceLock;

use env_core::ExecutionResult;
use regex::Regex;
use serde_json::json;

use super::{ComponentScore, MatchMode};

/// Whether `actual` stdout matches `expected` under `mode`.
pub fn stdout_matches(actual: &str, expected: &str, mode: MatchMode) -> bool {
    match mode {
        MatchMode::Exact => strip_trailing(actual) == strip_trailing(expected),
        MatchMode::Normalized => actual.split_whitespace().eq(expected.split_whitespace()),
        MatchMode::CaseInsensitive => actual
            .split_whitespace()
            .map(str::to_lowercase)
            .eq(expected.split_whitespace().map(str::to_lowercase)),
    }
}

/// Trailing whitespace of every line and trailing blank lines removed; `\r\n` read as `\n`.
fn strip_trailing(s: &str) -> String {
    let lines: Vec<&str> = s.lines().map(str::trim_end).collect();
    lines.join("\n").trim_end().to_string()
}

/// Whether the run ended normally with `expected`.
pub fn exit_code_matches(run: &ExecutionResult, expected: i32) -> bool {
    run.exit_code == Some(expected) && !run.timed_out && !run.memory_exceeded
}

fn number_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        #[allow(clippy::expect_used)] // a constant pattern, covered by the tests below
        Regex::new(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?").expect("valid number regex")
    })
}

/// The number a numeric check reads: capture group 1 of the first match of `pattern`, or the last
/// number in `stdout`.
pub fn find_number(stdout: &str, pattern: Option<&Regex>) -> Option<f64> {
    let text = match pattern {
        Some(re) => re.captures(stdout)?.get(1)?.as_str().trim(),
        None => number_regex().find_iter(stdout).last()?.as_str(),
    };
    text.parse().ok()
}

/// `math.isclose` semantics.
pub fn is_close(x: f64, expected: f64, rel_tol: f64, abs_tol: f64) -> bool {
    if x == expected {
        return true;
    }
    let diff = (x - expected).abs();
    diff.is_finite() && diff <= (rel_tol * x.abs().max(expected.abs())).max(abs_tol)
}

fn bool_score(
    kind: &'static str,
    weight: f64,
    ok: bool,
    detail: serde_json::Value,
) -> ComponentScore {
    ComponentScore {
        kind,
        weight,
        score: if ok { 1.0 } else { 0.0 },
        detail,
    }
}

pub fn exit_code(run: &ExecutionResult, expected: i32, weight: f64) -> ComponentScore {
    bool_score(
        "exit_code",
        weight,
        exit_code_matches(run, expected),
        json!({"expected": expected, "actual": run.exit_code, "timed_out": run.timed_out}),
    )
}

pub fn stdout(
    run: &ExecutionResult,
    expected: &str,
    mode: MatchMode,
    weight: f64,
) -> ComponentScore {
    let ok = stdout_matches(&run.stdout, expected, mode);
    bool_score("stdout", weight, ok, json!({"matched": ok}))
}

pub fn contains(
    run: &ExecutionResult,
    text: &str,
    case_insensitive: bool,
    weight: f64,
) -> ComponentScore {
    let ok = if case_insensitive {
        run.stdout.to_lowercase().contains(&text.to_lowercase())
    } else {
        run.stdout.contains(text)
    };
    bool_score("contains", weight, ok, json!({"found": ok}))
}

/// `pattern` was validated when the spec was loaded; an invalid one scores 0 rather than panicking.
pub fn regex(run: &ExecutionResult, pattern: &str, weight: f64) -> ComponentScore {
    let ok = Regex::new(pattern).is_ok_and(|re| re.is_match(&run.stdout));
    bool_score("regex", weight, ok, json!({"matched": ok}))
}

pub fn numeric(
    run: &ExecutionResult,
    expected: f64,
    rel_tol: f64,
    abs_tol: f64,
    pattern: Option<&str>,
    weight: f64,
) -> ComponentScore {
    let re = pattern.and_then(|p| Regex::new(p).ok());
    let found = if pattern.is_some() && re.is_none() {
        None
    } else {
        find_number(&run.stdout, re.as_ref())
    };
    let ok = found.is_some_and(|x| is_close(x, expected, rel_tol, abs_tol));
    bool_score(
        "numeric",
        weight,
        ok,
        json!({"expected": expected, "found": found}),
    )
}

/// Partial credit over stdin/stdout cases: `runs[i]` is the run on case `i`.
pub fn io_cases(
    runs: &[ExecutionResult],
    expected: &[&str],
    mode: MatchMode,
    weight: f64,
) -> ComponentScore {
    let passed: Vec<bool> = runs
        .iter()
        .zip(expected)
        .map(|(run, exp)| exit_code_matches(run, 0) && stdout_matches(&run.stdout, exp, mode))
        .collect();
    let n = expected.len().max(1);
    let score = passed.iter().filter(|p| **p).count() as f64 / n as f64;
    ComponentScore {
        kind: "io_cases",
        weight,
        score,
        detail: json!({"passed": passed, "total": expected.len()}),
    }
}

/// Data tasks (issue 13): the typed output `name` of `run` against `expected` (see
/// [`super::Component::Output`]).
pub fn output(
    run: &ExecutionResult,
    name: &str,
    expected: &serde_json::Value,
    tolerance: f64,
    weight: f64,
) -> ComponentScore {
    use env_core::OutputValue;
    let (ok, detail) = match run.outputs.get(name) {
        None => (
            false,
            json!({"name": name, "expected": expected, "error": "not a declared output of the task"}),
        ),
        Some(OutputValue::Error(e)) => (
            false,
            json!({"name": name, "expected": expected, "error": e}),
        ),
        Some(OutputValue::Value(v)) => (
            output_matches(v, expected, tolerance),
            json!({"name": name, "expected": expected, "actual": v}),
        ),
    };
    bool_score("output", weight, ok, detail)
}

/// Numbers within `tolerance` (absolute, plus 1e-9 relative), datetimes within `tolerance`
/// seconds, a file output by its text, anything else exactly.
fn output_matches(
    actual: &serde_json::Value,
    expected: &serde_json::Value,
    tolerance: f64,
) -> bool {
    use serde_json::Value as J;
    match (actual, expected) {
        (J::Number(a), J::Number(e)) => match (a.as_f64(), e.as_f64()) {
            (Some(a), Some(e)) => is_close(a, e, 1e-9, tolerance),
            _ => false,
        },
        (J::String(a), J::String(e)) if a == e => true,
        (J::String(a), J::String(e)) => {
            match (
                crate::data::outputs::parse_datetime(a),
                crate::data::outputs::parse_datetime(e),
            ) {
                (Some((_, a)), Some((_, e))) => (a - e).abs() <= tolerance,
                _ => false,
            }
        }
        (J::Object(file), J::String(e)) => file.get("text").and_then(J::as_str) == Some(e),
        (a, e) => a == e,
    }
}

/// Python's appended tests, run by the unit-test harness outside the program's process: the same
/// statuses as a run in its process ([`appended_tests`]), from the harness's report.
pub fn appended_tests_in_harness(
    report: &super::harness::TestReport,
    weight: f64,
) -> ComponentScore {
    let failure = report.error.clone().or_else(|| {
        report
            .tests
            .iter()
            .find(|t| !t.passed)
            .and_then(|t| t.error.clone())
    });
    let timed_out = failure.as_deref().is_some_and(|e| e.contains("timed out"));
    let status = if report.syntax_error {
        "SyntaxError"
    } else if report.score() == 1.0 {
        "OK"
    } else if timed_out {
        "Timeout"
    } else {
        "Exception"
    };
    ComponentScore {
        kind: "appended_tests",
        weight,
        score: if status == "OK" { 1.0 } else { 0.0 },
        detail: json!({"status": status, "error": failure, "tests_process": "separate"}),
    }
}

/// Whether a failed run failed to compile (the traceback ends with a `SyntaxError` or a subclass, or
/// a compiled language's compile step failed).
/// Issue 14 (MultiPL-E): the program with its appended tests passes when it ran to exit 0 within
/// its limits and, with a `fail_marker`, printed no line containing it. The detail names the
/// status MultiPL-E would report (`OK`, `SyntaxError`, `Exception`, `Timeout`).
pub fn appended_tests(
    run: Option<&ExecutionResult>,
    fail_marker: Option<&str>,
    weight: f64,
) -> ComponentScore {
    let Some(run) = run else {
        return ComponentScore {
            kind: "appended_tests",
            weight,
            score: 0.0,
            detail: json!({"status": "NotRun", "error": "the tests did not run"}),
        };
    };
    let marked = fail_marker
        .filter(|m| !m.is_empty())
        .is_some_and(|m| run.stdout.contains(m) || run.stderr.contains(m));
    let status = if run.compile_failed() || is_syntax_error(run) {
        "SyntaxError"
    } else if run.timed_out {
        "Timeout"
    } else if run.exit_code != Some(0) || run.memory_exceeded || marked {
        "Exception"
    } else {
        "OK"
    };
    let tail = |s: &str| -> String {
        let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
        let start = lines.len().saturating_sub(5);
        let text = lines[start..].join("\n");
        text.chars().take(1000).collect()
    };
    let stderr = match run.compile.as_deref() {
        Some(c) if run.compile_failed() => tail(&c.stderr),
        _ => tail(&run.stderr),
    };
    ComponentScore {
        kind: "appended_tests",
        weight,
        score: if status == "OK" { 1.0 } else { 0.0 },
        detail: json!({"status": status, "exit_code": run.exit_code, "signal": run.signal,
                       "stderr": stderr}),
    }
}

pub fn is_syntax_error(run: &ExecutionResult) -> bool {
    // Issue 14: a compiled language's compile error is its syntax error.
    if run.compile_failed() {
        return true;
    }
    if run.exit_code == Some(0) || run.timed_out {
        return false;
    }
    run.stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .is_some_and(|last| {
            ["SyntaxError", "IndentationError", "TabError"]
                .iter()
                .any(|k| last.starts_with(&format!("{k}:")) || last == *k)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stdout: &str, code: i32) -> ExecutionResult {
        ExecutionResult {
            exit_code: Some(code),
            stdout: stdout.into(),
            ..Default::default()
        }
    }

    #[test]
    fn match_modes() {
        assert!(stdout_matches("a \nb\n\n\n", "a\nb", MatchMode::Exact));
        assert!(stdout_matches("a\r\nb\r\n", "a\nb\n", MatchMode::Exact));
        assert!(!stdout_matches(" a\nb", "a\nb", MatchMode::Exact));
        assert!(!stdout_matches("a  b", "a b", MatchMode::Exact));
        assert!(stdout_matches(
            " a  b\n\tc ",
            "a b c",
            MatchMode::Normalized
        ));
        assert!(!stdout_matches("A b", "a b", MatchMode::Normalized));
        assert!(stdout_matches("A  B", "a b", MatchMode::CaseInsensitive));
        assert!(!stdout_matches("a b c", "a b", MatchMode::CaseInsensitive));
    }

    #[test]
    fn exit_code_needs_a_normal_end() {
        assert_eq!(exit_code(&run("", 0), 0, 1.0).score, 1.0);
        assert_eq!(exit_code(&run("", 1), 0, 1.0).score, 0.0);
        let mut r = run("", 0);
        r.timed_out = true;
        assert_eq!(exit_code(&r, 0, 1.0).score, 0.0);
        let killed = ExecutionResult {
            exit_code: None,
            signal: Some(9),
            ..Default::default()
        };
        assert_eq!(exit_code(&killed, 0, 1.0).score, 0.0);
    }

    #[test]
    fn substring_and_regex() {
        let r = run("Result: 338350\n", 0);
        assert_eq!(contains(&r, "Result: 338350", false, 1.0).score, 1.0);
        assert_eq!(contains(&r, "result: 338350", false, 1.0).score, 0.0);
        assert_eq!(contains(&r, "result: 338350", true, 1.0).score, 1.0);
        assert_eq!(regex(&r, r"^Result: \d+$", 1.0).score, 0.0);
        assert_eq!(regex(&r, r"(?m)^Result: \d+$", 1.0).score, 1.0);
        assert_eq!(regex(&r, "(", 1.0).score, 0.0);
    }

    #[test]
    fn numeric_tolerance() {
        assert_eq!(find_number("a is 1.25 and b is 2.5", None), Some(2.5));
        assert_eq!(find_number("x=-1.5e3", None), Some(-1500.0));
        assert_eq!(find_number("no numbers", None), None);
        let re = Regex::new(r"a is (\S+)").unwrap();
        assert_eq!(find_number("a is 1.25 and b is 2.5", Some(&re)), Some(1.25));
        let r = run("area = 3.1415927\n", 0);
        assert_eq!(
            numeric(&r, std::f64::consts::PI, 1e-6, 0.0, None, 1.0).score,
            1.0
        );
        assert_eq!(
            numeric(&r, std::f64::consts::PI, 1e-9, 0.0, None, 1.0).score,
            0.0
        );
        assert_eq!(numeric(&r, 3.0, 0.0, 0.2, None, 1.0).score, 1.0);
        assert_eq!(
            numeric(&run("nothing", 0), 3.0, 0.0, 0.2, None, 1.0).score,
            0.0
        );
        assert!(!is_close(f64::NAN, 1.0, 1.0, 1.0));
        assert!(!is_close(f64::INFINITY, 1.0, 1.0, 1.0));
    }

    #[test]
    fn io_cases_partial_credit() {
        let runs = [run("3\n", 0), run("wrong", 0), run("7", 1)];
        let s = io_cases(&runs, &["3", "5", "7"], MatchMode::Exact, 1.0);
        assert!((s.score - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.detail["passed"], json!([true, false, false]));
    }

    #[test]
    fn syntax_errors() {
        let mut r = run("", 1);
        r.stderr = "  File \"main.py\", line 1\n    def f(\n         ^\nSyntaxError: '(' was never closed\n".into();
        assert!(is_syntax_error(&r));
        r.stderr = "Traceback...\nIndentationError: unexpected indent\n".into();
        assert!(is_syntax_error(&r));
        r.stderr = "Traceback...\nValueError: SyntaxError: no\n".into();
        assert!(!is_syntax_error(&r));
    }
}
