//! The user documentation as the tests read it: which Markdown files are documentation (README.md
//! and `docs/*.md`), their fenced blocks with the `<!-- example: ... -->` marker on the line before
//! each, and their prose (the text outside fences). `doc_examples.rs` runs the blocks; `tidy.rs`
//! checks the prose's paths and both for issue numbers.
//!
//! Included with `#[path = "support/doc_blocks.rs"] mod doc_blocks;`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The repository root (the root crate's manifest directory).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documentation files, relative to the root: README.md, then `docs/*.md` in name order.
pub fn doc_files() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md")];
    let docs = repo_root().join("docs");
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&docs)
        .unwrap_or_else(|e| panic!("read {}: {e}", docs.display()))
        .map(|entry| entry.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| Path::new("docs").join(p.file_name().expect("file name")))
        .collect();
    pages.sort();
    files.extend(pages);
    files
}

/// How a block asks to be treated: the text of its marker comment, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// No marker: run the block as its language says.
    None,
    /// `serve`: the block starts `codegym serve`.
    Serve,
    /// `config`: a `codegym serve --config` file.
    Config,
    /// `task`: one task (native JSON, possibly over several lines).
    Task,
    /// `output`: lines the previous block prints.
    Output,
    /// `flags-only (WHY)`: check the `codegym` commands' subcommands and flags only.
    FlagsOnly(String),
    /// `not-run (WHY)`: not runnable (output samples, installs, outside systems).
    NotRun(String),
    /// Anything else: an error the examples test reports.
    Unknown(String),
}

/// One fenced block of a documentation file.
#[derive(Debug, Clone)]
pub struct Block {
    /// Relative to the repository root.
    pub file: PathBuf,
    /// 1-based line of the opening fence.
    pub line: usize,
    /// The fence's info string up to the first space (`sh`, `python`, `json`, ...).
    pub lang: String,
    pub marker: Marker,
    pub body: String,
}

impl Block {
    /// `FILE:LINE`, for messages.
    pub fn place(&self) -> String {
        format!("{}:{}", self.file.display(), self.line)
    }
}

/// The fenced blocks of `text` (the contents of `file`). A fence is a line of three or more
/// backticks at the start of the line; it closes at a line of at least as many backticks and
/// nothing else (a snippet may hold shorter fences in strings).
pub fn blocks(file: &Path, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let Some(width) = fence_width(lines[i]) else {
            i += 1;
            continue;
        };
        let info = lines[i][width..].trim();
        let lang = info.split_whitespace().next().unwrap_or("").to_string();
        let marker = marker_before(&lines[..i]);
        let start = i;
        let mut body = String::new();
        i += 1;
        while i < lines.len() && !closes(lines[i], width) {
            body.push_str(lines[i]);
            body.push('\n');
            i += 1;
        }
        assert!(
            i < lines.len(),
            "{}:{}: unclosed fence",
            file.display(),
            start + 1
        );
        out.push(Block {
            file: file.to_path_buf(),
            line: start + 1,
            lang,
            marker,
            body,
        });
        i += 1;
    }
    out
}

/// The lines of `text` outside fenced blocks, with their 1-based numbers.
pub fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut open: Option<usize> = None;
    for (n, line) in text.lines().enumerate() {
        match open {
            Some(width) if closes(line, width) => open = None,
            Some(_) => {}
            None => match fence_width(line) {
                Some(width) => open = Some(width),
                None => out.push((n + 1, line)),
            },
        }
    }
    out
}

fn fence_width(line: &str) -> Option<usize> {
    let width = line.len() - line.trim_start_matches('`').len();
    (width >= 3).then_some(width)
}

fn closes(line: &str, width: usize) -> bool {
    let trimmed = line.trim_end();
    trimmed.len() >= width && trimmed.chars().all(|c| c == '`')
}

/// The marker of a block whose fence follows `before`: the last non-blank line, when it is an
/// `<!-- example: ... -->` comment.
fn marker_before(before: &[&str]) -> Marker {
    let Some(last) = before.iter().rev().find(|l| !l.trim().is_empty()) else {
        return Marker::None;
    };
    let Some(inner) = last
        .trim()
        .strip_prefix("<!-- example:")
        .and_then(|s| s.strip_suffix("-->"))
    else {
        return Marker::None;
    };
    let inner = inner.trim();
    let reason = |name: &str| {
        inner
            .strip_prefix(name)
            .map(str::trim)
            .and_then(|r| r.strip_prefix('('))
            .and_then(|r| r.strip_suffix(')'))
            .filter(|r| !r.trim().is_empty())
            .map(str::to_string)
    };
    match inner {
        "serve" => Marker::Serve,
        "config" => Marker::Config,
        "task" => Marker::Task,
        "output" => Marker::Output,
        _ => {
            if let Some(why) = reason("flags-only") {
                Marker::FlagsOnly(why)
            } else if let Some(why) = reason("not-run") {
                Marker::NotRun(why)
            } else {
                Marker::Unknown(inner.to_string())
            }
        }
    }
}
