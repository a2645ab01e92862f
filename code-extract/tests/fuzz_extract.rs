//! Property-based fuzzing of extraction: arbitrary model text (fences of every kind, nested and
//! unterminated, reasoning tags, CRLF, unicode) through every mode and language.
//!
//! Properties, beyond "never panics":
//! - a block is a slice of the input, starting at a line start, never inside reasoning;
//! - the modes agree: `raw` is the text, `fenced` is the block, `auto` is the block or the answer;
//! - reasoning spans are ordered, disjoint, on char boundaries;
//! - a block built with a known body (any fence character, length, indentation, tag case, info
//!   string, closed or not, after drafts in reasoning) is extracted as exactly that body;
//! - every case of `cases.json` (the extraction cases the Python port shares) keeps its result with
//!   a line of prose before it, and its mutations keep the properties above.
//!
//! Extraction is pure, so determinism is checked by extracting twice. Cases per property:
//! `CODEGYM_FUZZ_CASES` (default 256; see docs/fuzzing.md for the long mode).

use code_extract::{ExtractMode, answer, extract_in, first_block_in, reasoning_spans};
use proptest::prelude::*;

#[path = "../../tests/support/fuzz_config.rs"]
mod fuzz_config;

fn config(default: u32) -> proptest::test_runner::Config {
    fuzz_config::config(default, "tests/proptest-regressions/fuzz_extract.txt")
}

const LANGUAGES: &[&str] = &["python", "cpp", "zig", ""];
const MODES: [ExtractMode; 3] = [ExtractMode::Auto, ExtractMode::Fenced, ExtractMode::Raw];

/// The pieces model text is made of: fence lines of every shape, reasoning tags, line ends, and
/// arbitrary unicode.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "\\PC{0,12}",
        2 => Just("\n".to_string()),
        1 => Just("\r\n".to_string()),
        1 => Just("<think>".to_string()),
        1 => Just("</think>".to_string()),
        1 => Just("<think".to_string()),
        4 => (0usize..5, prop::sample::select(vec!['`', '~']), 2usize..6,
              prop::sample::select(vec!["", "python", "PY", "cpp", "zig", " python x", "py`", "{a}"]))
            .prop_map(|(indent, ch, n, tag)| format!(
                "\n{}{}{tag}\n",
                " ".repeat(indent),
                ch.to_string().repeat(n)
            )),
        1 => Just("`".to_string()),
        1 => Just("~".to_string()),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(piece(), 0..40).prop_map(|p| p.concat())
}

/// Checks every property that holds for any text.
fn check_any(text: &str) -> Result<(), TestCaseError> {
    let spans = reasoning_spans(text);
    let mut last_end = 0;
    for s in &spans {
        prop_assert!(s.start >= last_end && s.start <= s.end && s.end <= text.len());
        prop_assert!(text.is_char_boundary(s.start) && text.is_char_boundary(s.end));
        last_end = s.end;
    }
    let answer = answer(text);
    prop_assert_eq!(
        answer.len(),
        text.len() - spans.iter().map(|s| s.len()).sum::<usize>()
    );
    for lang in LANGUAGES {
        let block = first_block_in(text, lang);
        prop_assert_eq!(block, first_block_in(text, lang), "not deterministic");
        if let Some(b) = block {
            let start = (b.as_ptr() as usize).wrapping_sub(text.as_ptr() as usize);
            prop_assert!(
                start <= text.len() && start + b.len() <= text.len(),
                "the block {:?} is not a slice of the text",
                b
            );
            prop_assert_eq!(&text[start..start + b.len()], b);
            prop_assert!(
                start == 0 || text[..start].ends_with('\n') || spans.iter().any(|s| s.end == start),
                "the block at {} does not start a line",
                start
            );
            // The line that opened the block (the lines end at newlines and reasoning ends).
            prop_assert!(start > 0, "a block without its fence line");
            let fence_end = start - 1;
            let fence_start = text[..fence_end].rfind('\n').map_or(0, |i| i + 1).max(
                spans
                    .iter()
                    .map(|s| s.end)
                    .filter(|&e| e <= fence_end)
                    .max()
                    .unwrap_or(0),
            );
            prop_assert!(
                !spans.iter().any(|s| s.contains(&fence_start)),
                "the block at {} is opened by a fence at {} inside reasoning {:?}",
                start,
                fence_start,
                spans
            );
        }
        for mode in MODES {
            let got = extract_in(text, mode, lang);
            prop_assert_eq!(&got, &extract_in(text, mode, lang), "not deterministic");
            let expected = match mode {
                ExtractMode::Raw => Some(text.to_string()),
                ExtractMode::Fenced => block.map(str::to_string),
                ExtractMode::Auto => Some(block.map_or_else(|| answer.to_string(), str::to_string)),
            };
            prop_assert_eq!(got.map(|c| c.into_owned()), expected, "mode {:?}", mode);
        }
    }
    Ok(())
}

