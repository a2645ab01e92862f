//! Embeds the reward-hacking corpus (`audit/exploits/<family>/<file>`): one exploit a file, so
//! adding a file is all it takes to add an exploit (`src/audit/corpus.rs` reads the headers).

use std::fmt::Write;
use std::path::Path;

fn main() {
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
