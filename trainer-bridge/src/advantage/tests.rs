//! Hand-computed values for every estimator and mask policy.

use super::*;

fn s(group: &str, reward: f64) -> Sample<'_> {
    Sample {
        group,
        reward,
        status: EpisodeStatus::Completed,
    }
}

fn cfg(estimator: Estimator) -> AdvantageConfig {
    AdvantageConfig {
        estimator,
        eps: 0.0,
        ..AdvantageConfig::default()
    }
}

fn assert_close(actual: &Array1<f64>, expected: &[f64]) {
    assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
    for (a, e) in actual.iter().zip(expected) {
        assert!((a - e).abs() < 1e-9, "{actual:?} vs {expected:?}");
    }
}

#[test]
fn grpo_uses_sample_std_per_group() {
    // Group a: mean 0.5, sample std sqrt(1/3); group b: mean 2, sample std 1.
    let samples = [
        s("a", 1.0),
        s("b", 3.0),
        s("a", 0.0),
        s("b", 1.0),
        s("a", 0.0),
        s("b", 2.0),
        s("a", 1.0),
    ];
    let out = compute(&samples, &cfg(Estimator::Grpo)).unwrap();
    let k = 0.5 / (1.0f64 / 3.0).sqrt();
    assert_close(&out.advantage, &[k, 1.0, -k, -1.0, -k, 0.0, k]);
    assert!(out.mask.iter().all(|m| *m));
    assert!(out.zero_variance.iter().all(|z| !*z));
}

#[test]
fn grpo_population_std_and_eps() {
    let samples = [s("a", 1.0), s("a", 0.0)];
    let config = AdvantageConfig {
        std: StdKind::Population,
        eps: 0.5,
        ..AdvantageConfig::default()
    };
    let out = compute(&samples, &config).unwrap();
    // std 0.5, so 0.5 / (0.5 + 0.5).
    assert_close(&out.advantage, &[0.5, -0.5]);
}

#[test]
fn dr_grpo_subtracts_the_mean_only() {
    let samples = [
        s("g", 3.0),
        s("g", 1.0),
        s("g", 2.0),
        s("h", 10.0),
        s("h", 0.0),
    ];
    let out = compute(&samples, &cfg(Estimator::DrGrpo)).unwrap();
    assert_close(&out.advantage, &[1.0, -1.0, 0.0, 5.0, -5.0]);
}

#[test]
fn rloo_uses_the_mean_of_the_others() {
    let samples = [
        s("g", 3.0),
        s("g", 1.0),
        s("g", 2.0),
        s("h", 1.0),
        s("h", 0.0),
        s("h", 0.0),
        s("h", 1.0),
    ];
    let out = compute(&samples, &cfg(Estimator::Rloo)).unwrap();
    let t = 2.0 / 3.0;
    assert_close(&out.advantage, &[1.5, -1.5, 0.0, t, -t, -t, t]);
}

#[test]
fn return_is_the_raw_reward() {
    let samples = [s("g", 0.25), s("g", -2.0)];
    let out = compute(&samples, &cfg(Estimator::Return)).unwrap();
    assert_close(&out.advantage, &[0.25, -2.0]);
}

#[test]
fn zero_variance_groups_are_flagged_and_optionally_dropped() {
    let samples = [
        s("flat", 1.0),
        s("ok", 1.0),
        s("flat", 1.0),
        s("ok", 0.0),
        s("single", 0.7),
    ];
    let out = compute(&samples, &cfg(Estimator::Grpo)).unwrap();
    assert_eq!(
        out.zero_variance.to_vec(),
        vec![true, false, true, false, true]
    );
    assert_close(
        &out.advantage,
        &[0.0, 0.5f64 / 0.5f64.sqrt(), 0.0, -0.5 / 0.5f64.sqrt(), 0.0],
    );
    assert_eq!(out.kept(), 5);

    let dropped = AdvantageConfig {
        drop_zero_variance: true,
        ..cfg(Estimator::Return)
    };
    let out = compute(&samples, &dropped).unwrap();
    assert_eq!(out.mask.to_vec(), vec![false, true, false, true, false]);
    assert_close(&out.advantage, &[0.0, 1.0, 0.0, 0.0, 0.0]);
    assert_eq!(out.kept(), 2);
}

fn failed(group: &str, reward: f64) -> Sample<'_> {
    Sample {
        status: EpisodeStatus::InfraFailure,
        ..s(group, reward)
    }
}

