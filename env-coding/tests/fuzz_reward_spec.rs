//! Property-based fuzzing of reward specs (`RewardSpec::from_json`, the one parser of the `reward`
//! a task carries, from a task file or inline in `reset`): the specs of the repository's task files
//! of every format and `fuzz_reward_spec/specs.jsonl` (every component kind with every optional
//! field), whole or with one object inside them mutated.
//!
//! Properties:
//! - a seed spec loads, and survives serde's round trip (spec → JSON → spec) unchanged;
//! - a required field dropped, an unknown field added (to any object: the spec, a component,
//!   `penalties`, an io case, a judge test, a checker) or a field retyped is an error naming that
//!   field by its path (`components[1].expected: ...`), never a spec that scores with a default
//!   in its place; an optional field dropped loads, with its documented default;
//! - any other version is an error naming the version; weights summing to zero are an error;
//! - any JSON value loads or fails, never panics, and what loads round-trips.
//!
//! Cases: `CODEGYM_FUZZ_CASES` (default 256; see docs/fuzzing.md for the long mode).

use env_coding::reward::RewardSpec;
use env_coding::tasks::TaskSet;
use proptest::prelude::*;
use serde_json::{Value as J, json};

#[path = "../../tests/support/fuzz_config.rs"]
mod fuzz_config;

fn config(default: u32) -> proptest::test_runner::Config {
    fuzz_config::config(default, "tests/proptest-regressions/fuzz_reward_spec.txt")
}

/// The task files whose specs seed the target (every format's loader makes specs of its kind).
const TASK_FILES: &[&str] = &[
    "env-coding/tasks/examples.jsonl",
    "env-coding/tasks/fixtures/humaneval_mini.jsonl",
    "env-coding/tasks/fixtures/mbpp_mini.jsonl",
    "tests/doc_examples/HumanEvalPlus.jsonl",
    "tests/doc_examples/humaneval-cpp.jsonl",
    "tests/doc_examples/sales.jsonl",
];

fn seeds() -> &'static [J] {
    static SEEDS: std::sync::OnceLock<Vec<J>> = std::sync::OnceLock::new();
    SEEDS.get_or_init(|| {
        let root = format!("{}/..", env!("CARGO_MANIFEST_DIR"));
        let mut specs = Vec::new();
        for file in TASK_FILES {
            let set = TaskSet::load(format!("{root}/{file}")).unwrap_or_else(|e| panic!("{e}"));
            specs.extend(
                set.iter()
                    .map(|t| serde_json::to_value(&t.reward).expect("a spec")),
            );
        }
        // One record per format (CodeContests, APPS, LiveCodeBench): each line is a file of its own.
        let contests = format!("{root}/env-coding/tests/fuzz_tasks/contests.jsonl");
        let text = std::fs::read_to_string(&contests).unwrap_or_else(|e| panic!("{contests}: {e}"));
        for line in text.lines().filter(|l| l.starts_with('{')) {
            let set = TaskSet::parse(line, std::path::Path::new(&contests))
                .unwrap_or_else(|e| panic!("{e}"));
            specs.extend(
                set.iter()
                    .map(|t| serde_json::to_value(&t.reward).expect("a spec")),
            );
        }
        let corpus = format!("{root}/env-coding/tests/fuzz_reward_spec/specs.jsonl");
        let text = std::fs::read_to_string(&corpus).unwrap_or_else(|e| panic!("{corpus}: {e}"));
        specs.extend(
            text.lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with("//"))
                .map(|l| serde_json::from_str::<J>(l).unwrap_or_else(|e| panic!("{corpus}: {e}"))),
        );
        specs
    })
}

/// What the parser must do with one object's fields: the model of the spec format.
struct Shape {
    /// Fields without a default: dropping one is an error.
    required: &'static [&'static str],
    /// Fields with a default: dropping one loads.
    optional: &'static [&'static str],
    /// Fields that take `null` (an absent value).
    nullable: &'static [&'static str],
    /// Fields of any JSON type (checked by `validate`, not by their type).
    any_type: &'static [&'static str],
}

