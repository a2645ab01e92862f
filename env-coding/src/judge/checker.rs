//! Output checkers of the stdin/stdout judge: pure comparisons of the program's output with the
//! expected output, and the description of a special judge (a checker program; running it is the
//! judge's, see the parent module).

use serde::{Deserialize, Serialize};

use codegym_sandbox::lang::Language;

fn default_abs() -> f64 {
    1e-6
}

fn default_rel() -> f64 {
    1e-6
}

/// How a test's output is judged.
///
/// Serde's derive is kept as inherent functions (`remote = "Self"`) under the trait impls below,
/// which add what the derive misses.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(
    remote = "Self",
    tag = "type",
    rename_all = "snake_case",
    deny_unknown_fields
)]
pub enum Checker {
    /// Equal text, except that `\r\n` reads as `\n` and trailing newlines are ignored (verl's
    /// `stdout.rstrip("\n") == expected.rstrip("\n")`). Trailing spaces count.
    Exact,
    /// Equal as sequences of whitespace-separated tokens (most judges' default; the default).
    #[default]
    Tokens,
    /// Tokens; a pair of tokens that both parse as numbers is equal when
    /// `|a - e| <= abs_tol` or `|a - e| <= rel_tol * |e|` (so `-0.0` equals `0`), otherwise the
    /// tokens must be equal text (`nan` matches only `nan`, `inf` only `inf`).
    Float {
        #[serde(default = "default_abs")]
        abs_tol: f64,
        #[serde(default = "default_rel")]
        rel_tol: f64,
    },
    /// Tokens compared ignoring case (`YES` = `yes`).
    CaseInsensitive,
    /// The same multiset of lines (each without trailing whitespace; trailing blank lines ignored),
    /// in any order.
    UnorderedLines,
    /// A checker program in any supported language, testlib-style: it finds the test's input,
    /// the program's output and the expected output as the files `input.txt`, `output.txt` and
    /// `answer.txt` in its work dir (compiled languages also get them as `argv[1..=3]`, testlib's
    /// order), and exits 0 (accepted), 1 (wrong answer), 2 (presentation error); 3 or anything
    /// else (a crash, a timeout; an uncaught Python/Java/Node exception, which exits 1) is a
    /// failure of the checker: a machinery error, never a reward.
    /// Its stderr (or stdout) is the test's message.
    Special {
        #[serde(default)]
        language: Language,
        source: String,
    },
}

impl Serialize for Checker {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Checker::serialize(self, s)
    }
}

impl<'de> Deserialize<'de> for Checker {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        // Serde ignores the fields of an internally tagged unit variant, `deny_unknown_fields`
        // or not: `{"type": "tokens", "abs_tol": 0.1}` would judge by plain tokens, the tolerance
        // its author meant silently dropped.
        let value = serde_json::Value::deserialize(d)?;
        crate::reward::strict::object(&value).map_err(D::Error::custom)?;
        let checker = Checker::deserialize(&value).map_err(D::Error::custom)?;
        if !matches!(checker, Checker::Float { .. } | Checker::Special { .. })
            && let Some(extra) = value
                .as_object()
                .and_then(|m| m.keys().find(|k| *k != "type"))
        {
            return Err(D::Error::custom(format!(
                "unknown field `{extra}`: the `{}` checker has no fields",
                checker.kind()
            )));
        }
        Ok(checker)
    }
}

/// A built-in checker's decision: accepted, or a wrong answer with a short reason.
pub type Check = Result<(), String>;

impl Checker {
    /// Judges `actual` against `expected` with a built-in checker; `None` for [`Checker::Special`]
    /// (the judge runs it).
    pub fn check(&self, actual: &str, expected: &str) -> Option<Check> {
        Some(match self {
            Checker::Exact => exact(actual, expected),
            Checker::Tokens => tokens(actual, expected, |a, e| a == e),
            Checker::CaseInsensitive => tokens(actual, expected, |a, e| {
                a.len() == e.len() && a.to_lowercase() == e.to_lowercase()
            }),
            Checker::Float { abs_tol, rel_tol } => {
                tokens(actual, expected, |a, e| float_eq(a, e, *abs_tol, *rel_tol))
            }
            Checker::UnorderedLines => unordered_lines(actual, expected),
            Checker::Special { .. } => return None,
        })
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Checker::Exact => "exact",
            Checker::Tokens => "tokens",
            Checker::Float { .. } => "float",
            Checker::CaseInsensitive => "case_insensitive",
            Checker::UnorderedLines => "unordered_lines",
            Checker::Special { .. } => "special",
        }
    }
}

fn exact(actual: &str, expected: &str) -> Check {
    let norm = |s: &str| s.replace("\r\n", "\n").trim_end_matches('\n').to_string();
    let (a, e) = (norm(actual), norm(expected));
    if a == e {
        return Ok(());
    }
    let line = a
        .split('\n')
        .zip(e.split('\n'))
        .position(|(x, y)| x != y)
        .unwrap_or_else(|| a.split('\n').count().min(e.split('\n').count()));
    Err(format!("output differs at line {}", line + 1))
}

fn tokens(actual: &str, expected: &str, eq: impl Fn(&str, &str) -> bool) -> Check {
    let mut a = actual.split_whitespace();
    let mut e = expected.split_whitespace();
    let mut i = 0usize;
    loop {
        i += 1;
        match (a.next(), e.next()) {
            (None, None) => return Ok(()),
            (Some(x), Some(y)) if eq(x, y) => continue,
            (Some(x), Some(y)) => {
                return Err(format!(
                    "token {i}: expected {:?}, found {:?}",
                    clip(y),
                    clip(x)
                ));
            }
            (None, Some(_)) => return Err(format!("output ends before token {i}")),
            (Some(_), None) => return Err(format!("extra output from token {i}")),
        }
    }
}

