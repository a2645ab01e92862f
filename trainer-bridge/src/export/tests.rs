//! Export tests on hand-written rollout files in the documented record schema.

use std::fs;
use std::path::Path;

use ::parquet::file::reader::{FileReader, SerializedFileReader};
use ::parquet::record::{Field, Row};
use serde_json::{Value, json};

use super::*;
use crate::advantage::{Estimator, MaskPolicy};

/// A record with one user prompt and one assistant turn per entry of `answers`.
fn record(task: &str, sample: u32, reward: f64, solved: bool, stop: &str, tokens: bool) -> Value {
    let mut messages = vec![
        json!({"role": "system", "content": "You write Python."}),
        json!({"role": "user", "content": format!("Solve {task}")}),
    ];
    let mut turns = Vec::new();
    for turn in 0..2u32 {
        messages.push(
            json!({"role": "assistant", "content": format!("```python\nprint({sample})\n```")}),
        );
        let mut call = json!({"latency_ms": 5, "attempts": 1});
        if tokens {
            call["tokens"] = json!({
                "prompt_token_ids": [1, 2, 3],
                "completion_token_ids": [10 + turn, 20 + turn],
                "logprobs": [-0.5, -0.25],
            });
        }
        turns.push(json!({"index": turn, "model_call": call, "message_index": messages.len() - 1}));
        messages.push(json!({"role": "user", "content": "Output: ..."}));
    }
    json!({
        "schema_version": 1, "run_id": "run", "episode_id": format!("{task}#{sample}"), "task_id": task,
        "group_id": format!("run/{task}"), "sample_index": sample, "seed": u64::MAX - u64::from(sample),
        "env_id": "codegym/Python-v0", "mode": "code_block",
        "model": {"requested": "m", "endpoint": "http://127.0.0.1:1"}, "sampling": {},
        "messages": messages, "turns": turns, "total_reward": reward, "final_reward": reward,
        "solved": solved, "stop_reason": stop, "usage": {},
        "timings": {"started_at_ms": 0, "wall_ms": 1, "model_ms": 1, "env_ms": 0},
        "engine": {"name": "codegym-rollout", "version": "0.1.0"}
    })
}

/// An episode that ended in an infrastructure failure of `kind` (`stop`: `error` or `cancelled`),
/// after steps that earned `reward`.
fn failure(task: &str, sample: u32, reward: f64, stop: &str, kind: &str) -> Value {
    let mut r = record(task, sample, reward, false, stop, false);
    r["error"] = json!({"kind": kind, "message": format!("{kind} happened")});
    r
}

fn row_json(row: &Row) -> Value {
    Value::Object(
        row.get_column_iter()
            .map(|(k, f)| (k.clone(), field_json(f)))
            .collect(),
    )
}

/// Parquet's record API view of a value, shaped like the JSONL export (3-level lists unwrapped).
fn field_json(f: &Field) -> Value {
    match f {
        Field::Null => Value::Null,
        Field::Bool(b) => json!(b),
        Field::Long(x) => json!(x),
        Field::Double(x) => json!(x),
        Field::Str(s) => json!(s),
        Field::Group(row) => row_json(row),
        Field::ListInternal(list) => Value::Array(list.elements().iter().map(field_json).collect()),
        other => panic!("unexpected parquet field {other:?}"),
    }
}

