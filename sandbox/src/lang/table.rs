//! The languages, one row each: everything the sandbox knows of a language. Adding a language is
//! a [`Language`] variant, a row here (in the enum's order: a test checks it), and its programs in
//! the language tests (`tests/languages.rs`, `tests/hostile/langs.rs`).
//!
//! Commands are templates, filled per compile or run by `toolchain.rs`: `{compiler}`, `{runtime}`
//! (the resolved absolute paths), `{source}` (the submission's file), `{artifacts}` (the artifact
//! dir), `{main_class}` (Java), `{workdir}`, `{heap_mb}` and `{heap_mb_3_4}` (the memory limit, in
//! MiB, for runtimes whose heap is bounded by a flag).

use super::Language;

/// One language.
pub(crate) struct Row {
    pub language: Language,
    /// SandboxFusion's name (also the serde name and `code-extract`'s fence table key).
    pub name: &'static str,
    /// The Debian packages that provide the toolchain.
    pub packages: &'static [&'static str],
    /// The file the submission is written to (Java: named after its public class instead).
    pub source_file: &'static str,
    /// Candidate absolute paths of the compiler, and of the runtime; the first that exists wins.
    pub compiler: &'static [&'static str],
    pub runtime: &'static [&'static str],
    /// The compile step's argv (artifacts into `{artifacts}`); `None`: interpreted.
    pub compile: Option<&'static [&'static str]>,
    pub compile_env: &'static [&'static str],
    pub run: &'static [&'static str],
    pub run_env: &'static [&'static str],
    /// Processes + threads a run needs at least (runtimes that start threads of their own).
    pub min_processes: u32,
    /// Address space beyond the memory limit where `RLIMIT_AS` is the memory limit (the JVM and
    /// V8 reserve far more virtual memory than they use; their heaps are bounded by flags).
    pub extra_address_space: Option<u64>,
}

/// Node's TypeScript compiler library (Debian's `node-typescript`).
const TYPESCRIPT_LIB: &str = "/usr/share/nodejs/typescript/lib/typescript.js";
const NODE: &[&str] = &["/usr/bin/node", "/usr/bin/nodejs"];

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

/// Defaults of a row; each row overrides what its language needs.
const BASE: Row = Row {
    language: Language::Python,
    name: "",
    packages: &[],
    source_file: "",
    compiler: &[],
    runtime: &[],
    compile: None,
    compile_env: &[],
    run: &["{runtime}", "{source}"],
    run_env: &[],
    min_processes: 0,
    extra_address_space: None,
};

/// A compiled binary that runs itself.
const NATIVE: &[&str] = &["./{artifacts}/main"];

