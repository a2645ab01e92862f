//! What a synthesized task is made of, and how it is stored.
//!
//! - [`unified_diff`]: `git diff`'s form of one module's change (a mutant differs from its module
//!   in one region, so one hunk with three lines of context).
//! - [`problem_statement`]: the failing tests, each with the end of its failure message from the
//!   JUnit report. It never names a source module's line: `PATH.py:LINE` of a file that is not a
//!   test is cut from the messages, and no diff or module name is added, so it does not give the
//!   fix away.
//! - [`TaskFiles::write`]: the storage. The project is stored once (`repos/NAME/`, clean); a task's
//!   broken state is its setup command applying the mutation (`git apply` of a here-document), so
//!   N tasks of a project are one copy and N small patches. Its reference patch (`patches/ID.diff`)
//!   reverts the mutation; its hidden tests (`hidden/HASH/`, one directory for every task of the
//!   same test files) are those files as in the clean project. Another storage (a repository per
//!   task, a git bundle with a commit per task) is a change of this function alone.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

use super::SynthError;
use crate::repo::attacks::IN_PROCESS_FORGERIES;
use crate::repo::junit::TestCase;
use crate::tasks::RepoLimits;

/// Lines of context around a hunk, as `git diff` writes them.
const CONTEXT: usize = 3;
/// The marker ending the mutation's here-document in a task's setup (never a diff's line: diff
/// lines start with ` `, `+`, `-`, `@` or `\`).
const HEREDOC_END: &str = "CODEGYM_MUTATION";
/// Lines of a failure message kept in the problem statement.
const MESSAGE_LINES: usize = 6;

/// The unified diff turning `old` into `new` at `path` (empty when they are equal).
pub fn unified_diff(path: &str, old: &str, new: &str) -> String {
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    if prefix == a.len() && prefix == b.len() {
        return String::new();
    }
    let start = prefix.saturating_sub(CONTEXT);
    let (a_end, b_end) = (a.len() - suffix, b.len() - suffix);
    let tail = suffix.min(CONTEXT);
    let range = |from: usize, count: usize| match count {
        0 => format!("{from},0"),
        1 => format!("{}", from + 1),
        n => format!("{},{n}", from + 1),
    };
    let old_count = a_end + tail - start;
    let new_count = b_end + tail - start;
    let mut out = format!(
        "diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -{} +{} @@\n",
        range(start, old_count),
        range(start, new_count)
    );
    let mut line = |mark: char, text: &str| {
        out.push(mark);
        out.push_str(text);
        if !text.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
    };
    for l in &a[start..prefix] {
        line(' ', l);
    }
    for l in &a[prefix..a_end] {
        line('-', l);
    }
    for l in &b[prefix..b_end] {
        line('+', l);
    }
    for l in &a[a_end..a_end + tail] {
        line(' ', l);
    }
    out
}

/// The problem statement of a task whose `failing` tests fail (`cases`: the broken project's
/// report, for their messages); `test_files` are the project's test files (paths in messages to
/// other files are cut).
pub fn problem_statement(failing: &[String], cases: &[TestCase], test_files: &[String]) -> String {
    let by_id: BTreeMap<&str, &TestCase> = cases.iter().map(|c| (c.id.as_str(), c)).collect();
    let location = regex::Regex::new(r"[\w./-]+\.py:\d+").expect("a valid regex");
    // Object addresses differ from run to run: the same seed must give the same statement.
    let address = regex::Regex::new(r"(0x|\.\.\.x)[0-9a-fA-F]{4,}").expect("a valid regex");
    let mut out = String::from(
        "Some of this project's tests fail. Find the cause in the project's source (not in its \
         tests) and fix it, so that these tests pass and every other test still does:\n",
    );
    for id in failing {
        out.push_str(&format!("\n- `{id}`"));
        let Some(case) = by_id.get(id.as_str()) else {
            continue;
        };
        let text = if case.message.trim().is_empty() {
            last_lines(&case.detail)
        } else {
            case.message.clone()
        };
        let text = location.replace_all(&text, |m: &regex::Captures<'_>| {
            let file = m[0].split(':').next().unwrap_or("");
            match test_files
                .iter()
                .any(|t| t == file || t.ends_with(&format!("/{file}")))
            {
                true => m[0].to_string(),
                false => "(source)".to_string(),
            }
        });
        let text = address.replace_all(&text, "${1}...");
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let kept = &lines[..lines.len().min(MESSAGE_LINES)];
        if !kept.is_empty() {
            out.push_str(" fails with:\n\n```\n");
            for l in kept {
                let l: String = l.chars().take(200).collect();
                out.push_str(&l);
                out.push('\n');
            }
            out.push_str("```\n");
        }
    }
    out
}

/// The last error lines (`E   ...`) of a traceback, else its last line.
fn last_lines(detail: &str) -> String {
    let errors: Vec<&str> = detail
        .lines()
        .filter_map(|l| l.strip_prefix("E "))
        .map(str::trim)
        .collect();
    match errors.is_empty() {
        true => detail.lines().next_back().unwrap_or("").to_string(),
        false => errors.join("\n"),
    }
}