fn write_lines(path: &Path, lines: &[Value]) {
    let text: String = lines.iter().map(|v| format!("{v}\n")).collect();
    fs::write(path, text).unwrap();
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn sample_dataset(dir: &Path) -> std::path::PathBuf {
    let input = dir.join("rollout.jsonl");
    write_lines(
        &input,
        &[
            record("a", 0, 1.0, true, "solved", true),
            record("a", 1, 0.0, false, "max_turns", false),
            record("b", 0, 1.0, true, "solved", false),
            record("b", 1, 1.0, true, "solved", false),
            // Scored steps before the endpoint's quota ran out: a reward that is not the model's.
            failure("a", 2, 1.0, "error", "quota_exceeded"),
            failure("b", 2, 0.0, "cancelled", "cancelled"),
        ],
    );
    input
}

#[test]
fn rl_jsonl_has_advantages_messages_and_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let input = sample_dataset(dir.path());
    let out = dir.path().join("rl.jsonl");
    let mut config = ExportConfig::default();
    config.advantage.estimator = Estimator::DrGrpo;
    let summary = export(&input, &out, &config).unwrap();
    // The infrastructure failures stay as masked rows by default.
    assert_eq!(
        summary,
        ExportSummary {
            episodes: 6,
            rows: 6,
            masked: 2,
        }
    );
    let first_line = fs::read_to_string(&out)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    assert!(
        first_line.starts_with(r#"{"schema_version":2,"episode_id":"a#0","#),
        "{first_line}"
    );
    let rows = read_jsonl(&out);
    let adv: Vec<Option<f64>> = rows.iter().map(|r| r["advantage"].as_f64()).collect();
    assert_eq!(
        adv,
        vec![Some(0.5), Some(-0.5), Some(0.0), Some(0.0), None, None]
    );
    assert_eq!(rows[2]["zero_variance"], json!(true));
    assert_eq!(rows[0]["schema_version"], json!(EXPORT_SCHEMA_VERSION));
    assert_eq!(rows[0]["seed"], json!(u64::MAX.to_string()));
    assert_eq!(rows[0]["prompt"].as_array().unwrap().len(), 2);
    assert_eq!(rows[0]["prompt"][1]["content"], json!("Solve a"));
    let completion = rows[0]["completion"].as_array().unwrap();
    assert_eq!(completion.len(), 4);
    assert_eq!(completion[0]["role"], json!("assistant"));
    assert_eq!(rows[0]["completion_token_ids"], json!([[10, 20], [11, 21]]));
    assert_eq!(
        rows[0]["completion_logprobs"],
        json!([[-0.5, -0.25], [-0.5, -0.25]])
    );
    assert_eq!(rows[0]["prompt_token_ids"], json!([1, 2, 3]));
    assert_eq!(rows[1]["completion_token_ids"], Value::Null);
    assert_eq!(rows[1]["stop_reason"], json!("max_turns"));
}

#[test]
fn rl_masks_follow_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let input = sample_dataset(dir.path());
    let out = dir.path().join("rl.jsonl");
    let mut config = ExportConfig::default();
    config.advantage.drop_zero_variance = true;
    config.advantage.truncated = MaskPolicy::Exclude;
    // Group a keeps only a#0 (a#1 truncated, a#2 failed): flat, dropped; group b is flat too. The
    // two failures stay, masked.
    let summary = export(&input, &out, &config).unwrap();
    assert_eq!((summary.rows, summary.masked), (2, 2));
    config.on_infra_error = InfraErrorPolicy::Drop;
    assert_eq!(export(&input, &out, &config).unwrap().rows, 0);
    config.advantage = AdvantageConfig {
        truncated: MaskPolicy::ZeroReward,
        estimator: Estimator::Rloo,
        ..AdvantageConfig::default()
    };
    let summary = export(&input, &out, &config).unwrap();
    assert_eq!((summary.rows, summary.masked), (4, 0));
    let rows = read_jsonl(&out);
    let a: Vec<f64> = rows
        .iter()
        .filter(|r| r["task_id"] == json!("a"))
        .map(|r| r["advantage"].as_f64().unwrap())
        .collect();
    // RLOO over a#0 (1) and a#1 (0): the failed a#2's reward of 1 is no part of either baseline.
    assert_eq!(a, vec![1.0, -1.0]);
    assert!(rows.iter().all(|r| r["masked"] == json!(false)));
}

