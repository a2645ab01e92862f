//! The project a synthesis starts from: a directory copied, or an sdist (`.tar.gz`) unpacked, into
//! the output's `repos/NAME/` (the one copy every task of the project shares), and its files sorted
//! into test files (pytest's `test_*.py` and `*_test.py`) and source modules (every other `.py`
//! file outside test, documentation and example directories, and not `setup.py` or `conftest.py`).
//!
//! An sdist is unpacked in Rust by the sandbox's unpacker of repository archives
//! (`codegym_sandbox::image::unpack_archive`, the one a task's `.tar.gz` repository goes through):
//! an entry leading outside the archive's root refuses the whole archive, so nothing lands outside
//! `repos/NAME/`, and the archive's one top-level directory (`six-1.17.0/`) is the project's root.

use std::path::Path;

use super::SynthError;

/// Directories never copied from a project directory (tool state, not the project's).
const SKIPPED_DIRS: &[&str] = &[".git", "__pycache__", ".pytest_cache", ".tox", ".venv"];
/// Directories whose `.py` files are neither tests nor source modules.
const NOT_SOURCE_DIRS: &[&str] = &["tests", "test", "docs", "doc", "documentation", "examples"];

/// The project's name: an sdist's file name without `.tar.gz`, a directory's own name.
pub fn project_name(source: &Path) -> String {
    let name = source
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "project".into());
    let name = name
        .strip_suffix(".tar.gz")
        .or_else(|| name.strip_suffix(".tgz"))
        .unwrap_or(&name);
    name.to_string()
}

/// Copies or unpacks `source` into `dest` (which must not exist yet).
pub fn materialize(source: &Path, dest: &Path) -> Result<(), SynthError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SynthError::Io { path, source }
    };
    if dest.exists() {
        return Err(SynthError::Source(format!(
            "{} exists already: synthesize into a new directory",
            dest.display()
        )));
    }
    if source.is_dir() {
        std::fs::create_dir_all(dest).map_err(io(dest))?;
        return copy_tree(source, dest).map_err(io(source));
    }
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    // The sandbox's unpacker of repository archives: nothing lands outside `dest`.
    codegym_sandbox::image::unpack_archive(source, dest)
        .map_err(|e| SynthError::Source(format!("{}: {e}", source.display())))
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        let kind = entry.file_type()?;
        if kind.is_dir() && !SKIPPED_DIRS.contains(&name.to_string_lossy().as_ref()) {
            std::fs::create_dir_all(to.join(&name))?;
            copy_tree(&entry.path(), &to.join(&name))?;
        } else if kind.is_file() && !name.to_string_lossy().ends_with(".pyc") {
            std::fs::copy(entry.path(), to.join(&name))?;
        }
    }
    Ok(())
}

/// The project's test files and source modules (paths relative to `root`, `/`-separated, sorted).
pub fn python_files(root: &Path) -> std::io::Result<(Vec<String>, Vec<String>)> {
    let mut all = Vec::new();
    walk(root, root, &mut all)?;
    all.sort();
    let (mut tests, mut modules) = (Vec::new(), Vec::new());
    for rel in all {
        let name = rel.rsplit('/').next().unwrap_or(&rel);
        if name.starts_with("test_") || name.ends_with("_test.py") {
            tests.push(rel);
        } else if name != "setup.py"
            && name != "conftest.py"
            && !rel
                .split('/')
                .any(|d| NOT_SOURCE_DIRS.contains(&d) || d.ends_with(".egg-info"))
        {
            modules.push(rel);
        }
    }
    Ok((tests, modules))
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = entry.path();
        if kind.is_dir() {
            walk(root, &path, out)?;
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "py") {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}

/// Whether `path` matches the shell-style `pattern` (`*` any run of characters, `/` included,
/// `?` one character).
pub fn glob_match(pattern: &str, path: &str) -> bool {
    fn go(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], s) || (!s.is_empty() && go(p, &s[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &s[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), path.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_paths() {
        assert!(glob_match("toolz/*.py", "toolz/itertoolz.py"));
        assert!(glob_match("*.py", "six.py"));
        assert!(glob_match("toolz/*toolz.py", "toolz/dicttoolz.py"));
        assert!(!glob_match("toolz/*toolz.py", "toolz/recipes.py"));
        assert!(glob_match("six.p?", "six.py"));
    }

    #[test]
    fn project_names_drop_the_archive_suffix() {
        assert_eq!(
            project_name(Path::new("/d/six-1.17.0.tar.gz")),
            "six-1.17.0"
        );
        assert_eq!(project_name(Path::new("/d/calc")), "calc");
    }
}
