//! The rules: which steps are checked, and what each outcome does to the step and the record.

use serde_json::json;

use super::*;
use crate::record::DisagreementRecord;

/// An episode of two code-block steps: a partial reward, then the solving one.
fn record() -> TrajectoryRecord {
    let step = |reward: f64, solved: bool| {
        json!({
            "action": {"kind": "code_block", "code": format!("print({reward})")},
            "reward": reward, "terminated": solved, "truncated": false, "duration_ms": 1,
            "info": {"solved": solved, "mode": "script"},
        })
    };
    let turn = |index: u32, reward: f64, solved: bool| {
        json!({"index": index, "model_call": {"latency_ms": 1, "attempts": 1},
               "env_steps": [step(reward, solved)]})
    };
    serde_json::from_value(json!({
        "schema_version": 2, "run_id": "r", "episode_id": "t#0", "task_id": "t",
        "group_id": "r/t", "sample_index": 0, "seed": 1, "env_id": "codegym/Code-v0",
        "mode": "code_block", "model": {"requested": "m", "endpoint": "http://x"},
        "sampling": {}, "messages": [], "turns": [turn(0, 0.5, false), turn(1, 1.0, true)],
        "total_reward": 1.5, "final_reward": 1.0, "solved": true, "stop_reason": "solved",
        "usage": {}, "timings": {"started_at_ms": 0, "wall_ms": 1, "model_ms": 0, "env_ms": 0},
        "engine": {"name": "codegym-rollout", "version": "0"},
    }))
    .unwrap()
}

fn disagree() -> CrossCheckRecord {
    let d = DisagreementRecord {
        input: "[3]".into(),
        reference: "9".into(),
        candidate: "4".into(),
    };
    CrossCheckRecord::compared(20, vec![d; 5])
}

fn totals(r: &TrajectoryRecord) -> (f64, f64, bool) {
    (r.total_reward, r.final_reward, r.solved)
}

#[test]
fn zero_takes_the_reward_and_the_solve_and_a_later_agreement_gives_them_back() {
    let mut r = record();
    apply(&mut r, (1, 0), disagree(), OnDisagreement::Zero);
    let step = &r.turns[1].env_steps[0];
    let check = step.cross_check.as_ref().unwrap();
    assert_eq!((step.reward, check.original_reward), (0.0, 1.0));
    assert_eq!(check.action, OnDisagreement::Zero);
    assert_eq!((check.disagreeing, check.disagreements.len()), (5, 3));
    assert_eq!(totals(&r), (0.5, 0.0, false));
    assert_eq!(earned_reward(step), 1.0);
    // A zeroed step is still a candidate (by the reward it earned): a re-check replaces the
    // first one, undoing its penalty.
    assert!(matches!(candidate(step), Some(Ok(_))));
    apply(
        &mut r,
        (1, 0),
        CrossCheckRecord::compared(20, vec![]),
        OnDisagreement::Zero,
    );
    let check = r.turns[1].env_steps[0].cross_check.as_ref().unwrap();
    assert_eq!(
        (check.outcome, check.action),
        (CrossCheckOutcome::Agree, OnDisagreement::Keep)
    );
    assert_eq!(totals(&r), (1.5, 1.0, true));
}

#[test]
fn flag_keeps_the_reward_keep_and_other_outcomes_change_nothing() {
    let mut r = record();
    apply(&mut r, (1, 0), disagree(), OnDisagreement::Flag);
    assert_eq!(totals(&r), (1.5, 1.0, false));
    assert_eq!(r.turns[1].env_steps[0].reward, 1.0);

    for (check, policy) in [
        (disagree(), OnDisagreement::Keep),
        (
            CrossCheckRecord::error("sandbox: gone"),
            OnDisagreement::Zero,
        ),
        (
            CrossCheckRecord::unavailable("no reference"),
            OnDisagreement::Zero,
        ),
    ] {
        let mut r = record();
        apply(&mut r, (1, 0), check, policy);
        assert_eq!(totals(&r), (1.5, 1.0, true));
        let check = r.turns[1].env_steps[0].cross_check.as_ref().unwrap();
        assert_eq!(
            (check.action, check.original_reward),
            (OnDisagreement::Keep, 1.0)
        );
    }

    // Zeroing a step that is not the last one leaves `final_reward` alone.
    let mut r = record();
    apply(&mut r, (0, 0), disagree(), OnDisagreement::Zero);
    assert_eq!(totals(&r), (1.0, 1.0, true));
}

#[test]
fn candidates_are_rewarded_programs_run_in_script_mode() {
    let r = record();
    let c = candidate(&r.turns[1].env_steps[0]).unwrap().unwrap();
    assert_eq!(
        (c.program.as_str(), c.language.as_str()),
        ("print(1)", "python")
    );

    let mut step = r.turns[1].env_steps[0].clone();
    step.action = ActionRecord::RunCode {
        code: "int main(){}".into(),
        language: "cpp".into(),
    };
    assert_eq!(candidate(&step).unwrap().unwrap().language, "cpp");
    step.info.insert("mode".into(), json!("session"));
    assert!(candidate(&step).unwrap().unwrap_err().contains("session"));

    let mut unrewarded = r.turns[1].env_steps[0].clone();
    unrewarded.reward = 0.0;
    assert_eq!(candidate(&unrewarded), None);
    let mut file = r.turns[1].env_steps[0].clone();
    file.action = ActionRecord::ReadFile { path: "x".into() };
    assert_eq!(candidate(&file), None);
}

#[test]
fn sampling_is_stable_and_follows_the_fraction() {
    assert!((0..100).all(|i| sampled(1.0, 7, i)));
    assert!((0..100).all(|i| !sampled(0.0, 7, i)));
    let picked: Vec<bool> = (0..4000).map(|i| sampled(0.25, 7, i)).collect();
    let again: Vec<bool> = (0..4000).map(|i| sampled(0.25, 7, i)).collect();
    assert_eq!(picked, again);
    let n = picked.iter().filter(|&&p| p).count();
    assert!((850..1150).contains(&n), "{n} of 4000 at 0.25");
    // Another episode samples other steps.
    let other: Vec<bool> = (0..4000).map(|i| sampled(0.25, 8, i)).collect();
    assert_ne!(picked, other);
    // Pinned: a change here changes which steps existing runs checked.
    assert_eq!(
        (0..16).filter(|&i| sampled(0.5, 11, i)).collect::<Vec<_>>(),
        [0, 1, 2, 8, 9, 12, 13, 15]
    );
}
