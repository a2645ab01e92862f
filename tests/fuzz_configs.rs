//! Property-based fuzzing of the config files a user writes, through the one loader of them all
//! (`codegym::config::load_json`): `codegym serve --config` (its `server`, `http` and `coding`
//! sections, `coding` holding the sandbox's, the packages' and the timeout re-run's tables),
//! `codegym rollout --config` and `codegym export --config`.
//!
//! Seeds: the serve configs of the documentation (the blocks marked `config`, which
//! `doc_examples.rs` serves), `fuzz_configs/serve_full.json` (every table and field of the serve
//! config, checked to be complete), and the rollout and export configs as their defaults write
//! them (every field). Each is written pretty-printed, a field per line, then mutated.
//!
//! Properties:
//! - every seed loads; a rollout or export config that loads round-trips (written, read back equal);
//! - an unknown field added to any table is an error `FILE:LINE:COLUMN:` at that field's line,
//!   naming it (`deny_unknown_fields` holds for every nested table); the tables that are maps by
//!   design (kwargs, dataset paths) are listed here and take any key;
//! - a field retyped is an error at its line; a field dropped loads (every field has a default);
//! - any bytes load or fail naming the file, at a line of the file.
//!
//! Cases: `CODEGYM_FUZZ_CASES` (default 128: each case writes and reads files; see
//! docs/fuzzing.md for the long mode).

#[path = "support/doc_blocks.rs"]
mod doc_blocks;
#[path = "support/fuzz_config.rs"]
mod fuzz_config;

use std::path::Path;
use std::sync::OnceLock;

use codegym::config::{Config, ConfigError, load_json};
use proptest::prelude::*;
use rollout::config::RolloutConfig;
use serde_json::{Value as J, json};
use trainer_bridge::ExportConfig;

fn config(default: u32) -> proptest::test_runner::Config {
    fuzz_config::config(default, "tests/proptest-regressions/fuzz_configs.txt")
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Serve,
    Rollout,
    Export,
}

/// Paths (keys joined by `.`) of the tables that are maps, not structs: any key is a value.
/// Everything at or below them is free-form.
const MAPS: &[&str] = &[
    "http.openenv_kwargs",
    "http.datasets",
    "env_kwargs",
    "model.sampling.extra_body",
];

/// Fields serde expects only to refuse them with the reason they were removed (never written).
const REMOVED: &[&str] = &["errored"];

struct Seed {
    kind: Kind,
    name: String,
    value: J,
    /// Every field of every table is present (checked against serde's list of expected fields).
    complete: bool,
}

fn seeds() -> &'static [Seed] {
    static SEEDS: OnceLock<Vec<Seed>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let root = doc_blocks::repo_root();
        let mut seeds = Vec::new();
        for file in doc_blocks::doc_files() {
            let text = std::fs::read_to_string(root.join(&file)).expect("a doc file");
            for block in doc_blocks::blocks(&file, &text) {
                if block.marker == doc_blocks::Marker::Config {
                    let value = serde_json::from_str(&block.body)
                        .unwrap_or_else(|e| panic!("{}: {e}", block.place()));
                    seeds.push(Seed {
                        kind: Kind::Serve,
                        name: block.place(),
                        value,
                        complete: false,
                    });
                }
            }
        }
        assert!(!seeds.is_empty(), "the docs have serve configs");
        let full = root.join("tests/fuzz_configs/serve_full.json");
        let text = std::fs::read_to_string(&full).expect("serve_full.json");
        seeds.push(Seed {
            kind: Kind::Serve,
            name: "serve_full.json".into(),
            value: serde_json::from_str(&text).expect("JSON"),
            complete: true,
        });
        let full = |kind, name: &str, value| Seed {
            kind,
            name: name.into(),
            value,
            complete: true,
        };
        seeds.push(full(Kind::Rollout, "rollout full", full_rollout()));
        seeds.push(full(
            Kind::Export,
            "export default",
            serde_json::to_value(ExportConfig::default()).expect("serializes"),
        ));
        seeds
    })
}

/// The rollout config as its default writes it, with the fields a default leaves out (options
/// unset, the cross-check off) set.
fn full_rollout() -> J {
    let mut v = serde_json::to_value(RolloutConfig::default()).expect("serializes");
    v["env_kwargs"] = json!({"mode": "session"});
    v["model"]["api_key_env"] = json!(["HF_TOKEN"]);
    v["model"]["sampling"] = json!({"temperature": 0.7, "top_p": 0.95, "max_tokens": 512,
        "stop": ["</code>"], "logprobs": true, "top_logprobs": 2, "extra_body": {"top_k": 20}});
    v["cross_check"] = json!({"fraction": 0.1, "on_disagreement": "flag", "concurrency": 2});
    v
}

