//! Every schema version's fixture file (`tests/fixtures/v<N>.jsonl`, written in the shape the code
//! of that version wrote) stays readable by the one reader, loses nothing when read, and
//! aggregates. A new schema version without a fixture fails here.

use std::path::PathBuf;

use trajectory::aggregate::Tally;
use trajectory::read::read;
use trajectory::record::{
    ActionRecord, CrossCheckOutcome, DriftReason, OnDisagreement, StopReason,
};
use trajectory::{OLDEST_READABLE_VERSION, SCHEMA_VERSION, TrajectoryRecord};

fn fixture(version: u32) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/v{version}.jsonl"))
}

#[test]
fn every_version_has_a_fixture_that_reads_back_field_for_field() {
    for version in OLDEST_READABLE_VERSION..=SCHEMA_VERSION {
        let path = fixture(version);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("no fixture for schema version {version}: {e}"));
        let dataset = read(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            dataset.lines,
            text.lines().count() as u64,
            "{}",
            path.display()
        );
        assert_eq!(dataset.torn_bytes, 0);
        for (i, line) in text.lines().enumerate() {
            let written: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(written["schema_version"], version, "v{version}:{}", i + 1);
            let record: TrajectoryRecord = serde_json::from_str(line).unwrap();
            // Nothing the old writer wrote is dropped or changed by reading it.
            assert_eq!(
                serde_json::to_value(&record).unwrap(),
                written,
                "v{version}:{}",
                i + 1
            );
        }
    }
}

#[test]
fn version_1_keeps_the_rerun_and_aggregates() {
    let records = read(&fixture(1)).unwrap().records;
    let ids: Vec<_> = records.iter().map(|r| r.episode_id.as_str()).collect();
    assert_eq!(ids, ["add#0", "add#1", "mul#0", "mul#1"]);
    // add#1 errored, then its re-run solved it: the re-run wins.
    assert!(records[1].solved && !records[1].needs_rerun());
    let a = Tally::of_records(&records).aggregate();
    assert_eq!(
        (a.episodes, a.errored, a.sampled_episodes, a.solved),
        (4, 0, 4, 2)
    );
    assert_eq!(a.pass_at_k.keys().collect::<Vec<_>>(), ["pass@1", "pass@2"]);
    assert!((a.pass_at_k["pass@1"] - 0.5).abs() < 1e-12);
    assert!((a.pass_at_k["pass@2"] - 0.5).abs() < 1e-12);
    assert!((a.mean_final_reward - 0.5).abs() < 1e-12);
    assert_eq!(records[2].last_program(), Some("print(23)"));
}

#[test]
fn version_2_reads_every_addition_and_leaves_errored_episodes_out() {
    let records = read(&fixture(2)).unwrap().records;
    let a = Tally::of_records(&records).aggregate();
    // mul#1 was cancelled: an episode, not a sample; mul has one sample, so no pass@2.
    assert_eq!(
        (a.episodes, a.errored, a.sampled_episodes, a.solved),
        (4, 1, 3, 1)
    );
    assert_eq!(a.pass_at_k.keys().collect::<Vec<_>>(), ["pass@1"]);
    assert!((a.pass_at_k["pass@1"] - 0.5).abs() < 1e-12);
    assert!((a.mean_final_reward - 1.0 / 3.0).abs() < 1e-12);
    let by_id = |id: &str| records.iter().find(|r| r.episode_id == id).unwrap();
    assert_eq!(by_id("mul#0").restarts.len(), 1);
    assert_eq!(by_id("mul#0").turns[0].sub_calls.len(), 2);
    // Verdict provenance, and what `codegym rescore` found.
    let step = &by_id("mul#0").turns[0].env_steps[0];
    let now = step.provenance.as_ref().unwrap();
    let rescore = step.rescore.as_ref().unwrap();
    let then = rescore.recorded_provenance.as_ref().unwrap();
    assert_eq!(now.drift(then), [DriftReason::ToolchainChanged]);
    assert_eq!(rescore.reasons, [DriftReason::ToolchainChanged]);
    assert_eq!(by_id("mul#0").rescore.unwrap().recorded_final_reward, 0.0);
    // A cross-check of the rewarded program: it disagreed, and the run kept the reward.
    let check = step.cross_check.as_ref().unwrap();
    assert_eq!(
        (check.outcome, check.action, check.original_reward),
        (CrossCheckOutcome::Disagree, OnDisagreement::Keep, 1.0)
    );
    assert_eq!(check.disagreements[0].candidate, "3");
    assert_eq!((a.cross_checks.disagree, a.cross_checks.total()), (1, 1));
    assert_eq!(a.disagreeing_tasks, ["mul"]);
    assert_eq!(by_id("add#0").last_program(), Some("fn main(){}"));
    let autocoder = by_id("add#1");
    assert_eq!(autocoder.last_program(), Some("print(2 + 3)"));
    assert_eq!(
        autocoder.autocoder.as_ref().unwrap().requirements,
        ["tabulate==0.9.0"]
    );
}

#[test]
fn version_3_reads_repository_episodes() {
    let records = read(&fixture(3)).unwrap().records;
    let by_id = |id: &str| records.iter().find(|r| r.episode_id == id).unwrap();
    let fixed = by_id("inflection/ordinal-teens#0");
    assert_eq!(fixed.env_id, "codegym/Repo-v0");
    let steps: Vec<_> = fixed.turns.iter().flat_map(|t| &t.env_steps).collect();
    assert!(matches!(&steps[0].action, ActionRecord::Invalid { name, .. } if name == "view"));
    let tools: Vec<&str> = steps[1..]
        .iter()
        .map(|s| match &s.action {
            ActionRecord::RepoTool { tool, .. } => tool.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(tools, ["view", "str_replace", "bash", "submit"]);
    // No program: nothing for `codegym run --solution` to run.
    assert_eq!(fixed.last_program(), None);
    let outcome = fixed.repository.as_ref().unwrap();
    assert!(outcome.patch.as_deref().unwrap().contains("number % 100"));
    assert_eq!(outcome.verdict["resolved"], true);
    let idle = by_id("inflection/humanize-inner-id#0");
    assert_eq!(idle.repository.as_ref().unwrap().verdict["resolved"], false);
    assert!(!idle.repository.as_ref().unwrap().auto_submitted);
    // 2026-11-29: an episode the model ended without a submit, submitted by the engine.
    let auto = by_id("inflection/humanize-inner-id#1");
    assert_eq!(auto.stop_reason, StopReason::MaxTurns);
    assert!(auto.repository.as_ref().unwrap().auto_submitted);
    let last = auto.turns.last().unwrap().env_steps.last().unwrap();
    assert!(matches!(&last.action, ActionRecord::RepoTool { tool, .. } if tool == "submit"));
    assert_eq!(last.tool_call_id, None);
    let a = Tally::of_records(&records).aggregate();
    assert_eq!((a.episodes, a.sampled_episodes, a.solved), (3, 3, 1));
    assert!((a.mean_final_reward - 1.0 / 3.0).abs() < 1e-12);
}
