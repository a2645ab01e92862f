//! Extracting the program from model text: the first fenced block in a language, outside reasoning.
//!
//! The coding env applies [`extract`] to text actions (its `extract` make kwarg is an
//! [`ExtractMode`]); the rollout engine uses [`first_python_block`] to find the code of an answer
//! in code-block mode and sends exactly that code to the env. Both sides depend on this crate, so
//! the rules live in one place and cannot drift apart. The Python package (`codegym.extract`) is a
//! port of this crate; `cases.json` beside this crate's manifest pins both to the same results
//! (`tests/cases.rs` here, `tests/test_extract.py` there).

mod reasoning;

use std::borrow::Cow;
use std::ops::Range;

use serde::{Deserialize, Serialize};

pub use reasoning::{answer, reasoning_spans};

/// How a text action becomes a program (the `extract` make kwarg).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExtractMode {
    /// The first fenced Python block if there is one, else the whole text without its reasoning.
    #[default]
    Auto,
    /// The first fenced Python block; text without one is a program that does nothing, so the
    /// model is told (via stderr) rather than having prose executed.
    Fenced,
    /// The whole text is the program.
    Raw,
}

/// The body of the first fenced code block tagged `python`/`py`/`python3` or untagged.
///
/// Fences are three or more backticks or tildes at the start of a line (up to three spaces of
/// indentation, as in CommonMark); the block ends at a line closing it with the same character and at
/// least as many marks. An unclosed block runs to the end of the text, because models often stop
/// generating before the closing fence. A fence inside reasoning (`<think>...</think>`, see
/// [`reasoning_spans`]) opens no block: a draft in the thinking is never the program, even when it
/// is the only block (then there is no block: the model did not answer with code). The end of
/// reasoning also ends a line (`</think>```python` opens a block). A block opened in the answer
/// closes at its closing fence wherever that is (a program may print `<think>`).
pub fn first_python_block(text: &str) -> Option<&str> {
    first_block_tagged(text, PYTHON_TAGS)
}

/// The info-string tags of a Python block (the empty tag: an untagged block).
pub const PYTHON_TAGS: &[&str] = &["", "python", "py", "python3"];

/// The info-string tags of a fenced block per language (SandboxFusion's names, e.g. `cpp`; `""`: an
/// untagged block). The coding env's language table and the rollout engine both read this one
/// table; `cases.json` holds a copy that the Python port is tested against.
pub const FENCE_TAGS: &[(&str, &[&str])] = &[
    ("python", PYTHON_TAGS),
    ("cpp", &["", "cpp", "c++", "cc", "cxx"]),
    ("c", &["", "c"]),
    ("rust", &["", "rust", "rs"]),
    ("go", &["", "go", "golang"]),
    ("java", &["", "java"]),
    ("nodejs", &["", "javascript", "js", "nodejs", "node"]),
    ("typescript", &["", "typescript", "ts"]),
    ("bash", &["", "bash", "sh", "shell"]),
    ("ruby", &["", "ruby", "rb"]),
    ("php", &["", "php"]),
    ("lua", &["", "lua"]),
    ("perl", &["", "perl", "pl"]),
];

/// The tags of a fenced block in `language` ([`FENCE_TAGS`]), `None` for a name the table does not
/// know.
pub fn fence_tags(language: &str) -> Option<&'static [&'static str]> {
    FENCE_TAGS
        .iter()
        .find(|(name, _)| *name == language)
        .map(|(_, tags)| *tags)
}

/// The body of the first fenced block in `language` (see [`fence_tags`]; an unknown
/// name matches blocks tagged with it, and untagged ones).
pub fn first_block_in<'t>(text: &'t str, language: &str) -> Option<&'t str> {
    with_tags(language, |tags| first_block_tagged(text, tags))
}