/// Writes `text` and loads it as `kind`; a loaded rollout or export config must round-trip.
fn load(kind: Kind, text: &[u8]) -> Result<Result<(), ConfigError>, TestCaseError> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("config.json");
    std::fs::write(&path, text).expect("writes");
    Ok(match kind {
        Kind::Serve => load_json::<Config>(&path).map(drop),
        Kind::Rollout => match load_json::<RolloutConfig>(&path) {
            Ok(c) => round_trip(&path, &c),
            Err(e) => Err(e),
        },
        Kind::Export => match load_json::<ExportConfig>(&path) {
            Ok(c) => round_trip(&path, &c),
            Err(e) => Err(e),
        },
    })
}

fn round_trip<T>(path: &Path, c: &T) -> Result<(), ConfigError>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    // Compared as written: a table that only matters when a switch is on is not written when
    // it is off (the cross-check's), so the written form, not the struct, is what round-trips.
    let written = serde_json::to_value(c).expect("serializes");
    std::fs::write(path, serde_json::to_string_pretty(c).expect("serializes")).expect("writes");
    let back: T = load_json(path)?;
    let again = serde_json::to_value(&back).expect("serializes");
    assert!(
        again == written,
        "a config read back differs: {written} became {again}"
    );
    Ok(())
}

/// The `FILE:LINE:` an error must start with, for the config file of `load`.
fn at_line(e: &ConfigError, line: usize) -> Result<(), TestCaseError> {
    let shown = e.to_string();
    match e {
        ConfigError::Parse { line: got, .. } => {
            prop_assert_eq!(*got, line, "{}", shown);
            prop_assert!(shown.contains(&format!("config.json:{line}:")), "{}", shown);
        }
        ConfigError::Read { .. } => prop_assert!(false, "not a parse error: {}", shown),
    }
    Ok(())
}

/// The dotted paths of every struct table (object not below a map) of `v`.
fn tables(v: &J) -> Vec<Vec<String>> {
    fn walk(v: &J, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if MAPS.contains(&path.join(".").as_str()) {
            return;
        }
        if let J::Object(map) = v {
            out.push(path.clone());
            for (k, child) in map {
                path.push(k.clone());
                walk(child, path, out);
                path.pop();
            }
        }
    }
    let mut out = Vec::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

fn at<'a>(v: &'a mut J, path: &[String]) -> &'a mut J {
    path.iter().fold(v, |v, k| &mut v[k.as_str()])
}

/// The 1-based line of the pretty-printed `v` on which the key `marker` (unique) stands.
fn line_of(text: &str, marker: &str) -> usize {
    let quoted = format!("\"{marker}\":");
    text.lines()
        .position(|l| l.trim_start().starts_with(&quoted))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("{marker} not in {text}"))
}

