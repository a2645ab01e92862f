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

use super::{ARTIFACT_DIR, Language};

/// The trees the sandbox lets every run read and execute (Landlock's system rule, and the mount
/// namespace leaves them visible). A toolchain must live there.
const SYSTEM_TREES: &[&str] = &["/usr", "/bin", "/lib", "/lib64", "/etc"];

/// Node's TypeScript compiler library (Debian's `node-typescript`).
const TYPESCRIPT_LIB: &str = "/usr/share/nodejs/typescript/lib/typescript.js";

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

/// (compiler candidates, runtime candidates) by absolute path; the first that exists wins.
fn candidates(language: Language) -> (&'static [&'static str], &'static [&'static str]) {
    match language {
        Language::Python => (&[], &[]),
        Language::Cpp => (&["/usr/bin/g++"], &[]),
        Language::C => (&["/usr/bin/gcc"], &[]),
        Language::Rust => (&["/usr/bin/rustc"], &[]),
        Language::Go => (&["/usr/bin/go"], &[]),
        Language::Java => (&["/usr/bin/javac"], &["/usr/bin/java"]),
        Language::NodeJs => (&[], &["/usr/bin/node", "/usr/bin/nodejs"]),
        Language::TypeScript => (&[TYPESCRIPT_LIB], &["/usr/bin/node", "/usr/bin/nodejs"]),
        Language::Bash => (&[], &["/usr/bin/bash", "/bin/bash"]),
        Language::Ruby => (&[], &["/usr/bin/ruby"]),
        Language::Php => (&[], &["/usr/bin/php"]),
        Language::Lua => (&[], &["/usr/bin/lua5.4", "/usr/bin/lua5.3", "/usr/bin/lua"]),
        Language::Perl => (&[], &["/usr/bin/perl"]),
    }
}

fn resolve(language: Language) -> Result<Toolchain, Missing> {
    let missing = |reason: String| Missing { language, reason };
    let (compilers, runtimes) = candidates(language);
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

/// The transpile-only TypeScript compile (what `tsx` and `ts-node --transpile-only` do, as
/// SandboxFusion's runner does): type errors do not fail a submission, syntax errors do.
/// `process.argv[1..]` (after `node -e SCRIPT --`): the library, the source, the output.
const TS_TRANSPILE: &str = "\
const [lib, src, out] = process.argv.slice(1);
const ts = require(lib); const fs = require('fs');
const r = ts.transpileModule(fs.readFileSync(src, 'utf8'), {reportDiagnostics: true, fileName: src,
  compilerOptions: {module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2020}});
const errs = (r.diagnostics || []).filter(d => d.category === ts.DiagnosticCategory.Error);
for (const d of errs) {
  const pos = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start) : null;
  process.stderr.write(src + (pos ? `(${pos.line + 1},${pos.character + 1})` : '') + ': error TS' + d.code + ': ' + ts.flattenDiagnosticMessageText(d.messageText, '\\n') + '\\n');
}
if (errs.length) process.exit(1);
fs.mkdirSync(require('path').dirname(out), {recursive: true}); fs.writeFileSync(out, r.outputText);
";

impl Toolchain {
    fn compiler_str(&self) -> String {
        self.compiler
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    }

    fn runtime_str(&self) -> String {
        self.runtime
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    }

