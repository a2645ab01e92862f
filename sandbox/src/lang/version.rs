//! The version of each language's toolchain as its own tool prints it (`Python 3.11.7`,
//! `gcc (Debian 12.2.0-14) 12.2.0`): what a verdict's provenance records, so that a reward that
//! changes after an upgrade says why. Probed once per tool per process, on the blocking pool, as
//! a trusted host tool (`host_tool.rs`): the tool's own `--version` (or equivalent), first
//! non-empty line of stdout, else of stderr (the JVM prints there).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::OnceCell;

use super::{Language, toolchain};
use crate::host_tool::run_host_tool;

/// A version probe must never hold a scoring up for long.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// A probe: the tool and its arguments.
type Probe = (PathBuf, Vec<OsString>);

/// The probe's result by probe, computed once per process: the first caller runs it, callers
/// that arrive meanwhile wait for its answer (a batch's first wave of verdicts would otherwise
/// each start the tool: one interpreter start-up per verdict in flight).
fn cache() -> &'static Mutex<HashMap<Probe, Arc<OnceCell<String>>>> {
    static CACHE: OnceLock<Mutex<HashMap<Probe, Arc<OnceCell<String>>>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The version of `language`'s toolchain; `python` is the sandbox's resolved interpreter. A
/// toolchain this machine lacks, or a probe that fails, is described in the text (`unknown: ...`)
/// rather than an error: provenance records what was there.
pub async fn toolchain_version(python: &Path, language: Language) -> String {
    let (tool, args) = match probe(python, language) {
        Ok(p) => p,
        Err(why) => return format!("unknown: {why}"),
    };
    let cell = match cache().lock() {
        Ok(mut c) => c.entry((tool.clone(), args.clone())).or_default().clone(),
        Err(_) => Arc::new(OnceCell::new()),
    };
    cell.get_or_init(|| async move {
        #[cfg(test)]
        tests::PROBED.lock().unwrap().push(tool.clone());
        tokio::task::spawn_blocking(move || run_probe(&tool, &args))
            .await
            .unwrap_or_else(|e| format!("unknown: {e}"))
    })
    .await
    .clone()
}

/// The tool and arguments that print `language`'s version.
fn probe(python: &Path, language: Language) -> Result<Probe, String> {
    let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
    if language == Language::Python {
        return Ok((python.to_path_buf(), args(&["--version"])));
    }
    let tc = toolchain::get(language).map_err(|m| m.reason.clone())?;
    let runtime = || tc.runtime.clone().ok_or("no runtime".to_string());
    let compiler = || tc.compiler.clone().ok_or("no compiler".to_string());
    Ok(match language {
        // The compiler is a library of Node's: its version, and Node's.
        Language::TypeScript => {
            let lib = compiler()?;
            let script = "const ts = require(process.argv[1]); \
                          console.log('typescript ' + ts.version + ' (node ' + process.version + ')')";
            let mut a = args(&["-e", script]);
            a.push(lib.into_os_string());
            (runtime()?, a)
        }
        Language::Go => (compiler()?, args(&["version"])),
        Language::Java => (compiler()?, args(&["-version"])),
        Language::Lua => (runtime()?, args(&["-v"])),
        _ => (
            tc.compiler.clone().map_or_else(runtime, Ok)?,
            args(&["--version"]),
        ),
    })
}

/// Runs the probe; the first non-empty line it printed.
fn run_probe(tool: &Path, args: &[OsString]) -> String {
    let env = [("PATH".to_string(), "/usr/bin:/bin".to_string())];
    match run_host_tool(tool, args, &env, Path::new("/"), PROBE_TIMEOUT) {
        Ok(out) => out
            .stdout
            .lines()
            .chain(out.stderr.lines())
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| format!("unknown: {} printed nothing", tool.display())),
        Err(e) => format!("unknown: {}: {e}", tool.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tool a probe ran, in order (the cache is process-wide: tests use tools of their own).
    pub(super) static PROBED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn verdicts_that_arrive_together_share_one_probe() {
        // A path no other test probes: the interpreter under another name.
        let dir = tempfile::tempdir().unwrap();
        let python = dir.path().join("python-for-this-test");
        std::os::unix::fs::symlink(crate::python::resolve(None).unwrap().exe, &python).unwrap();
        let calls = (0..16).map(|_| toolchain_version(&python, Language::Python));
        let versions = futures::future::join_all(calls).await;
        assert!(
            versions
                .iter()
                .all(|v| v == &versions[0] && v.starts_with("Python 3.")),
            "{versions:?}"
        );
        let runs = PROBED
            .lock()
            .unwrap()
            .iter()
            .filter(|t| **t == python)
            .count();
        assert_eq!(runs, 1, "16 verdicts at once ran the probe {runs} times");
    }

    #[tokio::test]
    async fn python_prints_its_version_once_per_process() {
        let python = crate::python::resolve(None).unwrap().exe;
        let v = toolchain_version(&python, Language::Python).await;
        assert!(v.starts_with("Python 3."), "{v}");
        assert_eq!(toolchain_version(&python, Language::Python).await, v);
    }

    #[tokio::test]
    async fn every_installed_toolchain_names_its_version() {
        let python = crate::python::resolve(None).unwrap().exe;
        for language in Language::ALL {
            let v = toolchain_version(&python, language).await;
            let installed = language == Language::Python || toolchain::get(language).is_ok();
            assert_eq!(!v.starts_with("unknown"), installed, "{language}: {v}");
            println!("{language}: {v}");
        }
    }
}
