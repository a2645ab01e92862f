//! Reasoning spans: the parts of model text inside `<think>...</think>`, which are not the answer.
//!
//! Reasoning models write drafts (often wrong ones) in their thinking before the answer, so code
//! found there is never the program. The rules, shared with the Python package's port:
//! 1. every `<think>...</think>` pair (the nearest closing tag) is reasoning;
//! 2. then a `</think>` left over (its opening tag was in the prompt) makes everything before the
//!    last such tag reasoning;
//! 3. then a `<think>` left over after that (the model stopped mid-thought) makes everything from it
//!    to the end reasoning.

use std::borrow::Cow;
use std::ops::Range;

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// The byte ranges of `text` that are reasoning, in order and not overlapping.
pub fn reasoning_spans(text: &str) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    // Rule 1: pairs, left to right; the text between pairs is what rules 2 and 3 look at.
    let mut outside = Vec::new();
    let mut pos = 0;
    while let Some(open) = text[pos..].find(OPEN).map(|i| pos + i) {
        let Some(close) = text[open + OPEN.len()..]
            .find(CLOSE)
            .map(|i| open + OPEN.len() + i)
        else {
            break;
        };
        outside.push(pos..open);
        spans.push(open..close + CLOSE.len());
        pos = close + CLOSE.len();
    }
    outside.push(pos..text.len());
    // Rule 2: the last lone closing tag outside the pairs.
    let lone_close = outside.iter().rev().find_map(|r| {
        text[r.clone()]
            .rfind(CLOSE)
            .map(|i| r.start + i + CLOSE.len())
    });
    if let Some(end) = lone_close {
        spans.retain(|s| s.start >= end);
        spans.insert(0, 0..end);
    }
    // Rule 3: an opening tag left unclosed after everything above.
    let from = lone_close.unwrap_or(0);
    let lone_open = outside.iter().find_map(|r| {
        let start = r.start.max(from);
        (start < r.end)
            .then(|| text[start..r.end].find(OPEN).map(|i| start + i))
            .flatten()
    });
    if let Some(start) = lone_open {
        spans.retain(|s| s.end <= start);
        spans.push(start..text.len());
    }
    spans
}

/// `text` without its reasoning (see the module docs); borrowed when there is none.
pub fn answer(text: &str) -> Cow<'_, str> {
    let spans = reasoning_spans(text);
    if spans.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    for s in &spans {
        out.push_str(&text[pos..s.start]);
        pos = s.end;
    }
    out.push_str(&text[pos..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_rules() {
        assert_eq!(answer("<think>a</think>b<think>c</think>d"), "bd");
        assert_eq!(answer("plan</think>x</think>y"), "y");
        assert_eq!(answer("x<think>never closed"), "x");
        assert_eq!(answer("a</think>b<think>c"), "b");
        assert_eq!(answer("<think>a</think>b</think>c"), "c");
        assert_eq!(answer("no tags"), "no tags");
    }
}
