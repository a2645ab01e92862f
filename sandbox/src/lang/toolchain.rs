//! Finding each language's toolchain once per process, from absolute paths of the distribution's
//! packages (never `PATH`, never rustup's `/root/.cargo`: the sandbox's mount namespace hides
//! `/root`, `/opt` and `/home`, and Landlock grants reads only to the system trees), and the
//! argv of each compile and run.
//!
//! Resolution reads file metadata only (no process is started), so it is cheap enough to happen
//! on first use; the toolchain's identity for the compile cache is its canonical paths with their
//! sizes and modification times, which change whenever the package is upgraded.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::{ARTIFACT_DIR, Language, table};

/// The trees the sandbox lets every run read and execute (Landlock's system rule, and the mount
/// namespace leaves them visible). A toolchain must live there.
const SYSTEM_TREES: &[&str] = &["/usr", "/bin", "/lib", "/lib64", "/etc"];

/// The resolved toolchain of one language.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    pub language: Language,
    /// The compiler (`None` for interpreted languages); for TypeScript, the compiler library.
    pub compiler: Option<PathBuf>,
    /// The interpreter or VM that runs the program (`None`: the compiled binary runs itself).
    pub runtime: Option<PathBuf>,
    /// Identity for the compile cache: canonical paths, sizes and mtimes of the tools.
    pub id: String,
}

/// A language this machine cannot run, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub language: Language,
    pub reason: String,
}

/// Every language's resolution, computed on first use.
pub fn all() -> &'static [Result<Toolchain, Missing>] {
    static ALL: OnceLock<Vec<Result<Toolchain, Missing>>> = OnceLock::new();
    ALL.get_or_init(|| {
        Language::ALL
            .into_iter()
            .filter(|l| *l != Language::Python)
            .map(resolve)
            .collect()
    })
}

/// The toolchain of `language` (not Python: the sandbox resolves its interpreter itself).
pub fn get(language: Language) -> Result<&'static Toolchain, &'static Missing> {
    all()
        .iter()
        .find(|r| match r {
            Ok(t) => t.language == language,
            Err(m) => m.language == language,
        })
        .map(|r| r.as_ref())
        .unwrap_or_else(|| unreachable_python())
}

fn unreachable_python() -> Result<&'static Toolchain, &'static Missing> {
    static PY: OnceLock<Missing> = OnceLock::new();
    Err(PY.get_or_init(|| Missing {
        language: Language::Python,
        reason: "Python is resolved by the sandbox itself".into(),
    }))
}

fn resolve(language: Language) -> Result<Toolchain, Missing> {
    let missing = |reason: String| Missing { language, reason };
    let (compilers, runtimes) = (language.row().compiler, language.row().runtime);
    let pick = |list: &[&str]| -> Result<Option<PathBuf>, String> {
        if list.is_empty() {
            return Ok(None);
        }
        for c in list {
            if let Ok(real) = Path::new(c).canonicalize() {
                if !SYSTEM_TREES.iter().any(|t| real.starts_with(t)) {
                    return Err(format!(
                        "{c} resolves to {} outside the system trees the sandbox exposes",
                        real.display()
                    ));
                }
                return Ok(Some(real));
            }
        }
        Err(format!(
            "{} not found (install the Debian package{} {})",
            list.join(" or "),
            if language.packages().len() > 1 {
                "s"
            } else {
                ""
            },
            language.packages().join(" ")
        ))
    };
    let compiler = pick(compilers).map_err(missing)?;
    let runtime = pick(runtimes).map_err(missing)?;
    let mut id = String::new();
    for p in compiler.iter().chain(runtime.iter()) {
        let meta = std::fs::metadata(p).map_err(|e| Missing {
            language,
            reason: format!("{}: {e}", p.display()),
        })?;
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        id.push_str(&format!("{}:{}:{};", p.display(), meta.len(), mtime));
    }
    Ok(Toolchain {
        language,
        compiler,
        runtime,
        id,
    })
}

impl Toolchain {
    /// `template` with this toolchain's paths and the run's values.
    fn fill(&self, template: &[&str], values: &[(&str, &str)]) -> Vec<String> {
        let compiler = path_str(&self.compiler);
        let runtime = path_str(&self.runtime);
        let mut all = vec![
            ("compiler", compiler.as_str()),
            ("runtime", runtime.as_str()),
            ("artifacts", ARTIFACT_DIR),
        ];
        all.extend_from_slice(values);
        template.iter().map(|t| table::fill(t, &all)).collect()
    }

    /// The compile step's argv (run in the work dir, artifacts into [`ARTIFACT_DIR`]), `None` for
    /// interpreted languages. Its text is part of the compile cache key (flags included).
    pub fn compile_argv(&self, source_file: &str) -> Option<Vec<String>> {
        let template = self.language.row().compile?;
        Some(self.fill(template, &[("source", source_file)]))
    }

    /// Extra environment of the compile step (on top of the sandbox's cleared one).
    pub fn compile_env(&self, workdir: &Path) -> Vec<String> {
        let workdir = workdir.display().to_string();
        self.fill(self.language.row().compile_env, &[("workdir", &workdir)])
    }

    /// The run's argv. `memory_bytes` bounds the heaps of runtimes that need a flag for it.
    pub fn run_argv(&self, source_file: &str, main_class: &str, memory_bytes: u64) -> Vec<String> {
        let mb = (memory_bytes >> 20).max(16);
        let (heap, heap_3_4) = (mb.to_string(), (mb * 3 / 4).to_string());
        let values = [
            ("source", source_file),
            ("main_class", main_class),
            ("heap_mb", heap.as_str()),
            ("heap_mb_3_4", heap_3_4.as_str()),
        ];
        self.fill(self.language.row().run, &values)
    }

    /// Extra environment of a run.
    pub fn run_env(&self) -> Vec<String> {
        self.fill(self.language.row().run_env, &[])
    }
}

fn path_str(p: &Option<PathBuf>) -> String {
    p.as_deref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_names_packages_when_missing_and_stays_in_system_trees() {
        for r in all() {
            match r {
                Ok(t) => {
                    for p in t.compiler.iter().chain(t.runtime.iter()) {
                        assert!(SYSTEM_TREES.iter().any(|s| p.starts_with(s)), "{p:?}");
                    }
                    assert!(!t.id.is_empty());
                }
                Err(m) => assert!(!m.reason.is_empty()),
            }
        }
        assert!(get(Language::Python).is_err());
    }

    #[test]
    fn commands_are_filled_from_the_table() {
        let tc = Toolchain {
            language: Language::Java,
            compiler: Some(PathBuf::from("/usr/bin/javac")),
            runtime: Some(PathBuf::from("/usr/bin/java")),
            id: String::new(),
        };
        let run = tc.run_argv("Main.java", "Problem", 1 << 30);
        assert_eq!(run[0], "/usr/bin/java");
        assert!(run.contains(&"-Xmx768m".to_string()), "{run:?}");
        assert_eq!(run.last().map(String::as_str), Some("Problem"));
        let compile = tc.compile_argv("Main.java").expect("java compiles");
        assert_eq!(compile.last().map(String::as_str), Some("Main.java"));
        assert!(compile.iter().all(|a| !a.contains('{')), "{compile:?}");
        let go = Toolchain {
            language: Language::Go,
            ..tc
        };
        assert_eq!(go.compile_env(Path::new("/w"))[0], "GOCACHE=/w/.gocache");
        assert_eq!(go.run_env(), ["GOMAXPROCS=2"]);
    }
}