#[test]
fn sft_keeps_solved_conversations() {
    let dir = tempfile::tempdir().unwrap();
    let input = sample_dataset(dir.path());
    let out = dir.path().join("sft.jsonl");
    let config = ExportConfig {
        format: ExportFormat::Sft,
        ..ExportConfig::default()
    };
    assert_eq!(export(&input, &out, &config).unwrap().rows, 3);
    let rows = read_jsonl(&out);
    assert!(
        rows.iter()
            .all(|r| r["messages"].as_array().unwrap().len() == 6)
    );
    let limited = ExportConfig {
        format: ExportFormat::Sft,
        sft: SftConfig {
            max_per_group: Some(1),
            min_reward: None,
        },
        ..ExportConfig::default()
    };
    assert_eq!(export(&input, &out, &limited).unwrap().rows, 2);
    // By reward, the failed a#2 (reward 1) would qualify: an infrastructure failure never does.
    let by_reward = ExportConfig {
        format: ExportFormat::Sft,
        sft: SftConfig {
            max_per_group: None,
            min_reward: Some(0.5),
        },
        ..ExportConfig::default()
    };
    let summary = export(&input, &out, &by_reward).unwrap();
    assert_eq!((summary.rows, summary.masked), (3, 0));
    let ids: Vec<Value> = read_jsonl(&out)
        .iter()
        .map(|r| r["episode_id"].clone())
        .collect();
    assert_eq!(ids, vec![json!("a#0"), json!("b#0"), json!("b#1")]);
}

#[test]
fn dpo_pairs_solved_with_failed_in_the_same_group() {
    let dir = tempfile::tempdir().unwrap();
    let input = sample_dataset(dir.path());
    let out = dir.path().join("dpo.jsonl");
    let config = ExportConfig {
        format: ExportFormat::Dpo,
        ..ExportConfig::default()
    };
    // Group a: a#0 solved vs a#1 failed (a#2, an infrastructure failure, is no side); group b has
    // no failed outcome (b#2 was cancelled: no side either).
    assert_eq!(export(&input, &out, &config).unwrap().rows, 1);
    let rows = read_jsonl(&out);
    assert_eq!(rows[0]["chosen_episode_id"], json!("a#0"));
    assert_eq!(rows[0]["rejected_episode_id"], json!("a#1"));
    assert_eq!(rows[0]["prompt"][1]["content"], json!("Solve a"));
    assert_eq!(
        rows[0]["chosen"][0]["content"],
        json!("```python\nprint(0)\n```")
    );
    assert_eq!(
        rows[0]["rejected"][0]["content"],
        json!("```python\nprint(1)\n```")
    );
}

