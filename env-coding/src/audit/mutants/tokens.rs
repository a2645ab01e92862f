//! Mutants of programs in languages other than Python, one token changed in the reference's
//! text: arithmetic operators (`+` to `-` or `*`, `-` to `+`, `*` to `/` or `+`, `/` to `*`,
//! `%` to `/`, as the Python mutants), comparisons (`<` with
//! `<=`, `>` with `>=`, `==` with `!=`, `===` with `!==`), `&&` with `||`, augmented assignments
//! (`+=` with `-=`, `*=` with `/=`) and integer literals +-1. Comments, string and character
//! literals and (C, C++) preprocessor lines are never changed.
//!
//! A scanner, not a parser: it keeps to tokens whose role is clear from their neighbours (an
//! arithmetic operator between operands, `<` and `>` with spaces on both sides, which template
//! and generic brackets never have), and a mutant that still does not compile is dropped by the
//! caller, which compiles each before scoring it (the artifact cache then serves the scoring).

use codegym_sandbox::lang::Language;

use super::Mutant;
use crate::inputs::Rng;

/// How a language writes comments and strings.
#[derive(Clone, Copy)]
struct Syntax {
    slash_comments: bool,
    hash_comments: bool,
    dash_comments: bool,
    backtick_strings: bool,
    preprocessor: bool,
}

fn syntax(language: Language) -> Syntax {
    use Language::*;
    let c_like = matches!(
        language,
        C | Cpp | Java | NodeJs | TypeScript | Go | Rust | Php
    );
    Syntax {
        slash_comments: c_like,
        hash_comments: matches!(language, Ruby | Perl | Bash | Php),
        dash_comments: language == Lua,
        backtick_strings: matches!(language, NodeJs | TypeScript | Go),
        preprocessor: matches!(language, C | Cpp),
    }
}

/// One token that may change, and what it may become.
struct Site {
    start: usize,
    end: usize,
    line: usize,
    operator: &'static str,
    replacements: Vec<String>,
}

/// Multi-byte tokens, longest first: (token, category, replacements). Those without
/// replacements are consumed whole so their parts are not read as other operators.
const TOKENS: &[(&str, &str, &[&str])] = &[
    ("===", "comparison", &["!=="]),
    ("!==", "comparison", &["==="]),
    ("<<=", "", &[]),
    (">>=", "", &[]),
    ("==", "comparison", &["!="]),
    ("!=", "comparison", &["=="]),
    ("<=", "comparison", &["<"]),
    (">=", "comparison", &[">"]),
    ("&&", "boolean", &["||"]),
    ("||", "boolean", &["&&"]),
    ("+=", "augmented_assignment", &["-="]),
    ("-=", "augmented_assignment", &["+="]),
    ("*=", "augmented_assignment", &["/="]),
    ("/=", "augmented_assignment", &["*="]),
    ("<<", "", &[]),
    (">>", "", &[]),
    ("->", "", &[]),
    ("=>", "", &[]),
    ("++", "", &[]),
    ("--", "", &[]),
    ("::", "", &[]),
    ("**", "", &[]),
    ("..", "", &[]),
    ("<-", "", &[]),
    (":=", "", &[]),
    ("=~", "", &[]),
    ("~=", "", &[]),
    ("%=", "", &[]),
];

fn is_ident(b: u8) -> bool {
    b == b'_' || b.is_ascii_alphanumeric()
}

/// The byte before `i` that is not a space or tab, and the one at or after `j`.
fn neighbours(b: &[u8], i: usize, j: usize) -> (Option<u8>, Option<u8>) {
    let before = b[..i].iter().rev().find(|c| !matches!(c, b' ' | b'\t'));
    let after = b[j..].iter().find(|c| !matches!(c, b' ' | b'\t'));
    (before.copied(), after.copied())
}

