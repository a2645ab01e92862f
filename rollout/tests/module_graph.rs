//! No module of the engine imports, directly or through others, a module that imports it.
//!
//! Reads the crate's sources: every path a module names (`use` items, re-exports and paths in
//! code) that starts at `crate`, `super`, `self` or one of its child modules is resolved to the
//! deepest module file it reaches, and that is an edge. A `mod` declaration alone is not an edge
//! (declaring a child is not importing it), and neither is a name another crate's item has here
//! (`dataset::record` is `trajectory::record` re-exported: naming it runs no code of `dataset`).
//! Unit tests at the end of a file (`#[cfg(test)]`) are left out: they may look at their module's
//! parent. The test fails with the circle it found.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// Every module file under `src`, by module path (`lib.rs` is the empty path).
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the source directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src");
            let mut parts: Module = rel
                .iter()
                .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            out.insert(parts, path);
        }
    }
    out
}

/// The code of a file without comments and without its trailing unit tests.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[derive(Debug, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Other,
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
            continue;
        }
        if c == '"' {
            // A string literal names nothing.
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        out.push(match c {
            ':' if chars.get(i + 1) == Some(&':') => {
                i += 1;
                Token::PathSep
            }
            '{' => Token::Open,
            '}' => Token::Close,
            ',' => Token::Comma,
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            _ => Token::Other,
        });
        i += 1;
    }
    out
}

/// Reads `a::b::{c, d::e}` from `at`: every full path it names.
fn paths(t: &[Token], at: usize, prefix: &[String], out: &mut Vec<Module>) {
    let mut path = prefix.to_vec();
    let mut i = at;
    while let Some(Token::Ident(name)) = t.get(i) {
        path.push(name.clone());
        if t.get(i + 1) != Some(&Token::PathSep) {
            break;
        }
        match t.get(i + 2) {
            Some(Token::Open) => {
                let mut j = i + 3;
                loop {
                    paths(t, j, &path, out);
                    // Skip to this item's end: a comma or the closing brace at this depth.
                    let mut depth = 0;
                    while let Some(tok) = t.get(j) {
                        match tok {
                            Token::Open => depth += 1,
                            Token::Close if depth == 0 => break,
                            Token::Close => depth -= 1,
                            Token::Comma if depth == 0 => break,
                            _ => {}
                        }
                        j += 1;
                    }
                    match t.get(j) {
                        Some(Token::Comma) => j += 1,
                        _ => return,
                    }
                }
            }
            _ => i += 2,
        }
    }
    out.push(path);
}

/// The deepest module `path` reaches, seen from `from`, if it starts at this crate.
fn resolve(
    from: &Module,
    path: &[String],
    known: &BTreeMap<Module, PathBuf>,
    foreign: &BTreeSet<Module>,
) -> Option<Module> {
    let mut at: Module = Vec::new();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => rest = &path[1..],
        Some("self") => {
            at.clone_from(from);
            rest = &path[1..];
        }
        Some("super") => {
            at.clone_from(from);
            while rest.first().map(String::as_str) == Some("super") {
                at.pop();
                rest = &rest[1..];
            }
        }
        Some(child) => {
            let mut m = from.clone();
            m.push(child.to_string());
            if !known.contains_key(&m) {
                return None;
            }
            at.clone_from(from);
        }
        None => return None,
    }
    for seg in rest {
        let mut next = at.clone();
        next.push(seg.clone());
        if foreign.contains(&next) {
            return None;
        }
        if !known.contains_key(&next) {
            break;
        }
        at = next;
    }
    Some(at)
}

