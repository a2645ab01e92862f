//! The unit-test harness: how tests run without the program being able to fake a pass.
//!
//! The harness (`harness.py`) is `main.py` of a fresh execution; the candidate is `solution.py`.
//! Its first act (`candidate.py`, shared with the differential runner) is to fork the candidate into
//! a process of its own, whose stdin, stdout and stderr are `/dev/null`, and to make its own process
//! non-dumpable (the candidate cannot read its memory through `/proc`). Only then does it read the
//! tests and a per-execution random nonce from stdin. The candidate is called through pipes with
//! plain data only (the codec, `plain_codec.py`): its functions and objects stay in its process,
//! and values it returns are copied into exact builtin types before any comparison, so an object
//! whose `__eq__` is always true fails. Each call has a deadline that the tests' process enforces:
//! the candidate's own alarm fails a slow test, and a candidate that switched it off is killed a
//! second later (its later calls fail).
//!
//! After all tests ran, the harness writes one record `"<nonce> <json>"` to a saved duplicate of
//! the original stdout and ends with `os._exit(0)`. The host accepts only a record carrying its
//! nonce and covering every test, so: `sys.exit(0)` before the asserts is a load error (it is
//! caught), `os._exit(0)` or a killed harness leaves no record, printing the expected text or a fake
//! record goes nowhere (and lacks the nonce), and monkey-patched `print`/`sys.stdout`/builtins or
//! walked frames are the candidate's own process's, never the tests'. A harness that cannot make
//! itself non-dumpable says so under the nonce before any candidate code runs
//! ([`harness_failure`]): a machinery failure, never a verdict.
//!
//! A first run of a suite also offers the tests it compiled (before any candidate code ran) in its
//! record; the host hands them to the suite's later runs ([`super::compiled`]).

use rand::RngCore;
use serde::Deserialize;
use serde_json::json;

/// The harness source (`main.py` of a test run): the plain-data codec and the candidate's process
/// (`candidate.py`: the fork, the pipe protocol, the call with a deadline), which the differential
/// runner shares, then the harness itself.
pub const HARNESS_SOURCE: &str = concat!(
    include_str!("plain_codec.py"),
    include_str!("candidate.py"),
    include_str!("names.py"),
    include_str!("harness.py")
);

/// File name of the candidate program in a test run.
pub const CANDIDATE_FILE: &str = "solution.py";

/// Which tests a harness run executes.
#[derive(Debug, Clone, PartialEq)]
pub enum TestSuite<'a> {
    /// HumanEval: `code` defines `check(candidate)`; `prelude` is the task's own code the tests
    /// may call (the prompt's helpers).
    Check {
        code: &'a str,
        entry_point: &'a str,
        prelude: &'a str,
        candidate_names: Option<&'a [String]>,
    },
    /// MBPP: one test per assert string, after `setup`.
    Asserts {
        asserts: &'a [String],
        setup: &'a str,
        candidate_names: Option<&'a [String]>,
    },
}

/// One prepared harness run: the stdin to send and the nonce to expect back.
#[derive(Debug, Clone)]
pub struct HarnessInput {
    pub nonce: String,
    pub stdin: Vec<u8>,
    /// Number of tests the record must cover (`None`: decided by the harness, for `check`).
    pub expected_tests: Option<usize>,
    /// The suite's key among the compiled suites ([`super::compiled`]).
    pub suite: [u8; 32],
}