/// Where `b[i..]`'s comment, string or preprocessor line ends, if one starts at `i`.
fn skip(b: &[u8], i: usize, s: Syntax, at_line_start: bool) -> Option<usize> {
    let rest = &b[i..];
    let to = |pat: &[u8]| {
        rest.windows(pat.len())
            .skip(2)
            .position(|w| w == pat)
            .map_or(b.len(), |p| i + 2 + p + pat.len())
    };
    let line_end = || {
        rest.iter()
            .position(|&c| c == b'\n')
            .map_or(b.len(), |p| i + p)
    };
    if s.preprocessor && at_line_start && rest[0] == b'#' {
        // Up to the first newline not escaped by a trailing backslash.
        let mut j = i;
        while j < b.len() && !(b[j] == b'\n' && (j == 0 || b[j - 1] != b'\\')) {
            j += 1;
        }
        return Some(j);
    }
    if s.slash_comments && rest.starts_with(b"//") {
        return Some(line_end());
    }
    if s.slash_comments && rest.starts_with(b"/*") {
        return Some(to(b"*/"));
    }
    if s.hash_comments && rest[0] == b'#' && (i == 0 || b[i - 1] != b'$') {
        return Some(line_end());
    }
    if s.dash_comments && rest.starts_with(b"--[[") {
        return Some(to(b"]]"));
    }
    if s.dash_comments && rest.starts_with(b"--") {
        return Some(line_end());
    }
    let q = rest[0];
    if q == b'"' || q == b'\'' || (q == b'`' && s.backtick_strings) {
        let mut j = i + 1;
        while j < b.len() {
            match b[j] {
                b'\\' => j += 2,
                c if c == q => return Some(j + 1),
                // A lone quote (a Rust lifetime): not a string.
                b'\n' if q != b'`' => return None,
                _ => j += 1,
            }
        }
    }
    None
}

fn sites(source: &str, s: Syntax) -> Vec<Site> {
    let b = source.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line, mut line_start) = (0, 1, true);
    while i < b.len() {
        let c = b[i];
        if c == b'\n' || (line_start && (c == b' ' || c == b'\t')) {
            line += usize::from(c == b'\n');
            line_start = c == b'\n' || line_start;
            i += 1;
            continue;
        }
        let at_line_start = std::mem::replace(&mut line_start, false);
        if let Some(end) = skip(b, i, s, at_line_start) {
            line += b[i..end].iter().filter(|&&c| c == b'\n').count();
            i = end;
            continue;
        }
        if c.is_ascii_digit() && !(i > 0 && (is_ident(b[i - 1]) || b[i - 1] == b'.')) {
            let mut j = i;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            let mut k = j;
            while k < b.len() && matches!(b[k], b'u' | b'U' | b'l' | b'L') {
                k += 1;
            }
            let plain = !(k < b.len() && (is_ident(b[k]) || b[k] == b'.'))
                && !(j < b.len() && matches!(b[j], b'.' | b'x' | b'X' | b'b' | b'o' | b'e' | b'E'));
            match (plain, source[i..j].parse::<u64>()) {
                (true, Ok(v)) if v < u64::MAX => {
                    let mut replacements = vec![(v + 1).to_string()];
                    if v >= 1 {
                        replacements.push((v - 1).to_string());
                    }
                    out.push(Site {
                        start: i,
                        end: j,
                        line,
                        operator: "constant",
                        replacements,
                    });
                    i = k;
                }
                _ => {
                    // A float, hex or suffixed literal: skipped whole.
                    while i < b.len() && (is_ident(b[i]) || b[i] == b'.') {
                        i += 1;
                    }
                }
            }
            continue;
        }
        if is_ident(c) {
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            continue;
        }
        if let Some((tok, op, reps)) = TOKENS
            .iter()
            .find(|(t, ..)| b[i..].starts_with(t.as_bytes()))
        {
            if !reps.is_empty() {
                out.push(Site {
                    start: i,
                    end: i + tok.len(),
                    line,
                    operator: op,
                    replacements: reps.iter().map(|r| r.to_string()).collect(),
                });
            }
            i += tok.len();
            continue;
        }
        let (before, after) = neighbours(b, i, i + 1);
        let operand_before = before.is_some_and(|p| is_ident(p) || p == b')' || p == b']');
        let operand_after = after.is_some_and(|n| is_ident(n) || n == b'(');
        let spaced = i > 0 && b[i - 1] == b' ' && b.get(i + 1) == Some(&b' ');
        let replacements: &[&str] = match c {
            b'+' => &["-", "*"],
            b'-' => &["+"],
            b'*' => &["/", "+"],
            b'/' => &["*"],
            b'%' => &["/"],
            b'<' | b'>' if !spaced => &[],
            b'<' => &["<="],
            b'>' => &[">="],
            _ => &[],
        };
        let op = if matches!(c, b'<' | b'>') {
            "comparison"
        } else {
            "arithmetic"
        };
        if !replacements.is_empty() && (op == "comparison" || (operand_before && operand_after)) {
            out.push(Site {
                start: i,
                end: i + 1,
                line,
                operator: op,
                replacements: replacements.iter().map(|r| r.to_string()).collect(),
            });
        }
        i += 1;
    }
    out
}