/// [`extract`] for blocks in `language` (the tags of [`first_block_in`]).
pub fn extract_in<'t>(text: &'t str, mode: ExtractMode, language: &str) -> Option<Cow<'t, str>> {
    with_tags(language, |tags| extract_tagged(text, mode, tags))
}

/// Calls `f` with the tags of `language`: its row of [`fence_tags`], or for a name that table
/// does not know, that name and the untagged block.
fn with_tags<R>(language: &str, f: impl FnOnce(&[&str]) -> R) -> R {
    match fence_tags(language) {
        Some(tags) => f(tags),
        None => f(&["", language]),
    }
}

/// The body of the first fenced block whose tag (lower-cased first word of the info
/// string) is one of `tags` (`""` matches an untagged block); the same fence rules as
/// [`first_python_block`], which is this with [`PYTHON_TAGS`].
pub fn first_block_tagged<'t>(text: &'t str, tags: &[&str]) -> Option<&'t str> {
    let reasoning = reasoning_spans(text);
    let in_reasoning = |at: usize| reasoning.iter().any(|s| s.contains(&at));
    let mut offset = 0;
    let mut lines = lines(text, &reasoning);
    while let Some(line) = lines.next() {
        let line_start = offset;
        offset += line.len();
        if in_reasoning(line_start) {
            continue;
        }
        let Some((ch, count, info)) = fence(line) else {
            continue;
        };
        let lang = info
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        let wanted = tags.contains(&lang.as_str());
        // Skip the whole block even when it is not wanted, so that a fence inside it is not read as
        // the start of another block.
        let body_start = offset;
        let mut body_end = None;
        for inner in lines.by_ref() {
            let inner_start = offset;
            offset += inner.len();
            if let Some((c, n, rest)) = fence(inner)
                && c == ch
                && n >= count
                && rest.trim().is_empty()
            {
                body_end = Some(inner_start);
                break;
            }
        }
        // An unclosed fence with nothing after it is a stray marker, not a block.
        let body = &text[body_start..body_end.unwrap_or(text.len())];
        if wanted && (body_end.is_some() || !body.trim().is_empty()) {
            return Some(body);
        }
    }
    None
}

/// The lines of `text` (each with its `\n`), where the end of a reasoning span also ends a line: the
/// answer after `</think>` starts a line of its own (`</think>```python` opens a block).
fn lines<'t>(text: &'t str, reasoning: &[Range<usize>]) -> impl Iterator<Item = &'t str> {
    let mut ends: Vec<usize> = text
        .match_indices('\n')
        .map(|(i, _)| i + 1)
        .chain(reasoning.iter().map(|s| s.end))
        .filter(|&e| e > 0 && e < text.len())
        .collect();
    ends.push(text.len());
    ends.sort_unstable();
    ends.dedup();
    let mut start = 0;
    ends.into_iter().filter(|&e| e > 0).map(move |end| {
        let line = &text[start..end];
        start = end;
        line
    })
}

/// Parses a fence line: (fence char, number of marks, info string).
fn fence(line: &str) -> Option<(char, usize, &str)> {
    let trimmed = line.trim_end_matches(['\n', '\r']);
    let indent = trimmed.len() - trimmed.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &trimmed[indent..];
    let ch = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let count = rest.chars().take_while(|c| *c == ch).count();
    if count < 3 {
        return None;
    }
    let info = &rest[count..];
    // CommonMark: a backtick fence's info string may not contain backticks (that is inline code).
    if ch == '`' && info.contains('`') {
        return None;
    }
    Some((ch, count, info.trim()))
}

/// Applies `mode` to a text action. `None` means "fenced mode and no block": the caller reports it.
pub fn extract(text: &str, mode: ExtractMode) -> Option<Cow<'_, str>> {
    extract_tagged(text, mode, PYTHON_TAGS)
}