/// A line of a program body: nothing that could be read as a fence or end reasoning.
fn body_line() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[^`~\n\r<]{0,20}",
        1 => Just("print('<think>')".to_string()),
        1 => Just("    ```".to_string()),
        1 => Just("x = '``'".to_string()),
    ]
    .prop_map(|l| l + "\n")
}

/// Prose before the block: no fence marks and no reasoning tags.
fn prose() -> impl Strategy<Value = String> {
    "[^`~\n<]{0,30}\n"
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn any_text_keeps_the_properties(text in text()) {
        check_any(&text)?;
    }

    #[test]
    fn a_known_block_is_extracted_exactly(
        prose in prose(),
        draft in prop::option::of(prop::collection::vec(body_line(), 0..4)),
        indent in 0usize..4,
        ch in prop::sample::select(vec!['`', '~']),
        marks in 3usize..7,
        extra_marks in 0usize..3,
        tag in prop::sample::select(vec!["", "python", "Python", "PY", "python3"]),
        info in prop::sample::select(vec!["", " title=x.py", " {linenos=true}"]),
        body in prop::collection::vec(body_line(), 0..8),
        closed in any::<bool>(),
        crlf in any::<bool>(),
        rest in text(),
    ) {
        // A lone `</think>` after the block would make the block reasoning (rule 2): rest has none.
        let mut rest = rest;
        while rest.contains("</think>") {
            rest = rest.replace("</think>", "");
        }
        // The tag is the info string's first word: an untagged fence has no info string.
        let info = if tag.is_empty() { "" } else { info };
        let fence = ch.to_string().repeat(marks);
        let nl = if crlf { "\r\n" } else { "\n" };
        let body = body.concat().replace('\n', nl);
        // A draft in reasoning before the answer is never the program.
        let draft = draft.map_or(String::new(), |d| format!("<think>\n```python\n{}```\n</think>\n", d.concat()));
        let mut text = format!("{prose}{draft}{}{fence}{tag}{info}{nl}{body}", " ".repeat(indent));
        let expected = if closed {
            text += &format!("{}{}{nl}{rest}", fence, ch.to_string().repeat(extra_marks));
            Some(body.as_str())
        } else {
            // An unclosed block runs to the end; one with nothing in it is a stray marker.
            (!body.trim().is_empty()).then_some(body.as_str())
        };
        prop_assert_eq!(first_block_in(&text, "python"), expected, "text {:?}", text);
        check_any(&text)?;
    }

    #[test]
    fn shared_cases_survive_prose_before_them_and_mutations(
        case in prop::sample::select(shared_cases()),
        prose in prose(),
        at in any::<prop::sample::Index>(),
        insert in piece(),
    ) {
        let (text, language) = case;
        let moved = format!("{prose}{text}");
        prop_assert_eq!(
            first_block_in(&moved, &language),
            first_block_in(&text, &language),
            "prose before {:?}",
            text
        );
        let boundaries: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
        let at = boundaries[at.index(boundaries.len())];
        let mutated = format!("{}{insert}{}", &text[..at], &text[at..]);
        check_any(&mutated)?;
    }
}

/// The texts and languages of `cases.json`, the seed corpus.
fn shared_cases() -> Vec<(String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/cases.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("cases.json is readable"))
            .expect("cases.json parses");
    let cases = json["cases"].as_array().expect("cases is a list");
    assert!(cases.len() >= 30, "{} cases", cases.len());
    cases
        .iter()
        .map(|c| {
            let field = |k: &str| c[k].as_str().expect("a string field").to_string();
            (field("text"), field("language"))
        })
        .collect()
}
