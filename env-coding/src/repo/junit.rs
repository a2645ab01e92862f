//! Per-test results from JUnit XML, as pytest writes it (`--junitxml`; with `-o
//! junit_family=xunit1` each test case also carries its `file`). Only what a verdict needs: each
//! `<testcase>`'s id and whether it passed, failed, errored or was skipped ([`parse`]), and for
//! a failing one its message and traceback ([`cases`], what the task synthesizer quotes). A
//! document without a `<testsuite` element, or with a test case this reader cannot take apart, is
//! not JUnit ([`JunitError`]): the caller treats it as an infrastructure failure, never a reward.
//!
//! Test ids are pytest's node ids where the file is known (`tests/test_x.py::TestY::test_z[1]`:
//! the class is what `classname` adds to the file's module path), else `classname::name`.

use std::collections::BTreeMap;

/// How one test ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TestStatus {
    Passed,
    Failed,
    Error,
    Skipped,
    /// Listed by the task but absent from the results.
    Missing,
}

#[derive(Debug, thiserror::Error)]
#[error("not a JUnit XML report: {0}")]
pub struct JunitError(pub String);

/// Every test case of `xml` by id. A test id seen twice keeps its worst status.
pub fn parse(xml: &str) -> Result<BTreeMap<String, TestStatus>, JunitError> {
    let mut out = BTreeMap::new();
    for case in cases(xml)? {
        let worse =
            |old: TestStatus| old != TestStatus::Passed && case.status == TestStatus::Passed;
        match out.get(&case.id) {
            Some(&old) if worse(old) => {}
            _ => {
                out.insert(case.id, case.status);
            }
        }
    }
    Ok(out)
}

/// One `<testcase>` of a report.
#[derive(Debug, Clone, PartialEq)]
pub struct TestCase {
    pub id: String,
    pub status: TestStatus,
    /// A failing or erroring case's `message` attribute and the text of its element (pytest's
    /// traceback), unescaped; empty for the others.
    pub message: String,
    pub detail: String,
}

/// Every `<testcase>` of `xml`, in order.
pub fn cases(xml: &str) -> Result<Vec<TestCase>, JunitError> {
    if !xml.contains("<testsuite") {
        return Err(JunitError("no <testsuite> element".into()));
    }
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(at) = rest.find("<testcase") {
        rest = &rest[at + "<testcase".len()..];
        let end =
            tag_end(rest).ok_or_else(|| JunitError("an unterminated <testcase> tag".into()))?;
        let (attrs, self_closing) = match rest[..end].strip_suffix('/') {
            Some(a) => (a, true),
            None => (&rest[..end], false),
        };
        let attrs = attributes(attrs)?;
        rest = &rest[end + 1..];
        let body = if self_closing {
            ""
        } else {
            let close = rest
                .find("</testcase>")
                .ok_or_else(|| JunitError("a <testcase> without </testcase>".into()))?;
            let body = &rest[..close];
            rest = &rest[close + "</testcase>".len()..];
            body
        };
        let (status, element) = if body.contains("<error") {
            (TestStatus::Error, "<error")
        } else if body.contains("<failure") {
            (TestStatus::Failed, "<failure")
        } else if body.contains("<skipped") {
            (TestStatus::Skipped, "")
        } else {
            (TestStatus::Passed, "")
        };
        let (message, detail) = match element {
            "" => (String::new(), String::new()),
            tag => outcome_text(body, tag)?,
        };
        out.push(TestCase {
            id: test_id(&attrs)?,
            status,
            message,
            detail,
        });
    }
    Ok(out)
}

/// The `message` attribute and the text of the `tag` element in a test case's body.
fn outcome_text(body: &str, tag: &str) -> Result<(String, String), JunitError> {
    let Some(at) = body.find(tag) else {
        return Ok(Default::default());
    };
    let rest = &body[at + tag.len()..];
    let end = tag_end(rest).ok_or_else(|| JunitError(format!("an unterminated {tag}> tag")))?;
    let (attrs, self_closing) = match rest[..end].strip_suffix('/') {
        Some(a) => (a, true),
        None => (&rest[..end], false),
    };
    let message = attributes(attrs)?.remove("message").unwrap_or_default();
    let text = match self_closing {
        true => "",
        false => {
            let text = &rest[end + 1..];
            text.find("</").map_or(text, |close| &text[..close])
        }
    };
    Ok((message, unescape(text)?))
}

/// The index of the `>` ending a tag (outside quoted values).
fn tag_end(s: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '>') => return Some(i),
            _ => {}
        }
    }
    None
}