#[derive(Debug, Clone)]
enum Mutation {
    Unknown(prop::sample::Index),
    Retype(prop::sample::Index, prop::sample::Index, usize),
    Drop(prop::sample::Index, prop::sample::Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let ix = any::<prop::sample::Index>;
    prop_oneof![
        ix().prop_map(Mutation::Unknown),
        (ix(), ix(), 0usize..6).prop_map(|(t, f, v)| Mutation::Retype(t, f, v)),
        (ix(), ix()).prop_map(|(t, f)| Mutation::Drop(t, f)),
    ]
}

/// Values of each JSON type that print on one line.
fn of_type(t: usize) -> J {
    [
        json!(true),
        json!(7),
        json!("zz"),
        json!([]),
        json!({}),
        J::Null,
    ][t % 6]
        .clone()
}

const UNKNOWN: &str = "zz_not_a_field";

fn check_mutated(seed: &Seed, m: &Mutation) -> Result<(), TestCaseError> {
    let mut value = seed.value.clone();
    let paths = tables(&value);
    let pick_table = |ix: &prop::sample::Index| paths[ix.index(paths.len())].clone();
    match m {
        Mutation::Unknown(t) => {
            let table = pick_table(t);
            at(&mut value, &table)[UNKNOWN] = json!(1);
            let text = serde_json::to_string_pretty(&value).expect("JSON");
            let e = load(seed.kind, text.as_bytes())?;
            prop_assert!(
                e.is_err(),
                "{}: an unknown field accepted in `{}`",
                seed.name,
                table.join(".")
            );
            let e = e.unwrap_err();
            at_line(&e, line_of(&text, UNKNOWN))?;
            let shown = e.to_string();
            prop_assert!(
                shown.contains(&format!("unknown field `{UNKNOWN}`")),
                "{}",
                shown
            );
            if seed.complete {
                // serde lists the fields it expects: the full seeds must have them all.
                let table_value = at(&mut seed.value.clone(), &table).clone();
                let expected = shown.split(", expected ").nth(1).unwrap_or("");
                let expected = expected.split(" at line ").next().unwrap_or("");
                // serde's forms: "`a`", "`a` or `b`", "one of `a`, `b`, `c`".
                let expected = expected
                    .trim_start_matches("one of ")
                    .replace("` or `", "`, `");
                for field in expected.split(", ") {
                    let field = field.trim().trim_matches('`');
                    prop_assert!(
                        field.is_empty()
                            || REMOVED.contains(&field)
                            || table_value.get(field).is_some(),
                        "{}: `{}` lacks field {}",
                        seed.name,
                        table.join("."),
                        field
                    );
                }
            }
        }
        Mutation::Retype(t, f, _) | Mutation::Drop(t, f) if !paths.is_empty() => {
            let table = pick_table(t);
            let object = at(&mut value, &table).as_object_mut().expect("a table");
            if object.is_empty() {
                return Ok(());
            }
            let keys: Vec<String> = object.keys().cloned().collect();
            let field = keys[f.index(keys.len())].clone();
            let old = object.remove(&field).expect("the field");
            let mut dotted = table.clone();
            dotted.push(field.clone());
            if let Mutation::Retype(_, _, ty) = m {
                let new = of_type(*ty);
                let free = MAPS.contains(&dotted.join(".").as_str());
                // serde reads a struct from an array of its field values too (an empty one as
                // the defaults): a table given as an array is that form, not a retyped field.
                let seq_form = old.is_object() && new.is_array();
                if old.is_null() || new.is_null() || free || seq_form || same_type(&old, &new) {
                    return Ok(()); // an absent option, or the field's own type
                }
                // The retyped field last, under a unique name's neighbour: its line is findable.
                object.insert(field.clone(), new);
                let text = serde_json::to_string_pretty(&value).expect("JSON");
                let e = load(seed.kind, text.as_bytes())?;
                prop_assert!(
                    e.is_err(),
                    "{}: `{}` retyped loaded:\n{}",
                    seed.name,
                    dotted.join("."),
                    text
                );
                let line = field_line(&text, &table, &field);
                at_line(&e.unwrap_err(), line)?;
            } else {
                let text = serde_json::to_string_pretty(&value).expect("JSON");
                let got = load(seed.kind, text.as_bytes())?;
                prop_assert!(
                    got.is_ok(),
                    "{}: without `{}`: {}",
                    seed.name,
                    dotted.join("."),
                    got.unwrap_err()
                );
            }
        }
        _ => {}
    }
    Ok(())
}

fn same_type(a: &J, b: &J) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// The line of `field` inside the table at `table` of the pretty-printed `text`: the first line
/// with that key after the line where the table opens.
fn field_line(text: &str, table: &[String], field: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let mut from = 0;
    let mut depth = 1;
    for key in table {
        let quoted = format!("\"{key}\":");
        let indent = "  ".repeat(depth);
        from += lines[from..]
            .iter()
            .position(|l| l.starts_with(&format!("{indent}{quoted}")))
            .expect("the table's key");
        depth += 1;
    }
    let quoted = format!("{}\"{field}\":", "  ".repeat(depth));
    from + lines[from..]
        .iter()
        .position(|l| l.starts_with(&quoted))
        .expect("the field's key")
        + 1
}

#[test]
fn every_seed_loads() {
    for seed in seeds() {
        let text = serde_json::to_string_pretty(&seed.value).expect("JSON");
        let got = load(seed.kind, text.as_bytes()).expect("checks");
        assert!(got.is_ok(), "{}: {}", seed.name, got.unwrap_err());
    }
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn mutated_configs_fail_at_their_line(seed in any::<prop::sample::Index>(), m in mutation()) {
        check_mutated(&seeds()[seed.index(seeds().len())], &m)?;
    }

    #[test]
    fn any_bytes_load_or_fail_naming_the_file(
        seed in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let seed = &seeds()[seed.index(seeds().len())];
        let mut bytes = serde_json::to_string_pretty(&seed.value).expect("JSON").into_bytes();
        for &(at, byte, op) in &edits {
            match (op, bytes.is_empty()) {
                (0, false) => { let i = at.index(bytes.len()); bytes[i] = byte; }
                (1, false) => { bytes.remove(at.index(bytes.len())); }
                _ => { let i = at.index(bytes.len() + 1); bytes.insert(i, byte); }
            }
        }
        let lines = bytes.iter().filter(|&&b| b == b'\n').count() + 1;
        if let Err(e) = load(seed.kind, &bytes)? {
            let shown = e.to_string();
            prop_assert!(shown.contains("config.json"), "{}", shown);
            if let ConfigError::Parse { line, .. } = e {
                prop_assert!((1..=lines).contains(&line), "line {} of {}: {}", line, lines, shown);
            }
        }
    }
}