/// A fresh 128-bit nonce, hex (also the differential runner's, `differential/`).
pub fn fresh_nonce() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Builds the stdin of a harness run with a fresh 128-bit nonce (and the suite compiled, when an
/// earlier run of it offered its copy).
pub fn prepare(suite: &TestSuite<'_>, per_test_timeout_s: f64) -> HarnessInput {
    let nonce = fresh_nonce();
    let (mut config, expected_tests) = match suite {
        TestSuite::Check {
            code,
            entry_point,
            prelude,
            candidate_names,
        } => (
            json!({"style": "check", "code": code, "entry_point": entry_point,
                   "prelude": prelude, "candidate_names": candidate_names}),
            None,
        ),
        TestSuite::Asserts {
            asserts,
            setup,
            candidate_names,
        } => (
            json!({"style": "asserts", "asserts": asserts, "setup": setup,
                   "candidate_names": candidate_names}),
            Some(asserts.len()),
        ),
    };
    // The key: the suite alone (built in one fixed order, so one suite gives one text).
    let key = super::compiled::key(&config.to_string());
    config["per_test_timeout"] = json!(per_test_timeout_s);
    if let Some(compiled) = super::compiled::get(&key) {
        config["compiled"] = json!(&*compiled);
    }
    let mut stdin = nonce.clone().into_bytes();
    stdin.push(b'\n');
    stdin.extend_from_slice(config.to_string().as_bytes());
    HarnessInput {
        nonce,
        stdin,
        expected_tests,
        suite: key,
    }
}

/// One test's result as reported by the harness.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
pub struct TestResult {
    pub name: String,
    pub passed: bool,
    pub error: Option<String>,
}

/// What a harness run established.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TestReport {
    pub tests: Vec<TestResult>,
    /// Why no test could pass: the candidate did not compile, failed to load, or no valid record came
    /// back (killed, `os._exit`, timeout).
    pub error: Option<String>,
    /// The candidate did not compile.
    pub syntax_error: bool,
}

impl TestReport {
    pub fn passed(&self) -> usize {
        self.tests.iter().filter(|t| t.passed).count()
    }

    /// Fraction of tests passed; 0 when there is no test or a fatal error.
    pub fn score(&self) -> f64 {
        if self.error.is_some() || self.tests.is_empty() {
            0.0
        } else {
            self.passed() as f64 / self.tests.len() as f64
        }
    }

    pub fn detail(&self) -> serde_json::Value {
        json!({"passed": self.passed(), "total": self.tests.len(), "tests": self.tests, "error": self.error})
    }
}

#[derive(Deserialize)]
struct Record {
    v: u32,
    tests: Vec<TestResult>,
    #[serde(default)]
    compile_error: Option<String>,
    #[serde(default)]
    load_error: Option<String>,
    #[serde(default)]
    test_error: Option<String>,
    /// The suite compiled, offered for later runs of it ([`super::compiled`]).
    #[serde(default)]
    compiled: Option<String>,
}

/// Why the harness could not run the tests at all (it could not keep the candidate away from the
/// tests' process), from a record carrying the run's nonce: a failure of the machinery, which the
/// caller turns into an error, never a reward.
pub fn harness_failure(input: &HarnessInput, stdout: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Failure {
        harness_error: String,
    }
    let prefix = format!("{} ", input.nonce);
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .next_back()
        .and_then(|r| serde_json::from_str::<Failure>(r).ok())
        .map(|f| f.harness_error)
}