/// [`extract`] for a language whose blocks carry one of `tags`.
pub fn extract_tagged<'t>(text: &'t str, mode: ExtractMode, tags: &[&str]) -> Option<Cow<'t, str>> {
    match mode {
        ExtractMode::Raw => Some(Cow::Borrowed(text)),
        ExtractMode::Fenced => first_block_tagged(text, tags).map(Cow::Borrowed),
        ExtractMode::Auto => Some(match first_block_tagged(text, tags) {
            Some(block) => Cow::Borrowed(block),
            None => answer(text),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_first_python_block() {
        let t = "Here:\n```python\nprint(1)\n```\nand\n```python\nprint(2)\n```\n";
        assert_eq!(first_python_block(t), Some("print(1)\n"));
    }

    #[test]
    fn skips_other_languages_and_their_contents() {
        let t = "```bash\n```python\nls\n```\n```py\nx = 1\n```";
        assert_eq!(first_python_block(t), Some("x = 1\n"));
    }

    #[test]
    fn untagged_tilde_and_unclosed_blocks() {
        assert_eq!(first_python_block("~~~\na\n~~~\n"), Some("a\n"));
        assert_eq!(first_python_block("```Python3 extra\nb\n"), Some("b\n"));
        assert_eq!(
            first_python_block("````\nc\n```\nd\n````"),
            Some("c\n```\nd\n")
        );
        assert_eq!(first_python_block("```python\n```"), Some(""));
    }

    #[test]
    fn blocks_of_other_languages_by_tag() {
        let text = "```python\nprint(1)\n```\n```cpp\nint main(){}\n```\n";
        assert_eq!(
            first_block_tagged(text, &["cpp", "c++"]),
            Some("int main(){}\n")
        );
        assert_eq!(first_block_tagged(text, &["rust"]), None);
        assert_eq!(first_block_in(text, "cpp"), Some("int main(){}\n"));
        assert_eq!(first_block_in(text, "python"), Some("print(1)\n"));
        assert_eq!(first_block_in(text, "rust"), None);
        assert_eq!(first_block_in("```zig\nx\n```", "zig"), Some("x\n"));
        assert_eq!(
            extract_tagged("```\nuntagged\n```", ExtractMode::Fenced, &["", "go"]).as_deref(),
            Some("untagged\n")
        );
    }

    #[test]
    fn no_block() {
        assert_eq!(first_python_block("print(1)"), None);
        assert_eq!(first_python_block("use ``` inline"), None);
        assert_eq!(
            first_python_block("    ```python\nindented code block\n```"),
            None
        );
        assert_eq!(first_python_block("```rust\nfn main() {}\n```"), None);
    }

    #[test]
    fn modes() {
        let t = "text\n```python\nx\n```";
        assert_eq!(extract(t, ExtractMode::Auto).as_deref(), Some("x\n"));
        assert_eq!(
            extract("print(1)", ExtractMode::Auto).as_deref(),
            Some("print(1)")
        );
        assert_eq!(extract("print(1)", ExtractMode::Fenced), None);
        assert_eq!(extract(t, ExtractMode::Raw).as_deref(), Some(t));
    }

    #[test]
    fn modes_use_the_kwarg_names() {
        for (mode, name) in [
            (ExtractMode::Auto, "auto"),
            (ExtractMode::Fenced, "fenced"),
            (ExtractMode::Raw, "raw"),
        ] {
            assert_eq!(serde_json::to_value(mode).unwrap(), serde_json::json!(name));
        }
    }

    #[test]
    fn blocks_of_other_languages() {
        let t = "```python\nx = 1\n```\nand\n```JSON\n{\"a\": 1}\n```\n";
        assert_eq!(first_block_tagged(t, &["json"]), Some("{\"a\": 1}\n"));
        assert_eq!(first_block_tagged("```\n{}\n```", &["json"]), None);
        // A json fence inside a python block is not a block of its own.
        let nested = "````python\n```json\n{}\n```\n````";
        assert_eq!(first_block_tagged(nested, &["json"]), None);
    }
}