const fn shape(required: &'static [&'static str], optional: &'static [&'static str]) -> Shape {
    Shape {
        required,
        optional,
        nullable: &[],
        any_type: &[],
    }
}

/// The shape of the object at `path` in `spec`, or `None` for an object of free form (an output's
/// `expected`, a tool's `vars`).
fn shape_at(spec: &J, path: &[Seg]) -> Option<Shape> {
    let component = |i: usize| spec["components"][i]["type"].as_str().unwrap_or("");
    Some(match path {
        [] => shape(&["version", "components"], &["penalties"]),
        [Seg::Key("penalties")] => shape(&[], &["timeout", "syntax_error"]),
        [Seg::Key("components"), Seg::Index(i)] => component_shape(component(*i))?,
        [
            Seg::Key("components"),
            Seg::Index(i),
            Seg::Key("cases"),
            Seg::Index(_),
        ] if component(*i) == "io_cases" => shape(&["stdout"], &["stdin"]),
        [
            Seg::Key("components"),
            Seg::Index(i),
            Seg::Key("tests"),
            Seg::Index(_),
        ] if component(*i) == "judge" => shape(&["output"], &["input"]),
        [Seg::Key("components"), Seg::Index(i), Seg::Key("checker")] => {
            match spec["components"][*i]["checker"]["type"].as_str()? {
                "float" => shape(&["type"], &["abs_tol", "rel_tol"]),
                "special" => shape(&["type", "source"], &["language"]),
                _ => shape(&["type"], &[]),
            }
        }
        _ => return None,
    })
}

