//! The paths a unified diff touches, read from its headers (a task's test patch, SWE-bench's
//! instances): what scoring protects and what the importers name as test files.

/// The paths a unified diff touches (both sides of a rename), in order, each once.
pub(crate) fn diff_paths(diff: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, path) in diff_headers(diff) {
        if !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

/// The paths of a unified diff's headers, each with whether it names the new side (`+++`,
/// `rename to`): from its `---`/`+++` and `rename from`/`rename to` lines, without git's `a/`
/// and `b/` prefixes; `/dev/null` is none. Hunks are skipped by their line counts, so a removed
/// line `-- x` is no header.
pub(crate) fn diff_headers(diff: &str) -> Vec<(bool, String)> {
    let mut out: Vec<(bool, String)> = Vec::new();
    // Lines left in the current hunk: (old side, new side).
    let mut left = (0u64, 0u64);
    for line in diff.lines() {
        if left != (0, 0) {
            match line.as_bytes().first() {
                Some(b'-') => left.0 = left.0.saturating_sub(1),
                Some(b'+') => left.1 = left.1.saturating_sub(1),
                Some(b'\\') => {}
                _ => left = (left.0.saturating_sub(1), left.1.saturating_sub(1)),
            }
            continue;
        }
        if let Some(counts) = hunk_counts(line) {
            left = counts;
            continue;
        }
        let new = line.starts_with("+++ ") || line.starts_with("rename to ");
        let path = if let Some(p) = line
            .strip_prefix("--- ")
            .or_else(|| line.strip_prefix("+++ "))
        {
            // A timestamp after a tab (diff -u's) is not part of the name.
            let p = p.split('\t').next().unwrap_or(p).trim_matches('"');
            p.strip_prefix("a/")
                .or_else(|| p.strip_prefix("b/"))
                .unwrap_or(p)
        } else if let Some(p) = line
            .strip_prefix("rename from ")
            .or_else(|| line.strip_prefix("rename to "))
        {
            p.trim_matches('"')
        } else {
            continue;
        };
        if path != "/dev/null" && !path.is_empty() {
            out.push((new, path.to_string()));
        }
    }
    out
}

/// A hunk header's line counts, `@@ -l[,s] +l[,s] @@` (a count left out is 1).
fn hunk_counts(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix("@@ -")?;
    let (old, rest) = rest.split_once(" +")?;
    let new = rest.split_once(" @@")?.0;
    let count = |r: &str| match r.split_once(',') {
        Some((_, n)) => n.parse().ok(),
        None => r.parse::<u64>().ok().map(|_| 1),
    };
    Some((count(old)?, count(new)?))
}

#[cfg(test)]
mod tests {
    use super::diff_headers;

    #[test]
    fn a_diffs_paths_are_its_headers_not_its_hunks_lines() {
        let diff = "diff --git a/t.py b/t.py\n--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n\
            --- not/a/header\n+++ nor/this\n--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+x\n\
            diff --git a/old.py b/moved.py\nsimilarity index 100%\nrename from old.py\nrename to moved.py\n";
        assert_eq!(
            diff_headers(diff),
            [
                (false, "t.py".to_string()),
                (true, "t.py".to_string()),
                (true, "new.py".to_string()),
                (false, "old.py".to_string()),
                (true, "moved.py".to_string()),
            ]
        );
    }
}
