//! `codegym export --format rl` end to end on a real rollout (the real coding env, the fake model
//! server answering some requests with quota errors and one with a context-length error): an
//! infrastructure failure is never a reward. With `--on-infra-error mask` (the default) its row
//! stays, flagged, with a null reward and advantage, in JSONL and in Parquet alike; with `drop` it
//! is left out; and every scored row's advantage is the estimator's formula over its group's
//! scored rows only. The expectations are computed here from the dataset itself.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;
#[path = "support/rollout_util.rs"]
mod rollout_util;

use std::collections::BTreeMap;
use std::path::Path;

use codegym_bin::{finish, spawn};
use fake_llm::{Fault, FaultRule};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use rollout_util::{rollout_args, script, task_ids};
use serde_json::{Value, json};
use trajectory::record::TrajectoryRecord;

/// GRPO's default epsilon, added to the group's std.
const EPS: f64 = 1e-6;

/// `codegym ARGS`, which must succeed: its stdout.
async fn codegym(args: Vec<String>) -> String {
    let (code, stdout, stderr) = finish(spawn(args)).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    stdout
}

async fn export(input: &Path, out: &Path, extra: &[&str]) -> String {
    let mut args: Vec<String> = ["export", "--format", "rl", "--in"]
        .into_iter()
        .map(String::from)
        .collect();
    args.push(input.display().to_string());
    args.extend(["--out".to_string(), out.display().to_string()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    codegym(args).await
}

fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The columns this test checks, of every row of a Parquet export, shaped like the JSONL rows.
fn parquet_rows(path: &Path) -> Vec<Value> {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let schema = reader.metadata().file_metadata().schema_descr_ptr();
    for name in ["reward", "advantage", "mask_reason"] {
        let column = schema.columns().iter().find(|c| c.name() == name).unwrap();
        assert_eq!(column.max_def_level(), 1, "{name} is a nullable column");
    }
    reader
        .get_row_iter(None)
        .unwrap()
        .map(|row| {
            let mut out = serde_json::Map::new();
            for (name, field) in row.unwrap().get_column_iter() {
                let value = match field {
                    Field::Null => Value::Null,
                    Field::Bool(b) => json!(b),
                    Field::Double(x) => json!(x),
                    Field::Str(s) => json!(s),
                    _ => continue,
                };
                if ["episode_id", "reward", "advantage", "masked", "mask_reason"]
                    .contains(&name.as_str())
                {
                    out.insert(name.clone(), value);
                }
            }
            Value::Object(out)
        })
        .collect()
}

/// GRPO advantages of one group's scored rewards: `(r - mean) / (sample std + eps)`, 0 for a
/// group with fewer than two scored rewards or all of them equal (no baseline).
fn grpo(rewards: &[f64]) -> Vec<f64> {
    let n = rewards.len() as f64;
    if rewards.len() < 2 || rewards.iter().all(|r| *r == rewards[0]) {
        return vec![0.0; rewards.len()];
    }
    let mean = rewards.iter().sum::<f64>() / n;
    let std = (rewards.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    rewards.iter().map(|r| (r - mean) / (std + EPS)).collect()
}

/// Each scored episode's expected advantage, over its group's scored episodes only.
fn expected_advantages(records: &[TrajectoryRecord]) -> BTreeMap<String, f64> {
    let mut groups: BTreeMap<&str, Vec<&TrajectoryRecord>> = BTreeMap::new();
    for r in records.iter().filter(|r| !r.stop_reason.is_infra_failure()) {
        groups.entry(&r.group_id).or_default().push(r);
    }
    let mut out = BTreeMap::new();
    for members in groups.values() {
        let rewards: Vec<f64> = members.iter().map(|r| r.total_reward).collect();
        for (r, a) in members.iter().zip(grpo(&rewards)) {
            out.insert(r.episode_id.clone(), a);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_failures_are_masked_or_dropped_and_advantages_use_scored_rows_only() {
    // Task 0 is solved by the script, task 1 is not. With one episode at a time, requests 1 and 5
    // are quota errors (not retried: the episodes end `error`), request 2 a context-length stop
    // (the model's outcome: a scored 0 in a group of solved episodes).
    let tasks = task_ids(2);
    let mut fake = script(0);
    fake.faults = vec![
        FaultRule::at(Fault::QuotaExceeded, [1, 5]),
        FaultRule::at(Fault::ContextLength, [2]),
    ];
    let server = fake_llm::FakeLlm::start(fake).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run.jsonl");
    let mut args = rollout_args(&server.base_url(), &tasks, 4, &run);
    args.extend(["--concurrency", "1"].map(String::from));
    // A run with failed episodes still writes its dataset (its exit code says it had failures).
    let (_, stdout, stderr) = finish(spawn(args)).await;
    let records = trajectory::read::read_latest(&run)
        .unwrap_or_else(|e| panic!("{e}\nstdout: {stdout}\nstderr: {stderr}"));
    let failed: Vec<&TrajectoryRecord> = records
        .iter()
        .filter(|r| r.stop_reason.is_infra_failure())
        .collect();
    assert_eq!(failed.len(), 2, "{stdout}{stderr}");
    let expected = expected_advantages(&records);
    // The run must exercise the rule: a group with a failure and scored rows that differ.
    assert!(
        failed.iter().any(|f| {
            let scored: Vec<f64> = records
                .iter()
                .filter(|r| r.group_id == f.group_id && !r.stop_reason.is_infra_failure())
                .map(|r| r.total_reward)
                .collect();
            scored.len() >= 2 && scored.iter().any(|x| *x != scored[0])
        }),
        "no group with a failure beside differing scored rewards: {records:?}"
    );

    let masked_jsonl = dir.path().join("masked.jsonl");
    let printed = export(&run, &masked_jsonl, &[]).await;
    assert!(printed.contains("(2 masked"), "{printed}");
    let masked_parquet = dir.path().join("masked.parquet");
    export(&run, &masked_parquet, &["--on-infra-error", "mask"]).await;
    let rows = jsonl(&masked_jsonl);
    assert_eq!(rows.len(), records.len(), "every episode has its row");
    for row in &rows {
        let id = row["episode_id"].as_str().unwrap();
        let record = records.iter().find(|r| r.episode_id == id).unwrap();
        if record.stop_reason.is_infra_failure() {
            assert_eq!(row["masked"], json!(true), "{row}");
            assert_eq!(row["mask_reason"], json!("quota_exceeded"), "{row}");
            assert_eq!(
                (&row["reward"], &row["advantage"]),
                (&Value::Null, &Value::Null)
            );
        } else {
            assert_eq!(row["masked"], json!(false), "{row}");
            assert_eq!(row["mask_reason"], Value::Null, "{row}");
            assert_eq!(row["reward"].as_f64(), Some(record.total_reward), "{row}");
            let got = row["advantage"].as_f64().unwrap();
            assert!(
                (got - expected[id]).abs() < 1e-9,
                "{id}: {got} vs {}",
                expected[id]
            );
        }
    }
    // Parquet holds the same rows, nulls as nulls.
    let parquet = parquet_rows(&masked_parquet);
    assert_eq!(parquet.len(), rows.len());
    for (p, j) in parquet.iter().zip(&rows) {
        for key in ["episode_id", "reward", "advantage", "masked", "mask_reason"] {
            assert_eq!(p[key], j[key], "{key}: {p} vs {j}");
        }
    }

    // `drop`: the failures are left out, every other row is unchanged.
    let dropped_path = dir.path().join("dropped.jsonl");
    let printed = export(&run, &dropped_path, &["--on-infra-error", "drop"]).await;
    assert!(printed.contains("(0 masked"), "{printed}");
    let dropped = jsonl(&dropped_path);
    let scored: Vec<&Value> = rows
        .iter()
        .filter(|r| r["masked"] == json!(false))
        .collect();
    assert_eq!(dropped.len(), records.len() - failed.len());
    assert_eq!(dropped.iter().collect::<Vec<_>>(), scored);
}

/// The removed `--errored` flag and config setting fail with what replaced them, and write nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_removed_errored_setting_names_its_replacement() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("empty.jsonl");
    std::fs::write(&input, "").unwrap();
    let out = dir.path().join("rl.jsonl");
    let config = dir.path().join("export.json");
    std::fs::write(
        &config,
        "{\n  \"advantage\": {\"errored\": \"zero_reward\"}\n}\n",
    )
    .unwrap();
    let base = |extra: &[&str]| {
        let mut args = vec!["export", "--format", "rl", "--in", input.to_str().unwrap()];
        args.extend(["--out", out.to_str().unwrap()]);
        args.extend(extra);
        args.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    for (extra, names) in [
        (vec!["--errored", "exclude"], "--errored".to_string()),
        (
            vec!["--config", config.to_str().unwrap()],
            format!("{}:2:", config.display()),
        ),
    ] {
        let (code, _, stderr) = finish(spawn(base(&extra))).await;
        assert_ne!(code, 0);
        assert!(stderr.contains(&names), "{stderr}");
        assert!(stderr.contains("on_infra_error"), "{stderr}");
        assert!(!out.exists());
    }
}