/// `name="value"` pairs, values unescaped.
fn attributes(s: &str) -> Result<BTreeMap<String, String>, JunitError> {
    let mut out = BTreeMap::new();
    let mut rest = s.trim_start();
    while !rest.is_empty() {
        let eq = rest
            .find('=')
            .ok_or_else(|| JunitError(format!("a malformed attribute in {s:?}")))?;
        let name = rest[..eq].trim().to_string();
        let after = rest[eq + 1..].trim_start();
        let q = after
            .chars()
            .next()
            .filter(|c| *c == '"' || *c == '\'')
            .ok_or_else(|| JunitError(format!("an unquoted attribute in {s:?}")))?;
        let close = after[1..]
            .find(q)
            .ok_or_else(|| JunitError(format!("an unterminated attribute in {s:?}")))?;
        out.insert(name, unescape(&after[1..1 + close])?);
        rest = after[close + 2..].trim_start();
    }
    Ok(out)
}

fn unescape(s: &str) -> Result<String, JunitError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let semi = rest[at..]
            .find(';')
            .ok_or_else(|| JunitError(format!("a bad entity in {s:?}")))?;
        let entity = &rest[at + 1..at + semi];
        let c = match entity {
            "lt" => Some('<'),
            "gt" => Some('>'),
            "amp" => Some('&'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            e => e
                .strip_prefix("#x")
                .map(|h| u32::from_str_radix(h, 16))
                .or_else(|| e.strip_prefix('#').map(str::parse::<u32>))
                .and_then(Result::ok)
                .and_then(char::from_u32),
        };
        out.push(c.ok_or_else(|| JunitError(format!("a bad entity &{entity}; in {s:?}")))?);
        rest = &rest[at + semi + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn test_id(attrs: &BTreeMap<String, String>) -> Result<String, JunitError> {
    let name = attrs
        .get("name")
        .ok_or_else(|| JunitError("a <testcase> without a name".into()))?;
    let classname = attrs.get("classname").map(String::as_str).unwrap_or("");
    let Some(file) = attrs.get("file") else {
        return Ok(match classname {
            "" => name.clone(),
            c => format!("{c}::{name}"),
        });
    };
    // `tests/test_x.py` is the module `tests.test_x`; what classname adds after it is the class.
    let module = file.trim_end_matches(".py").replace('/', ".");
    let class = classname
        .strip_prefix(&module)
        .map(|c| c.trim_start_matches('.'))
        .unwrap_or("");
    Ok(match class {
        "" => format!("{file}::{name}"),
        c => format!("{file}::{}::{name}", c.replace('.', "::")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytest_xunit1_reports_become_node_ids() {
        let xml = r#"<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="4"><testcase classname="tests.test_a" name="test_ok" file="tests/test_a.py" line="1" time="0.001" /><testcase classname="tests.test_a.TestB" name="test_param[1-&lt;2&gt;]" file="tests/test_a.py" line="5" time="0.001"><failure message="assert 1 == 2">E assert 1 == 2</failure></testcase><testcase classname="tests.test_a" name="test_skip" file="tests/test_a.py" line="9" time="0.0"><skipped type="pytest.skip" message="no">skip</skipped></testcase><testcase classname="tests.test_a" name="test_err" file="tests/test_a.py" line="9" time="0.0"><error message="boom">x</error></testcase></testsuite></testsuites>"#;
        let got = parse(xml).expect("parse");
        let want: BTreeMap<String, TestStatus> = [
            ("tests/test_a.py::test_ok", TestStatus::Passed),
            (
                "tests/test_a.py::TestB::test_param[1-<2>]",
                TestStatus::Failed,
            ),
            ("tests/test_a.py::test_skip", TestStatus::Skipped),
            ("tests/test_a.py::test_err", TestStatus::Error),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn without_files_ids_are_classname_and_name() {
        let xml =
            r#"<testsuite><testcase classname="tests.test_a" name="t"></testcase></testsuite>"#;
        let got = parse(xml).expect("parse");
        assert_eq!(got.get("tests.test_a::t"), Some(&TestStatus::Passed));
    }

    #[test]
    fn what_is_not_junit_is_an_error() {
        for bad in [
            "",
            "collected 0 items",
            "<testsuite><testcase name=\"x\"",
            "<testsuite><testcase name=x></testcase></testsuite>",
            "<testsuite><testcase classname=\"a\"></testcase></testsuite>",
            "<testsuite><testcase name=\"a\"><failure></testsuite>",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
