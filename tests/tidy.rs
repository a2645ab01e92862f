//! Tidiness a machine can check, over the whole repository:
//! - every repository path that ARCHITECTURE.md and the user docs (README.md, `docs/`, the
//!   deployment's and the Python package's READMEs) name exists;
//! - no user-facing text (those docs, the `--help` of every subcommand) cites an issue
//!   number: the docs say what is true, not the history of how it came to be;
//! - no production `.rs` file is over 600 lines;
//! - every `.rs` file starts with its `//!` module doc;
//! - the wheel's build of the binary (`-p codegym`, what maturin runs) resolves every dependency
//!   with the features the workspace's build does, so neither rebuilds what the other built.
//!
//! Known exceptions, each waiting for a change in flight, are listed with why; an exception that is
//! no longer needed fails the test, so the lists only shrink.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;
#[path = "support/doc_blocks.rs"]
mod doc_blocks;
#[path = "support/help_text.rs"]
mod help_text;

use std::path::{Path, PathBuf};

use doc_blocks::{Marker, blocks, doc_files, prose, repo_root};
use help_text::{help_citations, issue_citations};

/// The most lines a production `.rs` file may have.
const MAX_LINES: usize = 600;

/// Production files over [`MAX_LINES`] that are being split: (path, why it is here). Empty today.
const KNOWN_LONG: &[(&str, &str)] = &[];

/// User documentation beside README.md and `docs/` (their examples are run elsewhere: the Python
/// package's by its `test_readme.py`, the deployment's by `tests/container.sh` and `kube_play.sh`).
const OTHER_DOCS: &[&str] = &["deploy/README.md", "trainer-bridge/python/README.md"];

/// Documentation pages other changes in flight add: links to them are allowed until they exist.
const PAGES_IN_FLIGHT: &[&str] = &[];

/// Every file and directory of the repository, relative to its root, without build outputs,
/// virtual environments, dependencies and hidden directories.
fn repo_paths() -> Vec<PathBuf> {
    fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
        let dir = root.join(rel);
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let entry = entry.expect("dir entry");
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name == "target" || name == "node_modules" {
                continue;
            }
            let path = rel.join(&*name);
            let is_dir = entry.file_type().expect("file type").is_dir();
            out.push(path.clone());
            if is_dir {
                walk(root, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo_root(), Path::new(""), &mut out);
    out
}

fn read(rel: &Path) -> String {
    std::fs::read_to_string(repo_root().join(rel))
        .unwrap_or_else(|e| panic!("read {}: {e}", rel.display()))
}

/// README.md, `docs/` and [`OTHER_DOCS`].
fn user_docs() -> Vec<PathBuf> {
    let mut files = doc_files();
    files.extend(OTHER_DOCS.iter().map(PathBuf::from));
    files
}

/// The path-like words of a Markdown line: inline code spans and link targets that could name a
/// file of the repository (a `/` in them, no spaces, no URL, no placeholders).
fn named_paths(line: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    // Link targets: `](target)`; they are always paths (relative to the file), unless URLs.
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split('#').next().unwrap_or("");
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            out.push((target.to_string(), true));
        }
        rest = &after[end..];
    }
    // Code spans.
    for (i, span) in line.split('`').enumerate() {
        let path_like = span.contains('/')
            && !span.starts_with('/')
            && !span.contains("//")
            && span
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c));
        if i % 2 == 1 && path_like {
            out.push((span.to_string(), false));
        }
    }
    out
}

/// Whether `named` (from a file in `dir`) names something that exists: relative to the root or to
/// `dir`, or, for a code span, as the tail of a repository path (ARCHITECTURE.md names files within
/// the crate its section is about). A code span that is not a file name (an env id such as
/// `classic/CartPole-v1`) is only checked when its first component is a top-level entry.
fn exists(named: &str, link: bool, dir: &Path, paths: &[PathBuf]) -> bool {
    let named = named.trim_end_matches('/');
    let root = repo_root();
    if root.join(named).exists() || root.join(dir).join(named).exists() {
        return true;
    }
    if PAGES_IN_FLIGHT
        .iter()
        .any(|p| root.join(dir).join(named) == root.join(p))
    {
        return true;
    }
    if link {
        return false;
    }
    let first = named.split('/').next().unwrap_or("");
    let last = named.rsplit('/').next().unwrap_or("");
    if !root.join(first).exists() && !last.contains('.') {
        return true; // not a path: an env id, a model name, a MIME type
    }
    let tail = format!("/{named}");
    paths.iter().any(|p| p.to_string_lossy().ends_with(&tail))
}

