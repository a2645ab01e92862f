//! Property-based fuzzing of the one dataset reader (`trajectory::read`) on files made of the
//! fixtures' real records and their mutations: required fields dropped, duplicated or retyped,
//! lines cut short, invalid UTF-8, garbage, blank lines, a newer schema version, lines over the
//! reader's 1 MiB buffer, several attempts of one episode, and a last line without its newline.
//!
//! A model of the reader's documented policy (see `read.rs`) predicts every outcome, and the test
//! checks the reader against it:
//! - a bad line is an error naming the file and that line (`PATH:LINE:`), `UnsupportedVersion` for a
//!   newer version, `Corrupt` otherwise; the only exception is a last line without a newline that
//!   is not a record, which is torn: skipped and counted in `torn_bytes`;
//! - the records are the last attempt of each episode in order of its first line; no complete
//!   valid record is ever dropped;
//! - `read` never changes the file; `read_and_repair` cuts exactly the torn bytes or ends a whole
//!   last record with its newline, leaves a file it cannot read untouched, and a record appended
//!   after it is read back with every record before it.
//!
//! Cases: `CODEGYM_FUZZ_CASES` (default 128; see docs/fuzzing.md for the long mode).

use std::path::Path;

use proptest::prelude::*;
use serde_json::Value as J;
use trajectory::SCHEMA_VERSION;
use trajectory::read::{ReadError, read, read_and_repair};

#[path = "../../tests/support/fuzz_config.rs"]
mod fuzz_config;

fn config(default: u32) -> proptest::test_runner::Config {
    fuzz_config::config(default, "tests/proptest-regressions/fuzz_read.txt")
}

/// The real records of the fixtures (every schema version this build reads), the seed corpus.
fn seeds() -> Vec<J> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let mut seeds = Vec::new();
    for name in ["v1.jsonl", "v2.jsonl"] {
        let text = std::fs::read_to_string(format!("{dir}/{name}")).expect("a fixture");
        seeds.extend(
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| serde_json::from_str::<J>(l).expect("a fixture line is JSON")),
        );
    }
    assert!(seeds.len() >= 8, "{} seed records", seeds.len());
    seeds
}

/// Fields every record has; a record without one (or with one of the wrong type) is no record.
const REQUIRED: &[(&str, J)] = &[
    ("schema_version", J::Null),
    ("run_id", J::Bool(true)),
    ("episode_id", J::Null),
    ("task_id", J::Bool(false)),
    ("sample_index", J::Bool(true)),
    ("seed", J::Null),
    ("messages", J::Bool(true)),
    ("turns", J::Null),
    ("stop_reason", J::Bool(false)),
    ("timings", J::Null),
];

#[derive(Debug, Clone)]
enum Mutation {
    None,
    Long,
    Drop(usize),
    Retype(usize),
    Duplicate,
    Truncate(prop::sample::Index),
    InvalidUtf8,
    Newer,
}

#[derive(Debug, Clone)]
enum Item {
    Blank(&'static str),
    Garbage(Vec<u8>),
    Record {
        seed: prop::sample::Index,
        episode: u32,
        mutation: Mutation,
    },
}

/// What the model expects of one line.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Class {
    Blank,
    Valid { episode: u32, marker: u64 },
    Corrupt,
    Newer,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        8 => Just(Mutation::None),
        1 => Just(Mutation::Long),
        2 => (0..REQUIRED.len()).prop_map(Mutation::Drop),
        2 => (0..REQUIRED.len()).prop_map(Mutation::Retype),
        1 => Just(Mutation::Duplicate),
        2 => any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        1 => Just(Mutation::InvalidUtf8),
        1 => Just(Mutation::Newer),
    ]
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        1 => prop::sample::select(vec!["", " ", "\t  ", "\r"]).prop_map(Item::Blank),
        1 => prop::collection::vec(any::<u8>().prop_filter("one line", |b| *b != b'\n'), 1..40)
            .prop_map(Item::Garbage),
        8 => (any::<prop::sample::Index>(), 0u32..4, mutation())
            .prop_map(|(seed, episode, mutation)| Item::Record { seed, episode, mutation }),
    ]
}

