//! User-facing text of a CLI, for the tidiness checks: every command path of a clap binary (from
//! the `Commands:` sections of its help), each one's `--help`, and the places in a text that cite
//! an issue number (user-facing text says what is true, not the history of how it came to be).
//!
//! Included with `#[path = ...] mod help_text;` by the root `tests/tidy.rs` (the `codegym` binary
//! and the user docs) and by `bench/tests/help.rs` (the `codegym-bench` binary), so both check
//! with one definition of a citation.
#![allow(dead_code)]

/// `bin ARGS --help`.
#[allow(clippy::disallowed_methods)] // the tests read the help of the binary under test
pub fn help(bin: &str, args: &[String]) -> String {
    let out = std::process::Command::new(bin)
        .args(args)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("run {bin} --help: {e}"));
    assert!(out.status.success(), "{bin} {args:?} --help failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every command path of `bin` (`[]`, `["serve"]`, `["tasks", "check"]`, ...), from the
/// `Commands:` sections of the help texts.
pub fn subcommands(bin: &str) -> Vec<Vec<String>> {
    let mut all = vec![Vec::new()];
    let mut i = 0;
    while i < all.len() {
        let command: Vec<String> = all[i].clone();
        let text = help(bin, &command);
        let listed = text
            .lines()
            .skip_while(|l| l.trim() != "Commands:")
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .filter_map(|l| l.split_whitespace().next())
            .filter(|name| *name != "help");
        for name in listed {
            let mut sub = command.clone();
            sub.push(name.to_string());
            all.push(sub);
        }
        i += 1;
    }
    all
}

/// The citations of issue numbers in every `--help` of `bin`, as `bin ARGS --help: line N: ...`.
pub fn help_citations(bin: &str) -> Vec<String> {
    let name = std::path::Path::new(bin)
        .file_name()
        .map_or(bin.into(), |n| n.to_string_lossy());
    let mut found = Vec::new();
    for command in subcommands(bin) {
        for hit in issue_citations(&help(bin, &command)) {
            found.push(format!("{name} {} --help: {hit}", command.join(" ")));
        }
    }
    found
}

/// The places in `text` that cite an issue: `issue 12`, `Issue #12`, `#12`.
pub fn issue_citations(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let lower = line.to_lowercase();
        let bytes = lower.as_bytes();
        let issue_n = lower.match_indices("issue").any(|(i, _)| {
            let rest = lower[i + 5..].trim_start_matches([' ', '#']);
            rest.starts_with(|c: char| c.is_ascii_digit())
        });
        let hash_n = lower.match_indices('#').any(|(i, _)| {
            let before_ok = i == 0 || bytes[i - 1].is_ascii_whitespace() || bytes[i - 1] == b'(';
            before_ok && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)
        });
        if issue_n || hash_n {
            found.push(format!("line {}: {}", n + 1, line.trim()));
        }
    }
    found
}
