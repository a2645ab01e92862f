//! The project a synthesis starts from: a directory copied, or an sdist (`.tar.gz`) unpacked, into
//! the output's `repos/NAME/` (the one copy every task of the project shares), and its files sorted
//! into test files (pytest's `test_*.py` and `*_test.py`) and source modules (every other `.py`
//! file outside test, documentation and example directories, and not `setup.py` or `conftest.py`).
//!
//! An sdist is unpacked here, in Rust: an entry whose path is absolute or has a `..` component is
//! refused (the whole archive is), and only regular files and directories are created (links,
//! devices and pax headers are skipped), so nothing lands outside `repos/NAME/`. The archive's one
//! top-level directory (`six-1.17.0/`) is the project's root.

use std::path::{Component, Path, PathBuf};

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
    std::fs::create_dir_all(dest).map_err(io(dest))?;
    if source.is_dir() {
        return copy_tree(source, dest).map_err(io(source));
    }
    let file = std::fs::File::open(source).map_err(io(source))?;
    unpack(flate2::read::GzDecoder::new(file), dest).map_err(|e| match e {
        Unpack::Io(e) => SynthError::Io {
            path: source.to_path_buf(),
            source: e,
        },
        Unpack::Escapes(entry) => SynthError::Source(format!(
            "{}: the entry {entry:?} leads outside the archive's root",
            source.display()
        )),
    })
}

enum Unpack {
    Io(std::io::Error),
    Escapes(String),
}

fn unpack(reader: impl std::io::Read, dest: &Path) -> Result<(), Unpack> {
    let mut archive = tar::Archive::new(reader);
    let mut entries: Vec<(PathBuf, bool, Vec<u8>)> = Vec::new();
    for entry in archive.entries().map_err(Unpack::Io)? {
        let mut entry = entry.map_err(Unpack::Io)?;
        let path = entry.path().map_err(Unpack::Io)?.into_owned();
        if path.as_os_str().is_empty()
            || path
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(Unpack::Escapes(path.display().to_string()));
        }
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            entries.push((path, true, Vec::new()));
        } else if kind.is_file() {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes).map_err(Unpack::Io)?;
            entries.push((path, false, bytes));
        } else {
            tracing::debug!(entry = %path.display(), "sdist entry skipped: not a file or dir");
        }
    }
    // Every entry under one top-level directory: that directory is the project's root.
    let top = |p: &Path| p.components().next().map(|c| c.as_os_str().to_owned());
    let first = entries.first().and_then(|(p, _, _)| top(p));
    let strip = first.filter(|f| {
        entries
            .iter()
            .all(|(p, dir, _)| top(p).as_ref() == Some(f) && (*dir || p.components().count() > 1))
    });
    for (path, dir, bytes) in entries {
        let rel = match &strip {
            Some(f) => path.strip_prefix(f).unwrap_or(&path).to_path_buf(),
            None => path,
        };
        let target = dest.join(&rel);
        if dir {
            std::fs::create_dir_all(&target).map_err(Unpack::Io)?;
            continue;
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(Unpack::Io)?;
        }
        std::fs::write(&target, bytes).map_err(Unpack::Io)?;
    }
    Ok(())
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
