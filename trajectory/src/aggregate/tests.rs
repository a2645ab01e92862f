//! The aggregation's rules: errored episodes out, pass@k's k values and withholding, both means.

use super::*;

fn outcome(task: &str, sampled: bool, solved: bool, final_reward: f64) -> Outcome<'_> {
    Outcome {
        task_id: task,
        sampled,
        solved,
        final_reward,
        total_reward: final_reward + 0.5,
        cross_checks: CrossCheckCounts::default(),
    }
}

#[test]
fn errored_episodes_count_as_episodes_and_nothing_else() {
    let tally = Tally::of([
        outcome("a", true, true, 1.0),
        outcome("a", true, false, 0.0),
        outcome("b", true, false, 0.5),
        outcome("b", false, false, 0.0),
    ]);
    let a = tally.aggregate();
    assert_eq!(
        (a.episodes, a.errored, a.sampled_episodes, a.solved),
        (4, 1, 3, 1)
    );
    assert!((a.solved_rate - 1.0 / 3.0).abs() < 1e-12);
    assert!((a.mean_final_reward - 0.5).abs() < 1e-12);
    assert!((a.mean_total_reward - 1.0).abs() < 1e-12);
    // Task b has one sample: pass@1 over both tasks, pass@2 withheld for the whole set.
    assert_eq!(a.pass_at_k.keys().collect::<Vec<_>>(), ["pass@1"]);
    assert!((a.pass_at_k["pass@1"] - 0.25).abs() < 1e-12);
    let tasks = tally.tasks();
    assert_eq!(tasks[1].task_id, "b");
    assert_eq!(
        (
            tasks[1].aggregate.errored,
            tasks[1].aggregate.sampled_episodes
        ),
        (1, 1)
    );
}

#[test]
fn a_task_whose_episodes_all_errored_withholds_pass_at_k() {
    let a = Tally::of([
        outcome("a", true, true, 1.0),
        outcome("b", false, false, 0.0),
    ])
    .aggregate();
    assert!(a.pass_at_k.is_empty(), "{:?}", a.pass_at_k);
    assert_eq!(a.solved_rate, 1.0);
}

#[test]
fn default_ks_are_powers_of_two_and_the_sample_count() {
    assert_eq!(default_ks(0), Vec::<u64>::new());
    assert_eq!(default_ks(1), [1]);
    assert_eq!(default_ks(3), [1, 2, 3]);
    assert_eq!(default_ks(4), [1, 2, 4]);
    assert_eq!(default_ks(10), [1, 2, 4, 8, 10]);
    let four: Vec<_> = (0..4).map(|i| outcome("a", true, i < 2, 0.0)).collect();
    let a = Tally::of(four.clone()).aggregate();
    assert_eq!(a.pass_at_k.len(), 3);
    assert!((a.pass_at_k["pass@4"] - 1.0).abs() < 1e-12);
    // Named k values (`codegym evaluate -k`) are still withheld above the samples.
    let named = Tally::of(four).aggregate_with_ks(&[1, 10]);
    assert_eq!(named.pass_at_k.keys().collect::<Vec<_>>(), ["pass@1"]);
}

#[test]
fn an_old_summary_reads_its_mean_reward_as_the_total_reward_mean() {
    let old = r#"{"episodes": 2, "sampled_episodes": 2, "solved": 1, "solved_rate": 0.5,
        "pass_at_k": {"pass@1": 0.5}, "mean_reward": 0.75}"#;
    let a: Aggregate = serde_json::from_str(old).unwrap();
    assert_eq!(a.mean_total_reward, 0.75);
    assert_eq!(a.errored, 0);
}

#[test]
fn cross_checks_are_counted_over_samples_with_the_disagreeing_tasks() {
    let checks = |agree, disagree| CrossCheckCounts {
        agree,
        disagree,
        unavailable: 1,
        error: 0,
    };
    let a = Tally::of([
        Outcome {
            cross_checks: checks(1, 2),
            ..outcome("b", true, true, 1.0)
        },
        Outcome {
            cross_checks: checks(3, 0),
            ..outcome("a", true, true, 1.0)
        },
        // An errored episode is no sample: its checks are not counted.
        Outcome {
            cross_checks: checks(0, 5),
            ..outcome("c", false, false, 0.0)
        },
    ])
    .aggregate();
    assert_eq!(
        a.cross_checks,
        CrossCheckCounts {
            agree: 4,
            disagree: 2,
            unavailable: 2,
            error: 0
        }
    );
    assert_eq!(a.disagreeing_tasks, ["b"]);
    assert_eq!(
        a.cross_checks.to_string(),
        "agree 4, disagree 2, unavailable 2, error 0"
    );
    let json = serde_json::to_value(&a).unwrap();
    assert_eq!(json["cross_checks"]["disagree"], 2);
    // Absent when there were none, so older summaries read the same.
    let none =
        serde_json::to_value(Tally::of([outcome("a", true, true, 1.0)]).aggregate()).unwrap();
    assert!(none.get("cross_checks").is_none() && none.get("disagreeing_tasks").is_none());
}