/// Reads the verdict from the harness's stdout. Only a line starting with the nonce counts.
///
/// Text (the lossily decoded stdout) is as good as bytes here: the record line is ASCII (a hex
/// nonce and `json.dumps`, which escapes non-ASCII), so decoding leaves it byte for byte, and
/// invalid bytes elsewhere only change other lines.
pub fn parse(input: &HarnessInput, stdout: &str, timed_out: bool) -> TestReport {
    let prefix = format!("{} ", input.nonce);
    let record = stdout
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .next_back()
        .map(serde_json::from_str::<Record>);
    let fatal = |msg: String| TestReport {
        tests: Vec::new(),
        error: Some(msg),
        syntax_error: false,
    };
    let record = match record {
        None if timed_out => {
            return fatal("the test run hit its time limit before reporting".into());
        }
        None => {
            return fatal(
                "the test run ended without a result record (exited or was killed early)".into(),
            );
        }
        Some(Err(e)) => return fatal(format!("malformed result record: {e}")),
        Some(Ok(r)) => r,
    };
    if record.v != 1 {
        return fatal(format!("unknown result record version {}", record.v));
    }
    if let Some(compiled) = &record.compiled {
        super::compiled::offer(input.suite, compiled);
    }
    let mut report = TestReport {
        syntax_error: record.compile_error.is_some(),
        error: record
            .compile_error
            .map(|e| format!("the program does not compile: {e}"))
            .or(record
                .load_error
                .map(|e| format!("the program failed to load: {e}"))),
        tests: record.tests,
    };
    if report.error.is_none() {
        if let Some(e) = record.test_error {
            report.error = Some(format!("the tests failed to run: {e}"));
        } else if let Some(n) = input.expected_tests
            && n != report.tests.len()
        {
            report.error = Some(format!(
                "result record covers {} of {n} tests",
                report.tests.len()
            ));
        } else if report.tests.is_empty() {
            report.error = Some("no tests found".into());
        }
    }
    report
}

/// A Python identifier the harness may call (a `check_function` or differential entry point).
pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(n: Option<usize>) -> HarnessInput {
        HarnessInput {
            nonce: "abc".into(),
            stdin: Vec::new(),
            expected_tests: n,
            suite: [0; 32],
        }
    }

    #[test]
    fn a_harness_failure_is_read_only_under_the_nonce() {
        let input = HarnessInput {
            stdin: Vec::new(),
            nonce: "abc".into(),
            expected_tests: None,
            suite: [0; 32],
        };
        let failed = "abc {\"v\": 1, \"harness_error\": \"prctl: EINVAL\"}\n";
        assert_eq!(
            harness_failure(&input, failed).as_deref(),
            Some("prctl: EINVAL")
        );
        let forged = "xyz {\"v\": 1, \"harness_error\": \"no\"}\n";
        assert_eq!(harness_failure(&input, forged), None);
        let normal = "abc {\"v\": 1, \"tests\": []}\n";
        assert_eq!(harness_failure(&input, normal), None);
    }

    #[test]
    fn nonce_is_fresh_and_leads_stdin() {
        let asserts = vec!["assert f(1) == 1".to_string()];
        let suite = TestSuite::Asserts {
            asserts: &asserts,
            setup: "",
            candidate_names: None,
        };
        let a = prepare(&suite, 1.0);
        let b = prepare(&suite, 1.0);
        assert_ne!(a.nonce, b.nonce);
        assert_eq!(a.nonce.len(), 32);
        assert!(a.stdin.starts_with(format!("{}\n", a.nonce).as_bytes()));
        assert_eq!(a.expected_tests, Some(1));
    }

    #[test]
    fn parses_only_records_with_the_nonce() {
        let ok = r#"abc {"v": 1, "tests": [{"name": "t", "passed": true, "error": null}]}"#;
        let forged = r#"xyz {"v": 1, "tests": [{"name": "t", "passed": true, "error": null}]}"#;
        assert_eq!(parse(&input(Some(1)), ok, false).score(), 1.0);
        let r = parse(&input(Some(1)), forged, false);
        assert_eq!(r.score(), 0.0);
        assert!(r.error.is_some());
        assert!(
            parse(&input(Some(1)), "", true)
                .error
                .unwrap()
                .contains("time limit")
        );
        assert!(
            parse(&input(Some(2)), ok, false)
                .error
                .unwrap()
                .contains("1 of 2")
        );
        assert!(parse(&input(None), "abc {not json", false).error.is_some());
    }

    #[test]
    fn compile_errors_are_flagged() {
        let rec = r#"abc {"v": 1, "tests": [], "compile_error": "SyntaxError: x"}"#;
        let r = parse(&input(Some(1)), rec, false);
        assert!(r.syntax_error);
        assert_eq!(r.score(), 0.0);
    }
}
