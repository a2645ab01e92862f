//! Runs every case of `cases.json`, the extraction cases the Python package's port runs too, so
//! the two extract the same program from the same text.

use std::collections::BTreeMap;

use code_extract::{ExtractMode, FENCE_TAGS, extract_in};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Cases {
    version: u32,
    #[allow(dead_code, reason = "documentation for readers of the file")]
    about: String,
    fence_tags: BTreeMap<String, Vec<String>>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    text: String,
    language: String,
    mode: ExtractMode,
    expected: Option<String>,
}

fn load() -> Cases {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/cases.json");
    let text = std::fs::read_to_string(path).expect("cases.json is readable");
    serde_json::from_str(&text).expect("cases.json parses")
}

#[test]
fn every_shared_case() {
    let cases = load();
    assert_eq!(cases.version, 1, "a newer cases format: update this test");
    assert!(cases.cases.len() >= 30, "{} cases", cases.cases.len());
    let mut failures = Vec::new();
    for case in &cases.cases {
        let got = extract_in(&case.text, case.mode, &case.language);
        if got.as_deref() != case.expected.as_deref() {
            failures.push(format!(
                "{}: expected {:?}, got {:?}",
                case.name, case.expected, got
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_fence_tag_table_is_the_files() {
    let cases = load();
    let ours: BTreeMap<String, Vec<String>> = FENCE_TAGS
        .iter()
        .map(|(l, tags)| (l.to_string(), tags.iter().map(|t| t.to_string()).collect()))
        .collect();
    assert_eq!(
        ours.len(),
        FENCE_TAGS.len(),
        "a language twice in FENCE_TAGS"
    );
    assert_eq!(cases.fence_tags, ours);
}
