//! Every language the sandbox runs, as data (`table.rs`, one row per language): SandboxFusion's
//! names, the Debian packages that provide a toolchain, how a submission is compiled (if at all)
//! and run, and the per-language limit overrides some runtimes need (the JVM's address space,
//! thread-hungry runtimes).
//!
//! Nothing here starts a process: the sandbox (`sandbox::compiled`) executes these commands under
//! every isolation layer. Toolchains are resolved once per process from absolute paths of the
//! distribution's packages ([`toolchain`]); compiled artifacts are shared through [`cache`].

pub mod cache;
mod table;
pub mod toolchain;
mod version;
pub use version::toolchain_version;

use serde::{Deserialize, Serialize};

use crate::Limits;

/// A language a program may be written in. Serialized with SandboxFusion's names.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Language {
    /// The sandbox's original path: the resolved CPython, warm fork where available.
    #[default]
    Python,
    Cpp,
    C,
    Rust,
    Go,
    Java,
    #[serde(rename = "nodejs")]
    NodeJs,
    #[serde(rename = "typescript")]
    TypeScript,
    Bash,
    Ruby,
    Php,
    Lua,
    Perl,
}

/// Where compiled artifacts go, relative to the work dir: the compile step writes them there, and
/// a run finds them (mode 0755, copies of the cached bytes) at the same place.
pub const ARTIFACT_DIR: &str = ".codegym-bin";

impl Language {
    /// Every language, in the order `codegym doctor` lists them.
    pub const ALL: [Language; 13] = [
        Language::Python,
        Language::Cpp,
        Language::C,
        Language::Rust,
        Language::Go,
        Language::Java,
        Language::NodeJs,
        Language::TypeScript,
        Language::Bash,
        Language::Ruby,
        Language::Php,
        Language::Lua,
        Language::Perl,
    ];

    /// This language's row of the table.
    pub(crate) fn row(self) -> &'static table::Row {
        let row = &table::ROWS[self as usize];
        debug_assert_eq!(row.language, self, "the table is in the enum's order");
        row
    }

    /// SandboxFusion's name (`cpp`, `nodejs`, ...).
    pub fn name(self) -> &'static str {
        self.row().name
    }

    /// A language from its name or a common alias (`c++`, `js`, `javascript`, `ts`, `python3`,
    /// `golang`, `sh`), case-insensitively.
    pub fn parse(name: &str) -> Result<Language, UnknownLanguage> {
        let lower = name.trim().to_ascii_lowercase();
        let alias = match lower.as_str() {
            "py" | "python3" => "python",
            "c++" | "cc" | "cxx" => "cpp",
            "rs" => "rust",
            "golang" => "go",
            "js" | "javascript" | "node" => "nodejs",
            "ts" => "typescript",
            "sh" => "bash",
            "rb" => "ruby",
            "pl" => "perl",
            other => other,
        };
        Language::ALL
            .into_iter()
            .find(|l| l.name() == alias)
            .ok_or_else(|| UnknownLanguage(name.to_string()))
    }

    /// The Debian packages that provide this language's toolchain (what docs/languages.md tells
    /// users to install and what CI installs).
    pub fn packages(self) -> &'static [&'static str] {
        self.row().packages
    }

    /// The file the submission is written to (Java: named after its public class, see
    /// [`source_file`]).
    fn default_source_file(self) -> &'static str {
        self.row().source_file
    }

    /// The tags of a fenced block in this language (`""`: an untagged block), from `code-extract`'s
    /// table (shared with the rollout engine; every language is in it, see the tests).
    pub fn fence_tags(self) -> &'static [&'static str] {
        code_extract::fence_tags(self.name()).unwrap_or(&[""])
    }

    /// Whether a compile step precedes the run (and its artifacts are cached).
    pub fn is_compiled(self) -> bool {
        self.row().compile.is_some()
    }

    /// The run's limits after this language's overrides. Runtimes that start threads of their own
    /// (the JVM's GC and JIT threads, Go's scheduler threads) need more than the Python default
    /// of `max_processes`; this only raises the floor, the caller's larger values stay.
    pub fn run_limits(self, base: Limits) -> Limits {
        Limits {
            max_processes: base.max_processes.max(self.row().min_processes),
            ..base
        }
    }

    /// The address space a run may reserve when there is no memory cgroup and `RLIMIT_AS` is the
    /// memory limit (see [`table::Row::extra_address_space`]). `None`: the memory limit itself.
    pub fn address_space(self, memory_bytes: u64) -> Option<u64> {
        self.row()
            .extra_address_space
            .map(|extra| memory_bytes.saturating_add(extra))
    }
}