#[test]
fn every_path_the_docs_name_exists() {
    let paths = repo_paths();
    let mut files = user_docs();
    files.push(PathBuf::from("ARCHITECTURE.md"));
    let mut missing = Vec::new();
    for file in &files {
        let dir = file.parent().unwrap_or(Path::new(""));
        let text = read(file);
        for (n, line) in prose(&text) {
            for (named, link) in named_paths(line) {
                if !exists(&named, link, dir, &paths) {
                    missing.push(format!("{}:{n}: {named}", file.display()));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "named but missing:\n{}",
        missing.join("\n")
    );
    for page in PAGES_IN_FLIGHT {
        assert!(
            !repo_root().join(page).exists(),
            "{page} exists now: remove it from PAGES_IN_FLIGHT"
        );
    }
}

#[test]
fn issue_citations_are_recognised() {
    let text = "see issue 12\nIssue #7 too\n(#3)\nFILE#EPISODE_ID and runs/a.jsonl#TASK#0\n# Title\nissues are welcome";
    assert_eq!(
        issue_citations(text).len(),
        3,
        "{:?}",
        issue_citations(text)
    );
}

#[test]
fn user_facing_text_cites_no_issue_numbers() {
    let mut found = Vec::new();
    for file in user_docs() {
        for hit in issue_citations(&read(&file)) {
            found.push(format!("{}: {hit}", file.display()));
        }
    }
    found.extend(help_citations(codegym_bin::BIN));
    assert!(
        found.is_empty(),
        "issue numbers in user-facing text:\n{}",
        found.join("\n")
    );
}

/// Production Rust files: under a crate's `src/`, not unit-test files.
fn production_rs(paths: &[PathBuf]) -> Vec<&PathBuf> {
    paths
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .filter(|p| p.components().any(|c| c.as_os_str() == "src"))
        .filter(|p| p.file_name().is_some_and(|n| n != "tests.rs"))
        .filter(|p| !p.components().any(|c| c.as_os_str() == "tests"))
        .collect()
}

#[test]
fn no_production_file_is_over_600_lines() {
    let paths = repo_paths();
    let files = production_rs(&paths);
    assert!(
        files.len() > 50,
        "found only {} production files",
        files.len()
    );
    let mut long = Vec::new();
    for file in files {
        let lines = read(file).lines().count();
        let known = KNOWN_LONG.iter().any(|(p, _)| Path::new(p) == file);
        if lines > MAX_LINES && !known {
            long.push(format!("{}: {lines} lines", file.display()));
        }
        if lines <= MAX_LINES && known {
            long.push(format!(
                "{} is {lines} lines now: remove it from KNOWN_LONG",
                file.display()
            ));
        }
    }
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn every_rust_file_starts_with_its_module_doc() {
    let paths = repo_paths();
    let undocumented: Vec<String> = paths
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        // The audit's exploits are programs a policy would write (data, embedded by build.rs),
        // not modules of codegym.
        .filter(|p| !p.starts_with("env-coding/audit/exploits"))
        .filter(|p| {
            let text = read(p);
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            !first.starts_with("//!")
        })
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        undocumented.is_empty(),
        "no `//!` doc first:\n{}",
        undocumented.join("\n")
    );
}

#[test]
fn fences_markers_and_prose_are_read_as_written() {
    let text = "Intro `a/b.rs`.\n\n<!-- example: not-run (a sample) -->\n```text\nx\n```\n\n````md\n```sh\ny\n```\n````\n<!-- example: serve -->\n```sh\ncodegym serve\n```\n<!-- example: flags-only -->\n```sh\nz\n```\nEnd.\n";
    let found = blocks(Path::new("t.md"), text);
    let shapes: Vec<(usize, &str, &Marker, &str)> = found
        .iter()
        .map(|b| (b.line, b.lang.as_str(), &b.marker, b.body.as_str()))
        .collect();
    assert_eq!(
        shapes,
        vec![
            (4, "text", &Marker::NotRun("a sample".into()), "x\n"),
            (8, "md", &Marker::None, "```sh\ny\n```\n"),
            (14, "sh", &Marker::Serve, "codegym serve\n"),
            // A flags-only marker without its reason is not a marker the tests accept.
            (18, "sh", &Marker::Unknown("flags-only".into()), "z\n"),
        ]
    );
    let kept: Vec<usize> = prose(text).iter().map(|(n, _)| *n).collect();
    assert_eq!(kept, vec![1, 2, 3, 7, 13, 17, 21]);
}

/// `(package, features)` for every normal and build dependency `cargo tree ARGS` resolves.
#[allow(clippy::disallowed_methods)] // the test asks cargo how it resolves the workspace
fn resolved_features(args: &[&str]) -> std::collections::BTreeMap<String, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(repo_root())
        .args([
            "tree",
            "--locked",
            "--offline",
            "-e",
            "normal,build",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}|{f}"])
        .args(args)
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('|'))
        .map(|(p, f)| {
            (
                p.trim_end_matches(" (*)").to_owned(),
                f.trim_end_matches(" (*)").to_owned(),
            )
        })
        .collect()
}

#[test]
fn the_wheels_build_and_the_workspaces_resolve_features_alike() {
    let wheel = resolved_features(&["-p", "codegym"]);
    let workspace = resolved_features(&["--workspace"]);
    assert!(wheel.len() > 100, "too few packages: {}", wheel.len());
    let differ: Vec<String> = wheel
        .iter()
        .filter_map(|(p, f)| {
            let other = workspace.get(p)?;
            (other != f).then(|| format!("{p}: [{f}] alone, [{other}] in the workspace"))
        })
        .collect();
    assert!(
        differ.is_empty(),
        "the wheel's build would compile these (and every crate above them) a second time: give \
         the workspace dependency every feature a member adds\n{}",
        differ.join("\n")
    );
}