/// Every language, in [`Language`]'s order (`codegym doctor` lists them so).
pub(crate) const ROWS: [Row; 13] = [
    Row {
        // The sandbox's own path: the resolved CPython, warm fork where available; nothing here
        // is used to run it.
        language: Language::Python,
        name: "python",
        packages: &["python3"],
        source_file: "main.py",
        run: &[],
        ..BASE
    },
    Row {
        language: Language::Cpp,
        name: "cpp",
        packages: &["g++"],
        source_file: "main.cpp",
        compiler: &["/usr/bin/g++"],
        // SandboxFusion's flags (`-std=c++17`) plus the judges' usual -O2.
        compile: Some(&[
            "{compiler}",
            "-std=c++17",
            "-O2",
            "-pipe",
            "-o",
            "{artifacts}/main",
            "{source}",
        ]),
        run: NATIVE,
        ..BASE
    },
    Row {
        language: Language::C,
        name: "c",
        packages: &["gcc"],
        source_file: "main.c",
        compiler: &["/usr/bin/gcc"],
        compile: Some(&[
            "{compiler}",
            "-std=gnu11",
            "-O2",
            "-pipe",
            "-o",
            "{artifacts}/main",
            "{source}",
            "-lm",
        ]),
        run: NATIVE,
        ..BASE
    },
    Row {
        language: Language::Rust,
        name: "rust",
        packages: &["rustc"],
        source_file: "main.rs",
        compiler: &["/usr/bin/rustc"],
        compile: Some(&[
            "{compiler}",
            "--edition",
            "2021",
            "-O",
            "-C",
            "strip=symbols",
            "-o",
            "{artifacts}/main",
            "{source}",
        ]),
        run: NATIVE,
        ..BASE
    },
    Row {
        language: Language::Go,
        name: "go",
        packages: &["golang-go"],
        source_file: "main.go",
        compiler: &["/usr/bin/go"],
        compile: Some(&["{compiler}", "build", "-o", "{artifacts}/main", "{source}"]),
        // The build cache and GOPATH inside the private work dir; no cgo (no C toolchain needed,
        // a static binary); no module lookup (nothing is downloaded). No `-trimpath`: it
        // invalidates the package's precompiled standard library (0.3 s -> 20 s per build).
        compile_env: &[
            "GOCACHE={workdir}/.gocache",
            "GOPATH=/nonexistent",
            "GO111MODULE=off",
            "CGO_ENABLED=0",
            "GOTOOLCHAIN=local",
            "GOPROXY=off",
        ],
        run: NATIVE,
        // The scheduler starts a thread per core; two are plenty for a judged program.
        run_env: &["GOMAXPROCS=2"],
        min_processes: 128,
        extra_address_space: Some(1 << 30),
        ..BASE
    },
    Row {
        language: Language::Java,
        name: "java",
        packages: &["default-jdk-headless"],
        source_file: "Main.java",
        compiler: &["/usr/bin/javac"],
        runtime: &["/usr/bin/java"],
        // One JVM for javac with a bounded heap and few threads.
        compile: Some(&[
            "{compiler}",
            "-J-Xmx512m",
            "-J-XX:+UseSerialGC",
            "-J-XX:TieredStopAtLevel=1",
            "-J-XX:ActiveProcessorCount=1",
            "-encoding",
            "UTF-8",
            "-d",
            "{artifacts}",
            "{source}",
        ]),
        // `-ea`: assertions on, as they are in Python and in C/C++ (no `NDEBUG`); MultiPL-E's
        // Java tests are `assert`s (its evaluator runs `java -ea`).
        run: &[
            "{runtime}",
            "-ea",
            "-Xmx{heap_mb_3_4}m",
            "-Xss64m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:ReservedCodeCacheSize=64m",
            "-XX:CompressedClassSpaceSize=64m",
            "-XX:ActiveProcessorCount=1",
            "-cp",
            "{artifacts}",
            "{main_class}",
        ],
        min_processes: 256,
        extra_address_space: Some(2 << 30),
        ..BASE
    },
    Row {
        language: Language::NodeJs,
        name: "nodejs",
        packages: &["nodejs"],
        source_file: "main.js",
        runtime: NODE,
        run: &["{runtime}", "--max-old-space-size={heap_mb}", "{source}"],
        min_processes: 128,
        extra_address_space: Some(8 << 30),
        ..BASE
    },
    Row {
        language: Language::TypeScript,
        name: "typescript",
        packages: &["nodejs", "node-typescript"],
        source_file: "main.ts",
        compiler: &[TYPESCRIPT_LIB],
        runtime: NODE,
        compile: Some(&[
            "{runtime}",
            "-e",
            TS_TRANSPILE,
            "--",
            "{compiler}",
            "{source}",
            "{artifacts}/main.js",
        ]),
        run: &[
            "{runtime}",
            "--max-old-space-size={heap_mb}",
            "{artifacts}/main.js",
        ],
        min_processes: 128,
        extra_address_space: Some(8 << 30),
        ..BASE
    },
    Row {
        language: Language::Bash,
        name: "bash",
        packages: &["bash"],
        source_file: "main.sh",
        runtime: &["/usr/bin/bash", "/bin/bash"],
        ..BASE
    },
    Row {
        language: Language::Ruby,
        name: "ruby",
        packages: &["ruby"],
        source_file: "main.rb",
        runtime: &["/usr/bin/ruby"],
        // RubyGems' start-up costs ~90 ms of every run (28 vs 116 ms measured); the standard
        // library (json, set, ...) still loads without it, and no gems can be installed anyway.
        run: &["{runtime}", "--disable-gems", "{source}"],
        ..BASE
    },
    Row {
        language: Language::Php,
        name: "php",
        packages: &["php-cli"],
        source_file: "main.php",
        runtime: &["/usr/bin/php"],
        ..BASE
    },
    Row {
        language: Language::Lua,
        name: "lua",
        packages: &["lua5.4"],
        source_file: "main.lua",
        runtime: &["/usr/bin/lua5.4", "/usr/bin/lua5.3", "/usr/bin/lua"],
        ..BASE
    },
    Row {
        language: Language::Perl,
        name: "perl",
        packages: &["perl"],
        source_file: "main.pl",
        runtime: &["/usr/bin/perl"],
        ..BASE
    },
];

/// Fills a template's placeholders (see the module doc).
pub(crate) fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = template.to_string();
    for (key, value) in values {
        out = out.replace(&format!("{{{key}}}"), value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_in_the_enums_order_and_complete() {
        for (i, row) in ROWS.iter().enumerate() {
            assert_eq!(row.language as usize, i, "{}", row.name);
            assert_eq!(Language::ALL[i], row.language, "{}", row.name);
            assert!(
                !row.name.is_empty() && !row.packages.is_empty() && !row.source_file.is_empty()
            );
            if row.language != Language::Python {
                assert!(!row.run.is_empty(), "{}: no run command", row.name);
                assert!(
                    row.compile.is_some() || !row.runtime.is_empty(),
                    "{}: neither compiled nor interpreted",
                    row.name
                );
            }
        }
    }
}