/// One synthesized task, ready to be stored.
pub struct TaskFiles<'a> {
    pub id: &'a str,
    /// The task's file name stem (`patches/STEM.diff`).
    pub stem: &'a str,
    /// The project's clean copy, relative to the output directory (`repos/NAME`).
    pub repository: &'a str,
    pub requirements: &'a [String],
    pub problem_statement: &'a str,
    /// The diff that breaks the clean project, and the one that fixes the broken one.
    pub mutation: &'a str,
    pub fix: &'a str,
    /// Where its hidden tests go (`hidden/...`, shared by the tasks of the same test files).
    pub hidden_dir: &'a str,
    /// The test files holding the task's tests, with their clean contents.
    pub test_files: &'a BTreeMap<String, Vec<u8>>,
    pub fail_to_pass: &'a [String],
    pub pass_to_pass: &'a [String],
    pub limits: RepoLimits,
}

impl TaskFiles<'_> {
    /// Writes the task's patch and hidden tests under `out` and returns its task line.
    pub fn write(&self, out: &Path) -> Result<String, SynthError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SynthError::Io { path, source }
        };
        let patch = out.join("patches").join(format!("{}.diff", self.stem));
        std::fs::create_dir_all(out.join("patches")).map_err(io(out))?;
        std::fs::write(&patch, self.fix).map_err(io(&patch))?;
        let hidden = out.join(self.hidden_dir);
        for (rel, bytes) in self.test_files {
            let path = hidden.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            std::fs::write(&path, bytes).map_err(io(&path))?;
        }
        let files: Vec<String> = self.test_files.keys().map(|f| shell_word(f)).collect();
        let line = json!({
            "version": 2,
            "id": self.id,
            "repository": self.repository,
            "setup": [format!("git apply <<'{HEREDOC_END}'\n{}{HEREDOC_END}", self.mutation)],
            "requirements": self.requirements,
            "problem_statement": self.problem_statement,
            "test_command": format!(
                "python -m pytest -q -p no:cacheprovider -o junit_family=xunit1 \
                 --junitxml=\"$CODEGYM_JUNIT\" {}",
                files.join(" ")
            ),
            "hidden_tests": self.hidden_dir,
            "fail_to_pass": self.fail_to_pass,
            "pass_to_pass": self.pass_to_pass,
            "patch": format!("patches/{}.diff", self.stem),
            "limits": self.limits,
            // pytest imports the patched module: the in-process forgeries hold against it.
            "known_weak": IN_PROCESS_FORGERIES
                .iter()
                .map(|(name, why)| (name.to_string(), json!(why)))
                .collect::<serde_json::Map<_, _>>(),
        });
        Ok(line.to_string())
    }

    /// Removes the patch [`TaskFiles::write`] wrote (a task that failed its check; its hidden
    /// tests may be another task's too, the caller removes those no task uses).
    pub fn remove(&self, out: &Path) {
        let _ = std::fs::remove_file(out.join("patches").join(format!("{}.diff", self.stem)));
    }
}

/// `s` as one shell word (quoted unless it is plainly safe).
pub fn shell_word(s: &str) -> String {
    match s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
    {
        true => s.to_string(),
        false => format!("'{}'", s.replace('\'', r"'\''")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_line_change_is_one_hunk_with_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let new = "a\nb\nc\nd\nE\nf\ng\nh\n";
        let d = unified_diff("m.py", old, new);
        assert_eq!(
            d,
            "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -2,7 +2,7 @@\n b\n c\n d\n-e\n+E\n f\n g\n h\n"
        );
        assert_eq!(unified_diff("m.py", old, old), "");
    }

    #[test]
    fn statements_cut_source_lines_and_addresses() {
        let case = |id: &str, message: &str| TestCase {
            id: id.into(),
            status: crate::repo::junit::TestStatus::Failed,
            message: message.into(),
            detail: String::new(),
        };
        let cases = [
            case(
                "t/test_a.py::test_x",
                "pkg/mod.py:12: TypeError at 0x7f02c8f6f240",
            ),
            case(
                "t/test_a.py::test_y",
                "t/test_a.py:3: assert <obj...x7f1112930250> == 1",
            ),
        ];
        let ids = [
            "t/test_a.py::test_x".to_string(),
            "t/test_a.py::test_y".into(),
        ];
        let text = problem_statement(&ids, &cases, &["t/test_a.py".into()]);
        assert!(text.contains("(source): TypeError at 0x..."), "{text}");
        assert!(
            text.contains("t/test_a.py:3: assert <obj...x...> == 1"),
            "{text}"
        );
        assert!(!text.contains("mod.py") && !text.contains("7f"), "{text}");
    }

    #[test]
    fn a_last_line_without_newline_is_marked() {
        let d = unified_diff("m.py", "a\nb", "a\nc");
        assert!(
            d.ends_with("-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"),
            "{d}"
        );
    }
}