/// Every path each module names.
fn named_paths(known: &BTreeMap<Module, PathBuf>) -> BTreeMap<Module, Vec<Module>> {
    let mut out = BTreeMap::new();
    for (module, file) in known {
        let text = std::fs::read_to_string(file).expect("read a source file");
        let t = tokens(&code(&text));
        let mut named = Vec::new();
        for (i, tok) in t.iter().enumerate() {
            let starts = i == 0 || t[i - 1] != Token::PathSep;
            let declares = i > 0 && t[i - 1] == Token::Ident("mod".into());
            if matches!(tok, Token::Ident(_)) && starts && !declares {
                paths(&t, i, &[], &mut named);
            }
        }
        // A lone name (`format!`, a variable) is no path; `a::b` and `super::x` are.
        named.retain(|p| p.len() > 1);
        out.insert(module.clone(), named);
    }
    out
}

fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let known = modules(src);
    let named = named_paths(&known);
    // Names other crates' items have here: `pub use trajectory::record;` in `dataset`.
    let local = |p: &Module| ["crate", "super", "self"].contains(&p[0].as_str());
    let mut foreign = BTreeSet::new();
    for (module, paths) in &named {
        for p in paths.iter().filter(|p| !local(p)) {
            let mut child = module.clone();
            child.push(p[0].clone());
            if !known.contains_key(&child) && p.len() == 2 {
                let mut name = module.clone();
                name.push(p[1].clone());
                if !known.contains_key(&name) {
                    foreign.insert(name);
                }
            }
        }
    }
    let mut edges = BTreeMap::new();
    for (module, paths) in &named {
        let targets: BTreeSet<Module> = paths
            .iter()
            .filter_map(|p| resolve(module, p, &known, &foreign))
            .filter(|target| target != module)
            .collect();
        edges.insert(module.clone(), targets);
    }
    edges
}

/// A circle through `graph`, if there is one.
fn find_circle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    fn visit(
        m: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        done: &mut BTreeSet<Module>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        if let Some(at) = stack.iter().position(|s| s == m) {
            let mut circle = stack[at..].to_vec();
            circle.push(m.clone());
            return Some(circle);
        }
        if done.contains(m) {
            return None;
        }
        stack.push(m.clone());
        for next in graph.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, graph, done, stack) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(m.clone());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut done, &mut Vec::new()))
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "lib".into()
    } else {
        m.join("::")
    }
}

#[test]
fn no_module_imports_a_module_that_imports_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph(&src);
    let edges = |m: &[&str]| -> Vec<String> {
        let m: Module = m.iter().map(|s| (*s).to_string()).collect();
        graph[&m].iter().map(name).collect()
    };
    // The reading is real: known imports are found (through braces, `super` and child paths).
    assert!(edges(&["episode", "tools"]).contains(&"episode::primitives".to_string()));
    assert!(edges(&["backend", "pool"]).contains(&"backend::pool::health".to_string()));
    assert!(edges(&["client"]).contains(&"client::model".to_string()));
    if let Some(circle) = find_circle(&graph) {
        let shown: Vec<String> = circle.iter().map(name).collect();
        panic!("a circle of imports: {}", shown.join(" -> "));
    }
}

#[test]
fn the_reader_finds_circles() {
    let m = |s: &str| -> Module { s.split("::").map(str::to_string).collect() };
    let mut g = BTreeMap::new();
    g.insert(m("a"), BTreeSet::from([m("b")]));
    g.insert(m("b"), BTreeSet::from([m("c")]));
    g.insert(m("c"), BTreeSet::new());
    assert_eq!(find_circle(&g), None);
    g.get_mut(&m("c")).unwrap().insert(m("a"));
    assert_eq!(find_circle(&g), Some(vec![m("a"), m("b"), m("c"), m("a")]));
    let t = tokens("use super::{state::{A, B}, primitives};\nfn f() { health::check(\"x::y\") }");
    let mut named = Vec::new();
    paths(&t, 1, &[], &mut named);
    assert_eq!(
        named,
        [
            vec!["super".to_string(), "state".into(), "A".into()],
            vec!["super".to_string(), "state".into(), "B".into()],
            vec!["super".to_string(), "primitives".into()],
        ]
    );
}