#[test]
fn parquet_roundtrips_rows_nested_lists_and_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let input = sample_dataset(dir.path());
    let out = dir.path().join("rl.parquet");
    export(&input, &out, &ExportConfig::default()).unwrap();
    let reader = SerializedFileReader::new(fs::File::open(&out).unwrap()).unwrap();
    let meta = reader.metadata().file_metadata();
    assert_eq!(meta.num_rows(), 6);
    let kv = meta.key_value_metadata().unwrap();
    let export_meta = kv.iter().find(|k| k.key == "codegym.export").unwrap();
    assert!(export_meta.value.as_deref().unwrap().contains("\"rl\""));
    let rows: Vec<Value> = reader
        .get_row_iter(None)
        .unwrap()
        .map(|r| row_json(&r.unwrap()))
        .collect();
    let jsonl = dir.path().join("rl.jsonl");
    export(&input, &jsonl, &ExportConfig::default()).unwrap();
    let expected = read_jsonl(&jsonl);
    for (got, want) in rows.iter().zip(&expected) {
        for key in [
            "episode_id",
            "reward",
            "advantage",
            "masked",
            "mask_reason",
            "completion_token_ids",
            "prompt_token_ids",
            "seed",
        ] {
            assert_eq!(got[key], want[key], "{key}");
        }
        let contents = |v: &Value| {
            v.as_array()
                .unwrap()
                .iter()
                .map(|m| m["content"].clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(contents(&got["completion"]), contents(&want["completion"]));
    }
    assert_eq!(rows.len(), expected.len());
    // The masked rows' reward and advantage are Parquet nulls, not numbers.
    let masked: Vec<&Value> = rows.iter().filter(|r| r["masked"] == json!(true)).collect();
    assert_eq!(masked.len(), 2);
    for r in masked {
        assert_eq!(
            (&r["reward"], &r["advantage"]),
            (&Value::Null, &Value::Null)
        );
    }
}

#[test]
fn infra_failures_are_masked_rows_or_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let input = sample_dataset(dir.path());
    let out = dir.path().join("rl.jsonl");
    let mut config = ExportConfig::default();
    assert_eq!(config.on_infra_error, InfraErrorPolicy::Mask);
    config.advantage.estimator = Estimator::Grpo;
    config.advantage.eps = 0.0;
    export(&input, &out, &config).unwrap();
    let rows = read_jsonl(&out);
    let row = |id: &str| rows.iter().find(|r| r["episode_id"] == json!(id)).unwrap();
    for (id, reason) in [("a#2", "quota_exceeded"), ("b#2", "cancelled")] {
        let r = row(id);
        assert_eq!(r["masked"], json!(true), "{r}");
        assert_eq!(r["mask_reason"], json!(reason), "{r}");
        assert_eq!(r["reward"], Value::Null, "{r}");
        assert_eq!(r["advantage"], Value::Null, "{r}");
        assert_eq!(
            r["completion"].as_array().unwrap().len(),
            4,
            "the row keeps its messages"
        );
    }
    // GRPO over group a's scored rewards (1, 0): mean 0.5, sample std sqrt(0.5).
    let k = 0.5 / 0.5f64.sqrt();
    assert_eq!(row("a#0")["advantage"].as_f64().unwrap(), k);
    assert_eq!(row("a#1")["advantage"].as_f64().unwrap(), -k);
    assert_eq!(row("a#0")["masked"], json!(false));
    assert_eq!(row("a#0")["mask_reason"], Value::Null);

    config.on_infra_error = InfraErrorPolicy::Drop;
    let summary = export(&input, &out, &config).unwrap();
    assert_eq!((summary.rows, summary.masked), (4, 0));
    let dropped = read_jsonl(&out);
    assert!(dropped.iter().all(|r| r["masked"] == json!(false)));
    for (kept, all) in dropped
        .iter()
        .zip(rows.iter().filter(|r| r["masked"] == json!(false)))
    {
        assert_eq!(kept, all, "dropping the failures changes no other row");
    }
}