#[test]
fn infra_failures_are_outside_every_estimators_baseline() {
    // Group g: three scored samples (1, 0, 0.5) and an infrastructure failure whose record holds a
    // reward of 1 (steps scored before the server was lost): it must count for nothing. Over the
    // scored three: mean 0.5, sample std sqrt(((0.5)^2 + (0.5)^2 + 0) / 2) = 0.5.
    let samples = [s("g", 1.0), failed("g", 1.0), s("g", 0.0), s("g", 0.5)];
    let expected: [(Estimator, [f64; 3]); 4] = [
        (Estimator::Grpo, [0.5 / 0.5, -0.5 / 0.5, 0.0]),
        (Estimator::DrGrpo, [0.5, -0.5, 0.0]),
        // r_i minus the mean of the other two scored rewards.
        (
            Estimator::Rloo,
            [
                1.0 - (0.0 + 0.5) / 2.0,
                0.0 - (1.0 + 0.5) / 2.0,
                0.5 - (1.0 + 0.0) / 2.0,
            ],
        ),
        (Estimator::Return, [1.0, 0.0, 0.5]),
    ];
    for (estimator, [a, b, c]) in expected {
        let out = compute(&samples, &cfg(estimator)).unwrap();
        assert_close(&out.advantage, &[a, 0.0, b, c]);
        assert_eq!(
            out.mask.to_vec(),
            vec![true, false, true, true],
            "{estimator:?}"
        );
        assert_eq!(out.reward[1], 0.0, "an unscored sample has no reward");
        assert!(out.zero_variance.iter().all(|z| !*z), "{estimator:?}");
    }
}

#[test]
fn a_group_with_fewer_than_two_scored_samples_has_no_baseline() {
    // One scored sample beside a failure: advantage 0 and zero_variance (the raw reward under
    // Return); a group of failures only: nothing scored, nothing flagged.
    let samples = [s("one", 0.7), failed("one", 0.0), failed("none", f64::NAN)];
    for estimator in [Estimator::Grpo, Estimator::DrGrpo, Estimator::Rloo] {
        let out = compute(&samples, &cfg(estimator)).unwrap();
        assert_close(&out.advantage, &[0.0, 0.0, 0.0]);
        assert_eq!(out.mask.to_vec(), vec![true, false, false]);
        assert_eq!(out.zero_variance.to_vec(), vec![true, false, false]);
    }
    let out = compute(&samples, &cfg(Estimator::Return)).unwrap();
    assert_close(&out.advantage, &[0.7, 0.0, 0.0]);
    let dropped = AdvantageConfig {
        drop_zero_variance: true,
        ..cfg(Estimator::Grpo)
    };
    assert_eq!(compute(&samples, &dropped).unwrap().kept(), 0);
}

#[test]
fn truncated_episodes_follow_their_policy() {
    let mut cut = s("g", 1.0);
    cut.status = EpisodeStatus::Truncated;
    let samples = [s("g", 1.0), cut, s("g", 1.0)];

    let keep = compute(&samples, &cfg(Estimator::DrGrpo)).unwrap();
    assert_close(&keep.advantage, &[0.0, 0.0, 0.0]);
    assert!(keep.zero_variance.iter().all(|z| *z));

    let zero = AdvantageConfig {
        truncated: MaskPolicy::ZeroReward,
        ..cfg(Estimator::DrGrpo)
    };
    let out = compute(&samples, &zero).unwrap();
    let third = 1.0 / 3.0;
    assert_close(&out.advantage, &[third, -2.0 * third, third]);
    assert_close(&out.reward, &[1.0, 0.0, 1.0]);
    assert!(out.mask.iter().all(|m| *m));

    let exclude = AdvantageConfig {
        truncated: MaskPolicy::Exclude,
        ..cfg(Estimator::Rloo)
    };
    let out = compute(&samples, &exclude).unwrap();
    assert_eq!(out.mask.to_vec(), vec![true, false, true]);
}

#[test]
fn non_finite_rewards_and_bad_eps_are_errors() {
    let samples = [s("g", 1.0), s("g", f64::INFINITY)];
    let err = compute(&samples, &AdvantageConfig::default()).unwrap_err();
    assert!(
        matches!(err, AdvantageError::NonFiniteReward { index: 1, .. }),
        "{err}"
    );
    let config = AdvantageConfig {
        eps: -1.0,
        ..AdvantageConfig::default()
    };
    assert_eq!(
        compute(&[], &config).unwrap_err(),
        AdvantageError::InvalidEps(-1.0)
    );
}

#[test]
fn empty_input_gives_empty_output() {
    let out = compute(&[], &AdvantageConfig::default()).unwrap();
    assert_eq!(out.advantage.len(), 0);
}

#[test]
fn config_rejects_unknown_fields_and_fills_defaults() {
    let c: AdvantageConfig =
        serde_json::from_str(r#"{"estimator": "rloo", "truncated": "zero_reward"}"#).unwrap();
    assert_eq!(c.estimator, Estimator::Rloo);
    assert_eq!(c.truncated, MaskPolicy::ZeroReward);
    assert!(!c.drop_zero_variance);
    assert!(serde_json::from_str::<AdvantageConfig>(r#"{"estimatr": "rloo"}"#).is_err());
    // The removed `errored` policy is refused with its replacement, whatever its value.
    for value in ["keep", "exclude", "zero_reward"] {
        let err = serde_json::from_str::<AdvantageConfig>(&format!(r#"{{"errored": "{value}"}}"#))
            .unwrap_err()
            .to_string();
        assert!(err.contains("on_infra_error"), "{err}");
    }
    let json = serde_json::to_value(AdvantageConfig::default()).unwrap();
    assert!(json.get("errored").is_none(), "{json}");
}
