//! Embeds the reward-hacking corpus (`audit/exploits/<family>/<file>`): one exploit a file, so
//! adding a file is all it takes to add an exploit (`src/audit/corpus.rs` reads the headers).
//! Also sets `CODEGYM_VERSION`, the package version with the commit it is built from as build
//! metadata (`0.1.0+0123456789ab`), which a verdict's provenance carries: the package version
//! alone does not change between commits.

use std::fmt::Write;
use std::path::Path;

fn main() {
    build_commit();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("audit/exploits");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    for family in std::fs::read_dir(&root).expect("audit/exploits is readable") {
        let family = family.expect("a directory entry").path();
        if !family.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&family).expect("an exploit family is readable") {
            files.push(file.expect("a directory entry").path());
        }
    }
    files.sort();
    let mut out = String::from("&[\n");
    for path in files {
        let rel = path.strip_prefix(&root).expect("under the corpus root");
        let _ = writeln!(
            out,
            "    ({:?}, include_str!({:?})),",
            rel.display().to_string(),
            path.display().to_string()
        );
    }
    out.push(']');
    let dest =
        Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("exploits.rs");
    std::fs::write(dest, out).expect("OUT_DIR is writable");
}

/// `CODEGYM_VERSION`: the commit is `CODEGYM_BUILD_COMMIT` from the build's environment (a
/// packager that builds from a source archive knows it), else the git checkout's `HEAD`; none
/// outside a checkout.
fn build_commit() {
    let version = std::env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    let commit = commit();
    let full = match commit {
        Some(c) if !c.is_empty() => format!("{version}+{c}"),
        _ => version,
    };
    println!("cargo:rustc-env=CODEGYM_VERSION={full}");
}

fn commit() -> Option<String> {
    println!("cargo:rerun-if-env-changed=CODEGYM_BUILD_COMMIT");
    if let Ok(commit) = std::env::var("CODEGYM_BUILD_COMMIT") {
        return Some(commit);
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Build-time only (never a program of a run): the sandbox rule does not apply.
    #[allow(clippy::disallowed_methods)]
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(here)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let git_dir = git(&["rev-parse", "--absolute-git-dir"])?;
    let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"])?;
    // A new commit moves HEAD's branch (or HEAD itself when detached). Only files that exist are
    // watched: cargo reruns a build script on every build while a watched file is missing, and a
    // checkout may have no `packed-refs` (or no loose file for its branch) at all.
    let watch = |path: String| {
        if Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    };
    watch(format!("{git_dir}/HEAD"));
    watch(format!("{common}/packed-refs"));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch(format!("{common}/{branch}"));
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}