/// The line of an item (without its newline) and what the policy makes of it.
fn render(item: &Item, marker: u64, seeds: &[J]) -> (Vec<u8>, Class) {
    let (seed, episode, mutation) = match item {
        Item::Blank(s) => return (s.as_bytes().to_vec(), Class::Blank),
        Item::Garbage(b) if b.iter().all(u8::is_ascii_whitespace) => {
            return (b.clone(), Class::Blank);
        }
        Item::Garbage(b) => return (b.clone(), Class::Corrupt),
        Item::Record {
            seed,
            episode,
            mutation,
        } => (seed, *episode, mutation),
    };
    let mut record = seeds[seed.index(seeds.len())].clone();
    // One episode per `episode`, and a marker telling its attempts apart.
    record["task_id"] = J::from(format!("t{episode}"));
    record["sample_index"] = J::from(0);
    record["episode_id"] = J::from(format!("t{episode}#0"));
    record["seed"] = J::from(marker);
    let obj = record.as_object_mut().expect("a record is an object");
    match mutation {
        &Mutation::Drop(i) => {
            obj.remove(REQUIRED[i].0);
        }
        &Mutation::Retype(i) => {
            obj.insert(REQUIRED[i].0.into(), REQUIRED[i].1.clone());
        }
        Mutation::Long => {
            obj.insert("run_id".into(), J::from("r".repeat(1_200_000)));
        }
        Mutation::Newer => {
            obj.insert("schema_version".into(), J::from(SCHEMA_VERSION + 1));
        }
        _ => {}
    }
    let mut line = serde_json::to_vec(&record).expect("serializes");
    let class = match mutation {
        Mutation::None | Mutation::Long => Class::Valid { episode, marker },
        Mutation::Newer => Class::Newer,
        Mutation::Duplicate => {
            line.splice(1..1, b"\"seed\":1,".iter().copied());
            Class::Corrupt
        }
        Mutation::Truncate(at) => {
            line.truncate(1 + at.index(line.len() - 1));
            Class::Corrupt
        }
        Mutation::InvalidUtf8 => {
            let at = find(&line, b"\"task_id\":\"t").expect("a task_id") + 12;
            line.splice(at..at, [0xFF, 0xC0]);
            Class::Corrupt
        }
        Mutation::Drop(_) | Mutation::Retype(_) => Class::Corrupt,
    };
    (line, class)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The policy's prediction: the (episode, marker) of each record in order, and the torn bytes;
/// or the error's kind and line.
type Expected = Result<(Vec<(u32, u64)>, u64), (Class, u64)>;

fn model(lines: &[(Vec<u8>, Class)], last_newline: bool) -> Expected {
    let mut records: Vec<(u32, u64)> = Vec::new();
    for (i, (bytes, class)) in lines.iter().enumerate() {
        let last_unterminated = i + 1 == lines.len() && !last_newline;
        match *class {
            Class::Blank => {}
            Class::Valid { episode, marker } => {
                match records.iter_mut().find(|(e, _)| *e == episode) {
                    Some(r) => r.1 = marker,
                    None => records.push((episode, marker)),
                }
            }
            Class::Corrupt if last_unterminated => {
                return Ok((records, bytes.len() as u64));
            }
            class => return Err((class, i as u64 + 1)),
        }
    }
    Ok((records, 0))
}

fn seen(records: &[trajectory::TrajectoryRecord]) -> Vec<(u32, u64)> {
    records
        .iter()
        .map(|r| (r.task_id[1..].parse().expect("t<episode>"), r.seed))
        .collect()
}

fn check_error(err: &ReadError, path: &Path, class: Class, line: u64) -> Result<(), TestCaseError> {
    let ok = match (class, err) {
        (Class::Corrupt, ReadError::Corrupt { line: l, .. }) => *l == line,
        (Class::Newer, ReadError::UnsupportedVersion { line: l, .. }) => *l == line,
        _ => false,
    };
    prop_assert!(ok, "expected {:?} at line {}, got {:?}", class, line, err);
    let prefix = format!("{}:{line}:", path.display());
    prop_assert!(err.to_string().starts_with(&prefix), "{}", err);
    Ok(())
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn the_reader_follows_its_policy(
        mut items in prop::collection::vec(item(), 1..8),
        last_newline in any::<bool>(),
        only_last_bad in any::<bool>(),
    ) {
        // Half the files are good up to their last line, the case of a run killed mid-write, so that
        // the paths of a readable file (torn bytes, repair, resume) are taken as often as errors.
        if only_last_bad {
            let last = items.len() - 1;
            for item in &mut items[..last] {
                match item {
                    Item::Record { mutation, .. } => *mutation = Mutation::None,
                    Item::Garbage(_) => *item = Item::Blank(" "),
                    Item::Blank(_) => {}
                }
            }
        }
        let seeds = seeds();
        let lines: Vec<(Vec<u8>, Class)> = items
            .iter()
            .enumerate()
            .map(|(i, item)| render(item, 1000 + i as u64, &seeds))
            .collect();
        let mut bytes = lines.iter().map(|(l, _)| l.as_slice()).collect::<Vec<_>>().join(&b'\n');
        if last_newline {
            bytes.push(b'\n');
        }
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("run.jsonl");
        std::fs::write(&path, &bytes).expect("writes");
        let expected = model(&lines, last_newline);

        let got = read(&path);
        prop_assert_eq!(&std::fs::read(&path).expect("reads"), &bytes, "read changed the file");
        match &expected {
            Err((class, line)) => {
                let err = got.expect_err("the model expects an error");
                check_error(&err, &path, *class, *line)?;
                let err = read_and_repair(&path).expect_err("repair reads the same file");
                check_error(&err, &path, *class, *line)?;
                prop_assert_eq!(&std::fs::read(&path).expect("reads"), &bytes, "repair changed a bad file");
                return Ok(());
            }
            Ok((records, torn)) => {
                prop_assert!(got.is_ok(), "expected {:?}, got {:?}", expected, got.as_ref().err());
                let d = got.unwrap();
                prop_assert_eq!(&seen(&d.records), records);
                prop_assert_eq!(d.torn_bytes, *torn);
            }
        }
        let Ok((records, torn)) = expected else { unreachable!() };

        // Repair: the torn bytes cut, or a whole last record ended; nothing else changes.
        let d = read_and_repair(&path).expect("repair reads what read did");
        prop_assert_eq!(&seen(&d.records), &records);
        let mut repaired = bytes[..bytes.len() - torn as usize].to_vec();
        let whole_last = matches!(lines.last(), Some((_, Class::Valid { .. })));
        if !last_newline && whole_last {
            repaired.push(b'\n');
        }
        prop_assert_eq!(&std::fs::read(&path).expect("reads"), &repaired);

        // Resume appends after the repair: every record before it is still read.
        let mut next = seeds[0].clone();
        next["task_id"] = J::from("t9");
        next["sample_index"] = J::from(0);
        next["episode_id"] = J::from("t9#0");
        next["seed"] = J::from(9u64);
        let mut appended = repaired.clone();
        appended.extend(serde_json::to_vec(&next).expect("serializes"));
        appended.push(b'\n');
        std::fs::write(&path, &appended).expect("writes");
        let d = read(&path);
        prop_assert!(d.is_ok(), "after resume: {:?}", d.as_ref().err());
        let d = d.unwrap();
        let mut with_next = records.clone();
        with_next.push((9, 9));
        prop_assert_eq!(seen(&d.records), with_next);
        prop_assert_eq!(d.torn_bytes, 0);
    }
}
