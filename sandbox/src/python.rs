//! Resolving the real Python interpreter once (a pyenv shim costs ~100 ms per start).

use std::path::{Path, PathBuf};

use super::request::SandboxError;

/// The resolved interpreter and the install trees it must be able to read.
#[derive(Debug, Clone)]
pub(crate) struct PythonInfo {
    pub exe: PathBuf,
    /// `sys.prefix`, `sys.base_prefix`, `sys.exec_prefix` (deduplicated, canonical).
    pub prefixes: Vec<PathBuf>,
    /// The install's site-packages directories that exist (`site.getsitepackages()`).
    pub site_dirs: Vec<PathBuf>,
}

/// `configured`, else `$CODEGYM_PYTHON`, else whatever `python3` on PATH really runs.
#[allow(clippy::disallowed_methods)] // the sandbox module is the one place that spawns processes
pub(crate) fn resolve(configured: Option<&Path>) -> Result<PythonInfo, SandboxError> {
    let start: PathBuf = match configured {
        Some(p) => p.to_path_buf(),
        None => std::env::var_os("CODEGYM_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("python3")),
    };
    // Ask the interpreter itself: this follows shims and venvs to the real binary.
    let out = std::process::Command::new(&start)
        .args([
            "-I",
            "-S",
            "-c",
            "import sys, site; print(sys.executable); print(sys.prefix); print(sys.base_prefix); \
             print(sys.exec_prefix); print('\\n'.join('site:' + d for d in site.getsitepackages()))",
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", std::env::var_os("HOME").unwrap_or_default())
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| SandboxError::PythonNotFound(format!("{}: {e}", start.display())))?;
    if !out.status.success() {
        return Err(SandboxError::PythonNotFound(format!(
            "{} exited with {}: {}",
            start.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let exe = lines.next().map(PathBuf::from).ok_or_else(|| {
        SandboxError::PythonNotFound(format!("{} printed no sys.executable", start.display()))
    })?;
    let exe = exe
        .canonicalize()
        .map_err(|e| SandboxError::PythonNotFound(format!("{}: {e}", exe.display())))?;
    let mut prefixes: Vec<PathBuf> = Vec::new();
    let mut site_dirs: Vec<PathBuf> = Vec::new();
    for line in lines {
        let (list, p) = match line.strip_prefix("site:") {
            Some(dir) => (&mut site_dirs, dir),
            None => (&mut prefixes, line),
        };
        if let Ok(p) = Path::new(p).canonicalize()
            && !list.contains(&p)
        {
            list.push(p);
        }
    }
    Ok(PythonInfo {
        exe,
        prefixes,
        site_dirs,
    })
}
