//! Appending a test suite to a program (the `appended_tests` component, MultiPL-E) whether the
//! program is a prompt plus a completion or a whole program.
//!
//! MultiPL-E's tests continue the prompt: in C++, Java, Rust, ... they start by closing the braces
//! the prompt opened (`}` ends the function, Java's then also the class after `main`), because a
//! completion stops before its function's closing brace. A model that writes the whole program
//! (an env step, a rollout) closes them itself, and the tests would then close them twice. So the
//! splice counts braces (outside strings, character literals and comments): the tests close `T`
//! more than they open; if the program leaves fewer than `T` open, its last closing braces are
//! taken out so that the tests close them. A completion in MultiPL-E's own convention leaves
//! exactly `T` open and is spliced unchanged. Languages without braces are appended as they are.

use codegym_sandbox::lang::Language;

/// `program`, then `tests`, with the program's surplus closing braces removed (see the module).
pub fn append_tests(program: &str, tests: &str, language: Language) -> String {
    let braces = matches!(
        language,
        Language::Cpp
            | Language::C
            | Language::Java
            | Language::Rust
            | Language::Go
            | Language::NodeJs
            | Language::TypeScript
            | Language::Php
            | Language::Perl
    );
    if !braces {
        return format!("{program}\n{tests}\n");
    }
    let (open_after_program, program_closers) = scan(program, language);
    let (tests_net, _) = scan(tests, language);
    let expected_open = (-tests_net).max(0) as usize;
    let open = open_after_program.max(0) as usize;
    if open >= expected_open {
        return format!("{program}\n{tests}\n");
    }
    // Take out the program's last `expected_open - open` closing braces.
    let remove = expected_open - open;
    let cut: Vec<usize> = program_closers.iter().rev().take(remove).copied().collect();
    let mut out: String = program
        .char_indices()
        .filter(|(i, _)| !cut.contains(i))
        .map(|(_, c)| c)
        .collect();
    out.push('\n');
    out.push_str(tests);
    out.push('\n');
    out
}

/// The net brace depth of `src` (opened minus closed) and the byte offsets of its closing braces,
/// skipping string and character literals and comments (C-family rules, `#` comments in Perl and
/// PHP; Rust lifetimes are not character literals).
fn scan(src: &str, language: Language) -> (i64, Vec<usize>) {
    let rust = language == Language::Rust;
    let hash_comments = matches!(language, Language::Perl | Language::Php);
    let b = src.as_bytes();
    let (mut depth, mut closers, mut i) = (0i64, Vec::new(), 0usize);
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'#' if hash_comments => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 1;
            }
            q @ (b'"' | b'`') => i = skip_quoted(b, i, q),
            b'\'' => {
                // A character literal: 'x', '\n', '\u{..}'; in Rust a lifetime ('a) is not.
                let close = if b.get(i + 1) == Some(&b'\\') {
                    b[i + 2..]
                        .iter()
                        .take(12)
                        .position(|&c| c == b'\'')
                        .map(|p| i + 2 + p)
                } else {
                    // One (possibly multi-byte) character, then the quote.
                    let len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 1 + len)
                };
                match close {
                    Some(end) => i = end,
                    None if rust => {}
                    // Perl/PHP/JS single-quoted strings.
                    None => i = skip_quoted(b, i, b'\''),
                }
            }
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                closers.push(i);
            }
            _ => {}
        }
        i += 1;
    }
    (depth, closers)
}

/// The offset of the quote closing the literal opened at `start` (backslash escapes).
fn skip_quoted(b: &[u8], start: usize, quote: u8) -> usize {
    let mut i = start + 1;
    while i < b.len() && b[i] != quote {
        if b[i] == b'\\' {
            i += 1;
        }
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPP_TESTS: &str = "}\nint main() {\n    assert(add(1, 2) == 3);\n}\n";

    #[test]
    fn a_completion_in_multipl_e_convention_is_unchanged() {
        let program = "long add(long x, long y) {\n    return x + y;\n";
        assert_eq!(
            append_tests(program, CPP_TESTS, Language::Cpp),
            format!("{program}\n{CPP_TESTS}\n")
        );
    }

    #[test]
    fn a_whole_program_has_its_surplus_braces_taken_out() {
        let program = "long add(long x, long y) {\n    return x + y; // }\n}\n";
        let out = append_tests(program, CPP_TESTS, Language::Cpp);
        assert_eq!(scan(&out, Language::Cpp).0, 0, "{out}");
        assert!(out.contains("// }"), "comments are kept: {out}");
        // Java: the tests close the method, add `main` and close the class.
        let tests = "    }\n    public static void main(String[] a) {\n    assert(add(1) == 2);\n    }\n\n}\n";
        let program = "class Problem {\n    public static long add(long x) {\n        String s = \"}\"; char c = '}';\n        return x + 1;\n    }\n}\n";
        let out = append_tests(program, tests, Language::Java);
        assert_eq!(scan(&out, Language::Java).0, 0, "{out}");
        assert!(out.contains("\"}\"") && out.contains("'}'"), "{out}");
        assert!(out.matches("public static void main").count() == 1);
    }

    #[test]
    fn rust_lifetimes_are_not_character_literals() {
        let tests = "}\n\nfn main() {\n    assert_eq!(f(\"a\"), \"a\");\n}\n";
        let program = "fn f<'a>(s: &'a str) -> &'a str {\n    s\n}\n";
        let out = append_tests(program, tests, Language::Rust);
        assert_eq!(scan(&out, Language::Rust).0, 0, "{out}");
    }

    #[test]
    fn languages_without_braces_are_appended() {
        assert_eq!(append_tests("x", "y", Language::Ruby), "x\ny\n");
    }
}