/// Token text in messages, cut to a readable length.
fn clip(s: &str) -> String {
    if s.chars().count() <= 32 {
        s.to_string()
    } else {
        let head: String = s.chars().take(32).collect();
        format!("{head}...")
    }
}

fn float_eq(a: &str, e: &str, abs_tol: f64, rel_tol: f64) -> bool {
    if a == e {
        return true;
    }
    match (a.parse::<f64>(), e.parse::<f64>()) {
        (Ok(x), Ok(y)) if x.is_finite() && y.is_finite() => {
            let d = (x - y).abs();
            d <= abs_tol || d <= rel_tol * y.abs()
        }
        // Same infinity spelled differently (`inf` / `Infinity`); NaN never equals a number and
        // equals NaN only as identical text (above) or both NaN here.
        (Ok(x), Ok(y)) => (x.is_nan() && y.is_nan()) || x == y,
        _ => false,
    }
}

fn unordered_lines(actual: &str, expected: &str) -> Check {
    let lines = |s: &str| {
        let mut v: Vec<String> = s.lines().map(|l| l.trim_end().to_string()).collect();
        while v.last().is_some_and(|l| l.is_empty()) {
            v.pop();
        }
        v.sort_unstable();
        v
    };
    let (a, e) = (lines(actual), lines(expected));
    if a == e {
        Ok(())
    } else {
        Err(format!(
            "the lines differ as a multiset ({} lines, expected {})",
            a.len(),
            e.len()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(c: &Checker, a: &str, e: &str) -> bool {
        c.check(a, e).expect("built-in").is_ok()
    }

    #[test]
    fn exact_ignores_only_trailing_newlines_and_crlf() {
        let c = Checker::Exact;
        assert!(ok(&c, "1 2\n", "1 2"));
        assert!(ok(&c, "1 2\r\n3\r\n\n", "1 2\n3"));
        assert!(!ok(&c, "1 2 \n", "1 2\n"));
        assert!(!ok(&c, "1  2", "1 2"));
        assert_eq!(
            c.check("a\nb\nc", "a\nx\nc"),
            Some(Err("output differs at line 2".into()))
        );
    }

    #[test]
    fn tokens_and_case() {
        assert!(ok(&Checker::Tokens, "  1\t2 \n\n3   \n", "1 2 3"));
        assert!(!ok(&Checker::Tokens, "1 2", "1 2 3"));
        assert!(!ok(&Checker::Tokens, "1 2 3 4", "1 2 3"));
        assert!(ok(&Checker::CaseInsensitive, "YES\nno", "yes NO"));
        assert!(!ok(&Checker::CaseInsensitive, "yes", "no"));
        assert!(!ok(&Checker::Tokens, "", "1"));
        assert!(ok(&Checker::Tokens, "", "\n"));
    }

    #[test]
    fn float_tolerance_edge_cases() {
        let c = Checker::Float {
            abs_tol: 1e-6,
            rel_tol: 1e-9,
        };
        assert!(ok(&c, "0.3333333", "0.333333333"));
        assert!(!ok(&c, "0.3333", "0.333333333"));
        assert!(ok(&c, "-0.0", "0"));
        assert!(ok(&c, "0.000000", "-0.0000001"));
        assert!(
            ok(&c, "1e18", "1000000000000000000.5"),
            "relative tolerance"
        );
        assert!(ok(&c, "nan", "nan"));
        assert!(ok(&c, "NaN", "nan"), "both NaN");
        assert!(!ok(&c, "nan", "0"));
        assert!(!ok(&c, "0", "nan"));
        assert!(ok(&c, "inf", "Infinity"));
        assert!(!ok(&c, "inf", "-inf"));
        assert!(!ok(&c, "1e309", "1e308"));
        assert!(ok(&c, "YES 1.0000001", "YES 1"));
        assert!(!ok(&c, "yes 1", "YES 1"), "words are exact");
    }

    #[test]
    fn unordered_lines_is_a_multiset() {
        let c = Checker::UnorderedLines;
        assert!(ok(&c, "b\na \nc\n\n", "c\nb\na"));
        assert!(!ok(&c, "a\na\nb", "a\nb\nb"));
        assert!(!ok(&c, "a", "a\nb"));
    }

    #[test]
    fn huge_outputs_compare_without_quadratic_work() {
        let big: String = (0..200_000).map(|i| format!("{i}\n")).collect();
        assert!(ok(&Checker::Tokens, &big, &big));
        assert!(ok(&Checker::UnorderedLines, &big, &big));
        let mut other = big.clone();
        other.push_str("1\n");
        assert!(!ok(&Checker::Exact, &other, &big));
        assert!(!ok(&Checker::Tokens, &other, &big));
    }

    #[test]
    fn special_checkers_are_not_built_in_and_spec_json_round_trips() {
        let c: Checker = serde_json::from_value(serde_json::json!({
            "type": "special", "language": "cpp", "source": "int main(){}"}))
        .expect("parse");
        assert!(c.check("", "").is_none());
        let f: Checker = serde_json::from_value(serde_json::json!({"type": "float"})).expect("f");
        assert_eq!(
            f,
            Checker::Float {
                abs_tol: 1e-6,
                rel_tol: 1e-6
            }
        );
        assert!(serde_json::from_value::<Checker>(serde_json::json!({"type": "fuzzy"})).is_err());
        let e = serde_json::from_value::<Checker>(
            serde_json::json!({"type": "tokens", "abs_tol": 0.1}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown field `abs_tol`"), "{e}");
    }
}