    /// The compile step's argv (run in the work dir, artifacts into [`ARTIFACT_DIR`]), `None` for
    /// interpreted languages. Its text is part of the compile cache key (flags included).
    pub fn compile_argv(&self, source_file: &str) -> Option<Vec<String>> {
        let out = format!("{ARTIFACT_DIR}/main");
        let cc = self.compiler_str();
        let v = |args: &[&str]| Some(args.iter().map(|s| s.to_string()).collect());
        match self.language {
            // SandboxFusion's flags (`-std=c++17`) plus the judges' usual -O2.
            Language::Cpp => v(&[&cc, "-std=c++17", "-O2", "-pipe", "-o", &out, source_file]),
            Language::C => v(&[
                &cc,
                "-std=gnu11",
                "-O2",
                "-pipe",
                "-o",
                &out,
                source_file,
                "-lm",
            ]),
            Language::Rust => v(&[
                &cc,
                "--edition",
                "2021",
                "-O",
                "-C",
                "strip=symbols",
                "-o",
                &out,
                source_file,
            ]),
            Language::Go => v(&[&cc, "build", "-o", &out, source_file]),
            // One JVM for javac with a bounded heap and few threads.
            Language::Java => v(&[
                &cc,
                "-J-Xmx512m",
                "-J-XX:+UseSerialGC",
                "-J-XX:TieredStopAtLevel=1",
                "-J-XX:ActiveProcessorCount=1",
                "-encoding",
                "UTF-8",
                "-d",
                ARTIFACT_DIR,
                source_file,
            ]),
            Language::TypeScript => v(&[
                &self.runtime_str(),
                "-e",
                TS_TRANSPILE,
                "--",
                &cc,
                source_file,
                &format!("{ARTIFACT_DIR}/main.js"),
            ]),
            _ => None,
        }
    }

    /// Extra environment of the compile step (on top of the sandbox's cleared one).
    pub fn compile_env(&self, workdir: &Path) -> Vec<String> {
        match self.language {
            // Go's build cache and GOPATH inside the private work dir; no cgo (no C toolchain
            // needed, a static binary); no module lookup (nothing is downloaded). No `-trimpath`:
            // it invalidates the package's precompiled standard library (0.3 s -> 20 s per build).
            Language::Go => vec![
                format!("GOCACHE={}/.gocache", workdir.display()),
                "GOPATH=/nonexistent".into(),
                "GO111MODULE=off".into(),
                "CGO_ENABLED=0".into(),
                "GOTOOLCHAIN=local".into(),
                "GOPROXY=off".into(),
            ],
            _ => Vec::new(),
        }
    }

    /// The run's argv. `memory_bytes` bounds the heaps of runtimes that need a flag for it.
    pub fn run_argv(&self, source_file: &str, main_class: &str, memory_bytes: u64) -> Vec<String> {
        let rt = self.runtime_str();
        let bin = format!("./{ARTIFACT_DIR}/main");
        let mb = (memory_bytes >> 20).max(16);
        let v = |args: &[&str]| args.iter().map(|s| s.to_string()).collect();
        match self.language {
            Language::Cpp | Language::C | Language::Rust | Language::Go => v(&[&bin]),
            // `-ea`: assertions on, as they are in Python and in C/C++ (no `NDEBUG`); MultiPL-E's
            // Java tests are `assert`s (its evaluator runs `java -ea`).
            Language::Java => v(&[
                &rt,
                "-ea",
                &format!("-Xmx{}m", mb * 3 / 4),
                "-Xss64m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-XX:ReservedCodeCacheSize=64m",
                "-XX:CompressedClassSpaceSize=64m",
                "-XX:ActiveProcessorCount=1",
                "-cp",
                ARTIFACT_DIR,
                main_class,
            ]),
            Language::NodeJs => v(&[&rt, &format!("--max-old-space-size={mb}"), source_file]),
            Language::TypeScript => v(&[
                &rt,
                &format!("--max-old-space-size={mb}"),
                &format!("{ARTIFACT_DIR}/main.js"),
            ]),
            // RubyGems' start-up costs ~90 ms of every run (28 vs 116 ms measured); the standard
            // library (json, set, ...) still loads without it, and no gems can be installed anyway.
            Language::Ruby => v(&[&rt, "--disable-gems", source_file]),
            Language::Bash | Language::Php | Language::Lua | Language::Perl => {
                v(&[&rt, source_file])
            }
            Language::Python => Vec::new(),
        }
    }

    /// Extra environment of a run.
    pub fn run_env(&self) -> Vec<String> {
        match self.language {
            // Go's scheduler starts a thread per core; two are plenty for a judged program.
            Language::Go => vec!["GOMAXPROCS=2".into()],
            _ => Vec::new(),
        }
    }
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
}
