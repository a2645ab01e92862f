//! Property-based fuzzing of the task loaders (`TaskSet::parse` and `TaskSet::load`): files of real
//! records of every format (native, HumanEval, MBPP, HumanEval+, MultiPL-E, CodeContests, APPS,
//! LiveCodeBench) with blank and comment lines between them, one of the records mutated (a required
//! field dropped or retyped, the line cut short, not an object, a duplicate id).
//!
//! Properties:
//! - an unmutated file loads every record, in order, in its format;
//! - a mutated record is an error naming the file and its physical line (`PATH:LINE: `), never a
//!   task accepted without a required field; only the first record of a headerless file (which
//!   decides the format) may fail at another line, and it still fails;
//! - any bytes (mutated files, invalid UTF-8, a gzip header) load or fail with an error naming the
//!   file, never a panic.
//!
//! Seeds: the bundled tasks, the HumanEval and MBPP fixtures, the docs' HumanEval+ and MultiPL-E
//! examples, and `fuzz_tasks/contests.jsonl` (records of `tests/contests.rs`). Cases:
//! `CODEGYM_FUZZ_CASES` (default 128; see docs/fuzzing.md for the long mode).

use std::path::Path;

use env_coding::tasks::{TaskError, TaskFormat, TaskSet};
use proptest::prelude::*;
use serde_json::Value as J;

#[path = "../../tests/support/fuzz_config.rs"]
mod fuzz_config;

fn config(default: u32) -> proptest::test_runner::Config {
    fuzz_config::config(default, "tests/proptest-regressions/fuzz_tasks.txt")
}

/// One format: its seed records, the header line its files start with, the key of a record's id,
/// its required fields, and those of them that must be strings.
struct Format {
    format: TaskFormat,
    header: Option<String>,
    seeds: Vec<J>,
    id: &'static str,
    required: &'static [&'static str],
    strings: &'static [&'static str],
}