/// Up to `max` candidate mutants of `source` (lines from `first_line` on), in a round robin over
/// the operators shuffled by `rng`: the same source and seed give the same list.
pub fn candidates(
    source: &str,
    language: Language,
    first_line: usize,
    max: usize,
    rng: &mut Rng,
) -> Vec<Mutant> {
    let mut groups: std::collections::BTreeMap<&str, Vec<(usize, usize)>> = Default::default();
    let all = sites(source, syntax(language));
    for (k, site) in all.iter().enumerate().filter(|(_, s)| s.line >= first_line) {
        for r in 0..site.replacements.len() {
            groups.entry(site.operator).or_default().push((k, r));
        }
    }
    let mut order: Vec<&str> = groups.keys().copied().collect();
    rng.shuffle(&mut order);
    for g in groups.values_mut() {
        rng.shuffle(g);
    }
    let mut out = Vec::new();
    while out.len() < max && groups.values().any(|g| !g.is_empty()) {
        for name in &order {
            let Some((k, r)) = groups.get_mut(name).and_then(Vec::pop) else {
                continue;
            };
            let site = &all[k];
            let new = &site.replacements[r];
            let text = format!("{}{new}{}", &source[..site.start], &source[site.end..]);
            let line_of = |s: &str, at: usize| {
                let from = s[..at].rfind('\n').map_or(0, |p| p + 1);
                let to = s[at..].find('\n').map_or(s.len(), |p| at + p);
                s[from..to].to_string()
            };
            out.push(Mutant {
                operator: site.operator.to_string(),
                line: site.line,
                what: format!("{} -> {new}", &source[site.start..site.end]),
                diff: vec![
                    format!("-{}", line_of(source, site.start)),
                    format!("+{}", line_of(&text, site.start)),
                ],
                source: text,
            });
            if out.len() == max {
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whats(source: &str, language: Language) -> Vec<String> {
        let mut rng = Rng::new("t");
        let mut all: Vec<String> = candidates(source, language, 1, 1000, &mut rng)
            .into_iter()
            .map(|m| m.what)
            .collect();
        all.sort();
        all
    }

    #[test]
    fn comments_strings_and_includes_are_left_alone() {
        let src = "#include <vector>\n// a + b < 3\nint f(int a) { /* 2 * 3 */ \
                   auto s = \"1 + 2\"; char c = '+'; return a * 2 + 1; }\n";
        assert_eq!(
            whats(src, Language::Cpp),
            [
                "* -> +", "* -> /", "+ -> *", "+ -> -", "1 -> 0", "1 -> 2", "2 -> 1", "2 -> 3"
            ]
        );
    }

    #[test]
    fn templates_are_not_comparisons_and_spaced_ones_are() {
        let src = "std::vector<int> v; if (i < n && v.size() >= 2) return;\n";
        let got = whats(src, Language::Cpp);
        assert!(got.contains(&"< -> <=".to_string()), "{got:?}");
        assert!(got.contains(&">= -> >".to_string()), "{got:?}");
        assert!(got.contains(&"&& -> ||".to_string()), "{got:?}");
        assert_eq!(
            got.iter().filter(|w| w.starts_with('<')).count(),
            1,
            "{got:?}"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_mutants_and_diffs_show_the_line() {
        let src = "int main() {\n  int x = 3;\n  return x - 1;\n}\n";
        let a = candidates(src, Language::C, 1, 3, &mut Rng::new("s"));
        let b = candidates(src, Language::C, 1, 3, &mut Rng::new("s"));
        assert_eq!(a.len(), 3);
        assert_eq!(
            a.iter().map(|m| &m.source).collect::<Vec<_>>(),
            b.iter().map(|m| &m.source).collect::<Vec<_>>()
        );
        let minus = candidates(src, Language::C, 3, 10, &mut Rng::new("s"));
        assert!(minus.iter().all(|m| m.line == 3), "only line 3 on");
        let m = minus.iter().find(|m| m.what == "- -> +").unwrap();
        assert_eq!(m.diff, ["-  return x - 1;", "+  return x + 1;"]);
    }
}