impl std::fmt::Display for Language {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Language {
    type Err = UnknownLanguage;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Language::parse(s)
    }
}

/// A language name codegym does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown language {0:?} (known: python, cpp, c, rust, go, java, nodejs, typescript, bash, ruby, php, lua, perl)"
)]
pub struct UnknownLanguage(pub String);

/// The name the submission's source gets in the work dir. Java requires a public class to live in
/// a file of its name, so the first `public class X` (or `public final class X`...) names it;
/// `Main.java` otherwise.
pub fn source_file(language: Language, source: &str) -> String {
    if language == Language::Java
        && let Some(class) = public_class(source)
    {
        return format!("{class}.java");
    }
    language.default_source_file().to_string()
}

/// The main class a Java run starts: the public class, else the last class declared before the
/// first `static void main` (MultiPL-E's `class Problem`, not public), else `Main`.
pub fn java_main_class(source: &str) -> String {
    public_class(source)
        .or_else(|| class_declaring_main(source))
        .unwrap_or_else(|| "Main".to_string())
}

/// The last `class X` declared before the first line declaring `static void main`.
fn class_declaring_main(source: &str) -> Option<String> {
    let mut last = None;
    for line in source.lines() {
        if line.contains("static void main") {
            return last;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(i) = words.iter().position(|w| *w == "class") {
            let name: String = words
                .get(i + 1)
                .map(|w| {
                    w.chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
                        .collect()
                })
                .unwrap_or_default();
            if !name.is_empty() {
                last = Some(name);
            }
        }
    }
    None
}

/// The identifier after the first top-level-looking `public ... class`.
fn public_class(source: &str) -> Option<String> {
    for line in source.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() != Some(&"public") {
            continue;
        }
        if let Some(i) = words.iter().position(|w| *w == "class") {
            let name: String = words
                .get(i + 1)?
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
                .collect();
            if !name.is_empty() {
                return Some(name);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_aliases_resolve() {
        for l in Language::ALL {
            // Issue 14: code-extract's fence table knows every language by its name.
            assert!(code_extract::fence_tags(l.name()).is_some(), "{l}");
            assert_eq!(Language::parse(l.name()), Ok(l));
            let json = serde_json::to_string(&l).unwrap();
            assert_eq!(json, format!("\"{}\"", l.name()));
        }
        assert_eq!(Language::parse("C++"), Ok(Language::Cpp));
        assert_eq!(Language::parse("javascript"), Ok(Language::NodeJs));
        assert!(Language::parse("cobol").is_err());
    }

    #[test]
    fn java_files_are_named_after_the_public_class() {
        let src = "import java.util.*;\npublic final class Solution {\n}\n";
        assert_eq!(source_file(Language::Java, src), "Solution.java");
        assert_eq!(java_main_class(src), "Solution");
        assert_eq!(source_file(Language::Java, "class A {}"), "Main.java");
        // MultiPL-E: a package-private class holding main.
        let problem = "import java.util.*;\nclass Problem {\n    public static int f() { return 1; }\n    public static void main(String[] args) {\n    }\n}\n";
        assert_eq!(java_main_class(problem), "Problem");
        assert_eq!(java_main_class("class A {}"), "Main");
        assert_eq!(source_file(Language::Cpp, "int main(){}"), "main.cpp");
    }
}