fn lines_of(rel: &str) -> Vec<J> {
    let path = format!("{}/../{rel}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("//"))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{path}: {e}")))
        .collect()
}

fn formats() -> Vec<Format> {
    let mut native = lines_of("env-coding/tasks/examples.jsonl");
    let header = native.remove(0).to_string();
    let contests = lines_of("env-coding/tests/fuzz_tasks/contests.jsonl");
    let f = |format, seeds, id, required, strings| Format {
        format,
        header: None,
        seeds,
        id,
        required,
        strings,
    };
    vec![
        Format {
            header: Some(header),
            ..f(
                TaskFormat::Native,
                native,
                "id",
                &["id", "prompt", "reward"],
                &["id", "prompt"],
            )
        },
        f(
            TaskFormat::HumanEval,
            lines_of("env-coding/tasks/fixtures/humaneval_mini.jsonl"),
            "task_id",
            &["task_id", "prompt", "test", "entry_point"],
            &["prompt", "test", "entry_point"],
        ),
        f(
            TaskFormat::Mbpp,
            lines_of("env-coding/tasks/fixtures/mbpp_mini.jsonl"),
            "task_id",
            &["task_id", "text", "test_list"],
            &["text"],
        ),
        f(
            TaskFormat::EvalPlus,
            lines_of("tests/doc_examples/HumanEvalPlus.jsonl"),
            "task_id",
            &[
                "task_id",
                "prompt",
                "entry_point",
                "canonical_solution",
                "base_input",
            ],
            &["task_id", "prompt", "entry_point", "canonical_solution"],
        ),
        f(
            TaskFormat::MultiplE,
            lines_of("tests/doc_examples/humaneval-cpp.jsonl"),
            "name",
            &["name", "language", "prompt", "tests"],
            &["name", "language", "prompt", "tests"],
        ),
        f(
            TaskFormat::CodeContests,
            vec![contests[0].clone()],
            "name",
            &["name", "description"],
            &["name", "description"],
        ),
        f(
            TaskFormat::Apps,
            vec![contests[1].clone()],
            "problem_id",
            &["problem_id", "question", "input_output"],
            &["question"],
        ),
        f(
            TaskFormat::LiveCodeBench,
            vec![contests[2].clone()],
            "question_id",
            &["question_id", "question_content", "public_test_cases"],
            &["question_content"],
        ),
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    Drop(prop::sample::Index),
    Retype(prop::sample::Index),
    Truncate(prop::sample::Index),
    NotAnObject(&'static str),
    DuplicateId,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<prop::sample::Index>().prop_map(Mutation::Drop),
        any::<prop::sample::Index>().prop_map(Mutation::Retype),
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        prop::sample::select(vec!["42", "\"task\"", "null", "true"])
            .prop_map(Mutation::NotAnObject),
        Just(Mutation::DuplicateId),
    ]
}

/// The text of one record line, mutated or not.
fn render(f: &Format, seed: &J, i: usize, mutation: Option<&Mutation>) -> String {
    let mut record = seed.clone();
    let id = |i: usize| match f.format {
        TaskFormat::Mbpp => J::from(9000 + i),
        _ => J::from(format!("task-{i}")),
    };
    record[f.id] = id(i);
    let pick = |ix: &prop::sample::Index, from: &[&'static str]| from[ix.index(from.len())];
    match mutation {
        Some(Mutation::Drop(ix)) => {
            record
                .as_object_mut()
                .expect("an object")
                .remove(pick(ix, f.required));
        }
        Some(Mutation::Retype(ix)) => record[pick(ix, f.strings)] = J::from(true),
        Some(Mutation::DuplicateId) => record[f.id] = id(i.saturating_sub(1)),
        Some(Mutation::NotAnObject(text)) => return text.to_string(),
        _ => {}
    }
    let text = record.to_string();
    match mutation {
        Some(Mutation::Truncate(ix)) => {
            let cuts: Vec<usize> = (1..text.len())
                .filter(|&c| text.is_char_boundary(c))
                .collect();
            text[..cuts[ix.index(cuts.len())]].to_string()
        }
        _ => text,
    }
}

fn starts_with_path(e: &TaskError, path: &Path) -> Result<(), TestCaseError> {
    let shown = e.to_string();
    prop_assert!(shown.starts_with(&path.display().to_string()), "{}", shown);
    Ok(())
}

/// Builds a file of `f`'s records (one mutated, if any) and checks what the loader makes of it.
fn check_file(
    f: &Format,
    seeds: &[prop::sample::Index],
    fillers: &[Vec<&str>],
    mutated: Option<(prop::sample::Index, Mutation)>,
) -> Result<(), TestCaseError> {
    let mutated = mutated.map(|(ix, m)| (ix.index(seeds.len()), m));
    // A duplicate needs a record before it.
    let mutated = mutated.filter(|(k, m)| *k > 0 || !matches!(m, Mutation::DuplicateId));
    let mut lines: Vec<String> = f.header.iter().cloned().collect();
    let mut bad_line = None;
    for (i, seed) in seeds.iter().enumerate() {
        lines.extend(fillers[i].iter().map(|s| s.to_string()));
        let m = mutated.as_ref().filter(|(k, _)| *k == i).map(|(_, m)| m);
        if m.is_some() {
            bad_line = Some((i, lines.len() + 1));
        }
        lines.push(render(f, &f.seeds[seed.index(f.seeds.len())], i, m));
    }
    let text = lines.join("\n") + "\n";
    let path = Path::new("fuzz/tasks.jsonl");
    let got = TaskSet::parse(&text, path);
    match bad_line {
        None => {
            prop_assert!(
                got.is_ok(),
                "{:?}: {}",
                f.format,
                got.err().map(|e| e.to_string()).unwrap_or_default()
            );
            let set = got.unwrap();
            prop_assert_eq!(set.format(), f.format);
            let ids: Vec<String> = set.ids().map(str::to_string).collect();
            let expected: Vec<String> = (0..seeds.len())
                .map(|i| match f.format {
                    TaskFormat::Mbpp => (9000 + i).to_string(),
                    _ => format!("task-{i}"),
                })
                .collect();
            prop_assert_eq!(ids, expected);
        }
        Some((record, line)) => {
            prop_assert!(
                got.is_err(),
                "{:?}: a mutated record at line {} was accepted:\n{}",
                f.format,
                line,
                text
            );
            let e = got.err().unwrap();
            starts_with_path(&e, path)?;
            // The first record of a headerless file decides its format: a mutation there may
            // make the file another format's, which fails elsewhere.
            if record > 0 || f.header.is_some() {
                let at = format!("{}:{line}: ", path.display());
                prop_assert!(
                    e.to_string().starts_with(&at),
                    "{:?}: expected {}, got {}",
                    f.format,
                    at,
                    e
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn mutated_records_fail_at_their_line(
        seeds in prop::collection::vec(any::<prop::sample::Index>(), 1..5),
        fillers in prop::collection::vec(prop::sample::select(vec![vec![], vec![""], vec!["// note", "  "]]), 5),
        mutated in prop::option::of((any::<prop::sample::Index>(), mutation())),
    ) {
        // Every format takes the same file shape and mutation.
        for f in &formats() {
            check_file(f, &seeds, &fillers, mutated.clone())?;
        }
    }

    #[test]
    fn any_bytes_load_or_fail_naming_the_file(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 0..8),
        gzip in prop::sample::select(vec![false, false, false, true]),
    ) {
        for f in &formats() {
            check_bytes(f, &edits, gzip)?;
        }
    }
}

/// A file of `f`'s records with bytes overwritten, removed and inserted, loaded from disk.
fn check_bytes(
    f: &Format,
    edits: &[(prop::sample::Index, u8, u8)],
    gzip: bool,
) -> Result<(), TestCaseError> {
    let lines: Vec<String> = f
        .header
        .iter()
        .cloned()
        .chain(
            f.seeds
                .iter()
                .enumerate()
                .map(|(i, s)| render(f, s, i, None)),
        )
        .collect();
    let mut bytes = lines.join("\n").into_bytes();
    for &(at, byte, op) in edits {
        match (op, bytes.is_empty()) {
            (0, false) => {
                let i = at.index(bytes.len());
                bytes[i] = byte;
            }
            (1, false) => {
                bytes.remove(at.index(bytes.len()));
            }
            _ => {
                let i = at.index(bytes.len() + 1);
                bytes.insert(i, byte);
            }
        }
    }
    if gzip {
        // The gzip magic with a broken stream behind it.
        bytes.splice(0..0, [0x1f, 0x8b, 8, 0]);
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("tasks.jsonl");
    std::fs::write(&path, &bytes).expect("writes");
    if let Err(e) = TaskSet::load(&path) {
        starts_with_path(&e, &path)?;
    }
    Ok(())
}