fn component_shape(kind: &str) -> Option<Shape> {
    let s = |required, optional| shape(required, optional);
    Some(match kind {
        "exit_code" => s(&["type"], &["expected", "weight"]),
        "stdout" => s(&["type", "expected"], &["match", "weight"]),
        "contains" => s(&["type", "text"], &["case_insensitive", "weight"]),
        "regex" => s(&["type", "pattern"], &["weight"]),
        "numeric" => Shape {
            nullable: &["pattern"],
            ..s(
                &["type", "expected"],
                &["rel_tol", "abs_tol", "pattern", "weight"],
            )
        },
        "io_cases" => s(&["type", "cases"], &["match", "weight"]),
        "check_function" => Shape {
            nullable: &["candidate_names"],
            ..s(
                &["type", "code", "entry_point"],
                &["prelude", "candidate_names", "weight"],
            )
        },
        "asserts" => Shape {
            nullable: &["candidate_names"],
            ..s(
                &["type", "asserts"],
                &["setup", "candidate_names", "weight"],
            )
        },
        "output" => Shape {
            any_type: &["expected"],
            ..s(&["type", "name", "expected"], &["tolerance", "weight"])
        },
        "judge" => Shape {
            nullable: &["memory_limit_mb", "driver"],
            ..s(
                &["type", "tests"],
                &[
                    "checker",
                    "time_limit_ms",
                    "memory_limit_mb",
                    "partial",
                    "weight",
                    "driver",
                ],
            )
        },
        "differential" => Shape {
            nullable: &["deserialize"],
            any_type: &["base_inputs", "plus_inputs"],
            ..s(
                &["type", "entry_point", "reference", "base_inputs"],
                &[
                    "plus_inputs",
                    "atol",
                    "tests",
                    "oracle",
                    "deserialize",
                    "time_limit_ms",
                    "partial",
                    "weight",
                ],
            )
        },
        "appended_tests" => Shape {
            nullable: &["fail_marker"],
            ..s(&["type", "code"], &["fail_marker", "in_process", "weight"])
        },
        _ => return None,
    })
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Seg {
    Key(&'static str),
    Index(usize),
}

/// The paths of every object in `v` whose shape the model knows.
fn objects(spec: &J) -> Vec<Vec<Seg>> {
    fn walk(spec: &J, v: &J, path: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
        match v {
            J::Object(map) => {
                if shape_at(spec, path).is_some() {
                    out.push(path.clone());
                }
                for (k, child) in map {
                    // The model's keys are static: leak the few distinct ones a run meets.
                    let k: &'static str = Box::leak(k.clone().into_boxed_str());
                    path.push(Seg::Key(k));
                    walk(spec, child, path, out);
                    path.pop();
                }
            }
            J::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    path.push(Seg::Index(i));
                    walk(spec, child, path, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(spec, spec, &mut Vec::new(), &mut out);
    out
}

fn at<'a>(v: &'a mut J, path: &[Seg]) -> &'a mut J {
    path.iter().fold(v, |v, seg| match seg {
        Seg::Key(k) => &mut v[*k],
        Seg::Index(i) => &mut v[*i],
    })
}

/// `components[1].cases[0]`: the path as serde_path_to_error prints it.
fn shown(path: &[Seg], field: &str) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if s.is_empty() => s.push_str(k),
            Seg::Key(k) => s.push_str(&format!(".{k}")),
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    if s.is_empty() {
        field.to_string()
    } else {
        format!("{s}.{field}")
    }
}

/// A JSON value of each type, for retyping a field.
fn of_type(t: usize) -> J {
    [
        J::Null,
        json!(true),
        json!(7),
        json!("text"),
        json!([]),
        json!(["x"]),
        json!({}),
        json!({"k": 1}),
    ][t % 8]
        .clone()
}

fn same_type(a: &J, b: &J) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

#[derive(Debug, Clone)]
enum Mutation {
    Drop(prop::sample::Index),
    Retype(prop::sample::Index, usize),
    Unknown(String),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<prop::sample::Index>().prop_map(Mutation::Drop),
        (any::<prop::sample::Index>(), 0usize..8).prop_map(|(i, t)| Mutation::Retype(i, t)),
        "[a-z_]{1,12}".prop_map(Mutation::Unknown),
    ]
}

/// Mutates the object at `path` of `seed` and checks what the parser makes of it.
fn check_mutated(seed: &J, path: &[Seg], m: &Mutation) -> Result<(), TestCaseError> {
    let shape = shape_at(seed, path).expect("a known object");
    let mut spec = seed.clone();
    let object = at(&mut spec, path).as_object_mut().expect("an object");
    let fields: Vec<String> = object.keys().cloned().collect();
    let pick = |ix: &prop::sample::Index| fields[ix.index(fields.len())].clone();
    // `Some(field)`: the mutation must be an error naming `field`; `None`: it must load.
    let expect_error: Option<String> = match m {
        Mutation::Drop(ix) if !fields.is_empty() => {
            let field = pick(ix);
            object.remove(&field);
            let optional = shape.optional.contains(&field.as_str());
            prop_assert!(
                optional || shape.required.contains(&field.as_str()),
                "the model lacks field {} at {:?}",
                field,
                path
            );
            (!optional).then_some(field)
        }
        Mutation::Retype(ix, t) if !fields.is_empty() => {
            let field = pick(ix);
            let new = of_type(*t);
            let old = object
                .insert(field.clone(), new.clone())
                .expect("the field");
            let f = field.as_str();
            // A null seed value (an absent option) does not show the field's type.
            let accepted = old.is_null()
                || same_type(&old, &new)
                || shape.any_type.contains(&f)
                || (new.is_null() && shape.nullable.contains(&f));
            if accepted {
                // A value of an accepted type may still fail `validate` (an empty list).
                let _ = RewardSpec::from_json(spec);
                return Ok(());
            }
            Some(field)
        }
        Mutation::Unknown(key) => {
            if object.contains_key(key.as_str()) {
                return Ok(());
            }
            object.insert(key.clone(), json!(1));
            Some(key.clone())
        }
        _ => return Ok(()),
    };
    let got = RewardSpec::from_json(spec.clone());
    match expect_error {
        None => prop_assert!(got.is_ok(), "{}: {}", spec, got.unwrap_err()),
        Some(field) => {
            prop_assert!(got.is_err(), "accepted with {} mutated: {}", field, spec);
            let e = got.unwrap_err();
            // Inside a component, serde's buffering of tagged enums keeps the path to the
            // component; the message names the field itself.
            let component = path.len().min(2);
            let prefix = shown(&path[..component], "");
            let named = e.contains(&format!("`{field}`"))
                || e.starts_with(&shown(path, &field))
                || (e.starts_with(prefix.trim_end_matches('.')) && e.contains(&field));
            prop_assert!(
                named,
                "{} mutated at {:?}: the error does not name it: {}",
                field,
                path,
                e
            );
        }
    }
    Ok(())
}

fn json_value() -> impl Strategy<Value = J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        any::<i64>().prop_map(J::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(J::from),
        "\\PC{0,8}".prop_map(J::String),
        prop::sample::select(vec![
            "exit_code",
            "stdout",
            "judge",
            "differential",
            "output"
        ])
        .prop_map(J::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(J::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "version",
                    "components",
                    "type",
                    "weight",
                    "expected",
                    "tests",
                    "cases",
                    "penalties",
                    "text",
                    "x"
                ]),
                inner,
                0..5
            )
            .prop_map(|m| J::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
}

#[test]
fn seeds_load_and_cover_every_component_kind() {
    let mut kinds = std::collections::BTreeSet::new();
    for seed in seeds() {
        let spec = RewardSpec::from_json(seed.clone()).unwrap_or_else(|e| panic!("{seed}: {e}"));
        kinds.extend(spec.components.iter().map(|c| c.kind()));
    }
    let all = [
        "appended_tests",
        "asserts",
        "check_function",
        "contains",
        "differential",
        "exit_code",
        "io_cases",
        "judge",
        "numeric",
        "output",
        "regex",
        "stdout",
    ];
    assert_eq!(kinds.into_iter().collect::<Vec<_>>(), all);
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn seeds_round_trip(seed in any::<prop::sample::Index>()) {
        let seed = &seeds()[seed.index(seeds().len())];
        let spec = RewardSpec::from_json(seed.clone()).map_err(TestCaseError::fail)?;
        let written = serde_json::to_value(&spec).expect("serializes");
        let back = RewardSpec::from_json(written.clone()).map_err(TestCaseError::fail)?;
        prop_assert_eq!(&back, &spec);
        prop_assert_eq!(serde_json::to_value(&back).expect("serializes"), written);
    }

    #[test]
    fn mutated_specs_fail_naming_the_field(
        seed in any::<prop::sample::Index>(),
        object in any::<prop::sample::Index>(),
        m in mutation(),
    ) {
        let seed = &seeds()[seed.index(seeds().len())];
        let paths = objects(seed);
        check_mutated(seed, &paths[object.index(paths.len())], &m)?;
    }

    #[test]
    fn other_versions_and_zero_weights_fail(
        seed in any::<prop::sample::Index>(),
        version in any::<u32>().prop_filter("another version", |v| *v != 1),
    ) {
        let seed = &seeds()[seed.index(seeds().len())];
        let mut spec = seed.clone();
        spec["version"] = json!(version);
        let e = RewardSpec::from_json(spec).expect_err("another version loaded");
        prop_assert!(e.contains("version") && e.contains(&version.to_string()), "{}", e);
        let mut spec = seed.clone();
        for c in spec["components"].as_array_mut().expect("components") {
            c["weight"] = json!(0);
        }
        let e = RewardSpec::from_json(spec).expect_err("zero weights loaded");
        prop_assert!(e.contains("weights sum to zero"), "{}", e);
    }

    #[test]
    fn any_json_loads_or_fails(value in json_value()) {
        if let Ok(spec) = RewardSpec::from_json(value) {
            let back = RewardSpec::from_json(serde_json::to_value(&spec).expect("serializes"));
            prop_assert_eq!(back, Ok(spec));
        }
    }
}