#[test]
fn export_config_reads_the_policy_and_refuses_the_removed_errored() {
    let c: ExportConfig =
        serde_json::from_str(r#"{"on_infra_error": "drop", "advantage": {"estimator": "rloo"}}"#)
            .unwrap();
    assert_eq!(c.on_infra_error, InfraErrorPolicy::Drop);
    let err = serde_json::from_str::<ExportConfig>(r#"{"advantage": {"errored": "exclude"}}"#)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`errored: exclude` is `on_infra_error: drop`"),
        "{err}"
    );
    assert!(serde_json::from_str::<ExportConfig>(r#"{"on_infra_error": "zero"}"#).is_err());
}

#[cfg(unix)]
#[test]
fn outputs_get_normal_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let input = sample_dataset(dir.path());
    let out = dir.path().join("rl.parquet");
    export(&input, &out, &ExportConfig::default()).unwrap();
    assert_eq!(
        fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o644
    );
    fs::set_permissions(&out, fs::Permissions::from_mode(0o640)).unwrap();
    export(&input, &out, &ExportConfig::default()).unwrap();
    assert_eq!(
        fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o640
    );
}

#[test]
fn empty_exports_are_valid_files() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("empty.jsonl");
    fs::write(&input, "").unwrap();
    let out = dir.path().join("dpo.parquet");
    let config = ExportConfig {
        format: ExportFormat::Dpo,
        ..ExportConfig::default()
    };
    assert_eq!(export(&input, &out, &config).unwrap().rows, 0);
    let reader = SerializedFileReader::new(fs::File::open(&out).unwrap()).unwrap();
    assert_eq!(reader.metadata().file_metadata().num_rows(), 0);
    assert!(
        reader
            .metadata()
            .file_metadata()
            .schema_descr()
            .num_columns()
            > 5
    );
}

#[test]
fn failed_exports_leave_no_partial_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rl.jsonl");
    fs::write(&out, "previous\n").unwrap();
    let input = dir.path().join("bad.jsonl");
    fs::write(&input, "{\"schema_version\": 1}\n").unwrap();
    let err = export(&input, &out, &ExportConfig::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("bad.jsonl:1:"), "{err}");
    assert_eq!(fs::read_to_string(&out).unwrap(), "previous\n");
    let leftovers: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());

    let err = export(
        &sample_dataset(dir.path()),
        &dir.path().join("x.csv"),
        &ExportConfig::default(),
    )
    .unwrap_err();
    assert!(matches!(err, ExportError::UnknownExtension(_)), "{err}");
    let err = export(
        &sample_dataset(dir.path()),
        &dir.path().join("no/such/dir/x.jsonl"),
        &ExportConfig::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("no/such/dir/x.jsonl"), "{err}");
}

#[test]
fn rows_carry_the_provenance_of_the_last_scored_step() {
    let dir = tempfile::tempdir().unwrap();
    let provenance = |toolchain: &str| {
        json!({"task_hash": "sha256:t", "reward_spec_hash": "sha256:r", "reward_spec_version": 1,
               "limits": {"cpu_ms": 1, "wall_ms": 2, "memory_bytes": 3, "max_processes": 4,
                          "max_file_bytes": 5, "stdout_cap": 6, "stderr_cap": 7,
                          "per_test_timeout_ms": 8},
               "sandbox_backend": "fresh", "isolation_level": "strict", "language": "python",
               "toolchain": toolchain, "codegym_version": "0.1.0"})
    };
    let step = |p: Value| {
        json!({"action": {"kind": "code_block", "code": "print(1)"}, "reward": 0.0,
               "terminated": false, "truncated": false, "duration_ms": 1, "provenance": p})
    };
    let mut solved = record("a", 0, 1.0, true, "solved", false);
    solved["turns"][0]["env_steps"] = json!([step(provenance("Python 3.11.0"))]);
    solved["turns"][1]["env_steps"] = json!([step(provenance("Python 3.11.7"))]);
    // A record written before provenance existed.
    let failed = record("a", 1, 0.0, false, "max_turns", false);
    let input = dir.path().join("rollout.jsonl");
    write_lines(&input, &[solved, failed]);
    let last = provenance("Python 3.11.7");
    let parsed =
        |v: &Value| -> Option<Value> { v.as_str().map(|s| serde_json::from_str(s).unwrap()) };
    for (format, column, rows) in [
        (ExportFormat::Rl, "provenance_json", 2),
        (ExportFormat::Sft, "provenance_json", 1),
        (ExportFormat::Dpo, "chosen_provenance_json", 1),
    ] {
        let out = dir.path().join("out.jsonl");
        let config = ExportConfig {
            format,
            ..ExportConfig::default()
        };
        assert_eq!(export(&input, &out, &config).unwrap().rows, rows);
        let rows = read_jsonl(&out);
        assert_eq!(parsed(&rows[0][column]), Some(last.clone()), "{format:?}");
        match format {
            ExportFormat::Rl => assert_eq!(rows[1][column], Value::Null),
            ExportFormat::Dpo => assert_eq!(rows[0]["rejected_provenance_json"], Value::Null),
            ExportFormat::Sft => {}
        }
    }
}
