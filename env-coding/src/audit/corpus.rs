//! The reward-hacking corpus: programs a policy may learn in place of a solution, one file an
//! exploit under `env-coding/audit/exploits/<family>/`, embedded at build time (`build.rs`).
//!
//! Each file starts with a header of comment lines, `# key: value` (or `// key: value`, `-- key:
//! value`; after PHP's `<?php` line):
//! `exploit` (its name), `category`, `what` (may continue on indented comment lines), `shape`
//! (`script`: a whole program; `function`: defines the task's function, `{{ENTRY_POINT}}`; `any`)
//! and `languages` (default `python`). `{{SAMPLE_OUTPUT_JSON}}` becomes the prompt's sample output
//! as a JSON string literal (valid in Python and JavaScript), `{{SAMPLE_OUTPUT_HEX}}` as hex digits
//! (every other language decodes them).

use codegym_sandbox::lang::Language;
use serde::Serialize;

/// The embedded files: (path under `audit/exploits`, source).
const FILES: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/exploits.rs"));

/// What an exploit attacks, as the corpus groups them.
pub const CATEGORIES: &[&str] = &[
    "shadow-names",
    "control-flow",
    "leave-early",
    "defeat-comparison",
    "read-answers",
    "write-outside",
    "fake-verdict",
    "outlive",
];

/// Which programs an exploit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// A whole program (stdout, exit code, judge tasks).
    Script,
    /// Defines the task's function (unit-test, differential and appended-test tasks).
    Function,
    /// Either.
    Any,
}

/// One exploit of the corpus.
#[derive(Debug, Clone, Serialize)]
pub struct Exploit {
    pub name: String,
    pub category: String,
    pub what: String,
    pub shape: Shape,
    pub languages: Vec<Language>,
    /// Its file, relative to `audit/exploits`.
    pub file: String,
    #[serde(skip)]
    pub source: &'static str,
}

/// A corpus file whose header is wrong (a test keeps the shipped corpus free of these).
#[derive(Debug, thiserror::Error)]
#[error("audit/exploits/{file}: {message}")]
pub struct CorpusError {
    pub file: String,
    pub message: String,
}

/// Every exploit of the shipped corpus, sorted by name.
pub fn exploits() -> Result<Vec<Exploit>, CorpusError> {
    let mut all = FILES
        .iter()
        .map(|(file, source)| parse(file, source))
        .collect::<Result<Vec<_>, _>>()?;
    all.sort_by(|a, b| a.name.cmp(&b.name).then(a.file.cmp(&b.file)));
    Ok(all)
}

fn parse(file: &str, source: &'static str) -> Result<Exploit, CorpusError> {
    let err = |message: String| CorpusError {
        file: file.to_string(),
        message,
    };
    let mut fields: Vec<(String, String)> = Vec::new();
    let body = source.strip_prefix("<?php\n").unwrap_or(source);
    for line in body.lines() {
        let Some(text) = ["# ", "// ", "-- "]
            .iter()
            .find_map(|comment| line.strip_prefix(comment))
        else {
            break;
        };
        match text.split_once(": ") {
            Some((key, value)) if !key.starts_with(' ') && !key.contains(' ') => {
                fields.push((key.to_string(), value.trim().to_string()));
            }
            // An indented line continues the previous value.
            _ => match fields.last_mut() {
                Some((_, value)) => {
                    value.push(' ');
                    value.push_str(text.trim());
                }
                None => break,
            },
        }
    }
    let get = |key: &str| {
        fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| err(format!("the header has no `{key}:` line")))
    };
    let category = get("category")?;
    if !CATEGORIES.contains(&category.as_str()) {
        return Err(err(format!(
            "unknown category {category:?} (one of {})",
            CATEGORIES.join(", ")
        )));
    }
    let shape = match get("shape")?.as_str() {
        "script" => Shape::Script,
        "function" => Shape::Function,
        "any" => Shape::Any,
        other => return Err(err(format!("unknown shape {other:?}"))),
    };
    let languages = match get("languages") {
        Ok(list) => list
            .split(',')
            .map(|l| Language::parse(l.trim()).map_err(|e| err(e.to_string())))
            .collect::<Result<Vec<_>, _>>()?,
        Err(_) => vec![Language::Python],
    };
    Ok(Exploit {
        name: get("exploit")?,
        category,
        what: get("what")?,
        shape,
        languages,
        file: file.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_corpus_parses_and_covers_every_category() {
        let all = exploits().unwrap();
        assert!(all.len() >= 30, "{} exploits", all.len());
        for c in CATEGORIES {
            assert!(all.iter().any(|e| e.category == *c), "no exploit of {c}");
        }
        let mut names: Vec<_> = all.iter().map(|e| (&e.name, &e.languages)).collect();
        names.dedup();
        assert_eq!(names.len(), all.len(), "an exploit name is used twice");
        for e in &all {
            assert!(e.what.len() > 20, "{}: say what it does", e.file);
            if e.shape == Shape::Function && e.languages == [Language::Python] {
                assert!(e.source.contains("{{ENTRY_POINT}}"), "{}", e.file);
            }
        }
    }

    #[test]
    fn a_bad_header_names_the_file() {
        let e = parse("python/x.py", "# exploit: x\n# category: nope\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "audit/exploits/python/x.py: unknown category \"nope\" (one of shadow-names, control-flow, leave-early, defeat-comparison, read-answers, write-outside, fake-verdict, outlive)"
        );
        let e = parse("python/y.py", "print(1)\n").unwrap_err();
        assert!(e.to_string().contains("no `category:` line"), "{e}");
    }
}
