//! The standard wrappers over a deterministic counter env and over CartPole.

mod common;

use common::{Counter, ok};
use env_core::wrappers::{
    Autoreset, OrderEnforcing, RecordEpisodeStatistics, TimeLimit, TransformReward,
};
use env_core::{Env, EnvError, Options, Value, ValueEnv};

fn no_options() -> Options {
    Options::new()
}

#[test]
fn order_enforcing_rejects_step_before_reset() {
    let mut env = OrderEnforcing::new(Counter::new(3));
    assert_eq!(env.step(ok()).unwrap_err(), EnvError::ResetNeeded);
    assert!(!env.has_reset());
    env.reset(Some(1), &no_options()).unwrap();
    assert!(env.has_reset());
    assert_eq!(env.step(ok()).unwrap().reward, 1.0);
}

#[test]
fn order_enforcing_rejects_step_after_episode_end_until_reset() {
    let mut env = OrderEnforcing::new(Counter::new(2));
    env.reset(None, &no_options()).unwrap();
    assert!(!env.step(ok()).unwrap().terminated);
    assert!(env.step(ok()).unwrap().terminated);
    assert_eq!(env.step(ok()).unwrap_err(), EnvError::EpisodeEnded);
    // The rejected step did not reach the inner env.
    assert_eq!(env.inner().t, 2);
    env.reset(None, &no_options()).unwrap();
    assert_eq!(env.step(ok()).unwrap().obs.to_vec(), vec![2, 1]);
}

#[test]
fn order_enforcing_sees_truncation_from_an_inner_time_limit() {
    let mut env = OrderEnforcing::new(TimeLimit::new(Counter::new(100), 2).unwrap());
    env.reset(None, &no_options()).unwrap();
    env.step(ok()).unwrap();
    assert!(env.step(ok()).unwrap().truncated);
    assert_eq!(env.step(ok()).unwrap_err(), EnvError::EpisodeEnded);
}

#[test]
fn order_enforcing_close_is_idempotent_and_final() {
    let mut env = OrderEnforcing::new(Counter::new(3));
    env.reset(None, &no_options()).unwrap();
    env.close().unwrap();
    env.close().unwrap();
    assert_eq!(env.inner().closed, 1, "inner close must run exactly once");
    assert_eq!(env.step(ok()).unwrap_err(), EnvError::ClosedEnvironment);
    assert_eq!(
        env.reset(None, &no_options()).unwrap_err(),
        EnvError::ClosedEnvironment
    );
}

#[test]
fn order_enforcing_keeps_state_after_an_invalid_action() {
    let mut env = OrderEnforcing::new(Counter::new(3));
    env.reset(None, &no_options()).unwrap();
    assert!(matches!(
        env.step("bad".into()),
        Err(EnvError::InvalidAction(_))
    ));
    assert_eq!(env.step(ok()).unwrap().reward, 1.0);
}

#[test]
fn time_limit_truncates_at_max_and_resets_the_count() {
    let mut env = TimeLimit::new(Counter::new(100), 3).unwrap();
    assert_eq!(env.max_episode_steps(), 3);
    for episode in 0..2 {
        env.reset(None, &no_options()).unwrap();
        let flags: Vec<(bool, bool)> = (0..3)
            .map(|_| {
                let s = env.step(ok()).unwrap();
                (s.terminated, s.truncated)
            })
            .collect();
        assert_eq!(
            flags,
            vec![(false, false), (false, false), (false, true)],
            "episode {episode}"
        );
        assert_eq!(env.elapsed_steps(), 3);
    }
}

#[test]
fn time_limit_sets_truncated_even_when_terminated_like_gymnasium() {
    let mut env = TimeLimit::new(Counter::new(2), 2).unwrap();
    env.reset(None, &no_options()).unwrap();
    env.step(ok()).unwrap();
    let last = env.step(ok()).unwrap();
    assert!(last.terminated && last.truncated);
}

#[test]
fn time_limit_rejects_zero_steps() {
    assert!(matches!(
        TimeLimit::new(Counter::new(2), 0),
        Err(EnvError::InvalidKwargs(_))
    ));
}

#[test]
fn record_episode_statistics_reports_return_length_and_time() {
    let mut env = RecordEpisodeStatistics::with_buffer_length(Counter::new(3), 2);
    for _ in 0..3 {
        env.reset(None, &no_options()).unwrap();
        let a = env.step(ok()).unwrap();
        let b = env.step(ok()).unwrap();
        assert!(!a.info.contains_key("episode") && !b.info.contains_key("episode"));
        let last = env.step(ok()).unwrap();
        let ep = &last.info["episode"];
        // Rewards 1 + 2 + 3.
        assert_eq!(ep["r"], serde_json::json!(6.0));
        assert_eq!(ep["l"], serde_json::json!(3));
        let t = ep["t"].as_f64().unwrap();
        assert!((0.0..1e4).contains(&t), "elapsed seconds {t}");
    }
    assert_eq!(
        env.return_queue().iter().copied().collect::<Vec<_>>(),
        vec![6.0, 6.0]
    );
    assert_eq!(
        env.length_queue().len(),
        2,
        "buffer keeps only the last 2 episodes"
    );
    assert_eq!(env.time_queue().len(), 2);
}

#[test]
fn record_episode_statistics_counts_truncated_episodes() {
    let mut env = RecordEpisodeStatistics::new(TimeLimit::new(Counter::new(100), 2).unwrap());
    env.reset(None, &no_options()).unwrap();
    env.step(ok()).unwrap();
    let last = env.step(ok()).unwrap();
    assert!(last.truncated);
    assert_eq!(last.info["episode"]["r"], serde_json::json!(3.0));
    assert_eq!(last.info["episode"]["l"], serde_json::json!(2));
}

#[test]
fn autoreset_returns_reset_obs_on_the_step_after_the_final_one() {
    let mut env = Autoreset::new(Counter::new(2));
    let (obs, _) = env.reset(Some(7), &no_options()).unwrap();
    assert_eq!(obs.to_vec(), vec![1, 0]);
    let s1 = env.step(ok()).unwrap();
    assert_eq!(
        (s1.obs.to_vec(), s1.reward, s1.terminated),
        (vec![1, 1], 1.0, false)
    );
    let s2 = env.step(ok()).unwrap();
    assert_eq!(
        (s2.obs.to_vec(), s2.reward, s2.terminated),
        (vec![1, 2], 2.0, true)
    );
    // The autoreset step ignores its action (an invalid one is not even looked at).
    let s3 = env.step("ignored".into()).unwrap();
    assert_eq!(s3.obs.to_vec(), vec![2, 0]);
    assert_eq!(
        (s3.reward, s3.terminated, s3.truncated),
        (0.0, false, false)
    );
    // The reset continues the random stream: no seed is passed.
    assert_eq!(s3.info["reset_seed"], serde_json::Value::Null);
    let s4 = env.step(ok()).unwrap();
    assert_eq!((s4.obs.to_vec(), s4.reward), (vec![2, 1], 1.0));
}

#[test]
fn autoreset_flag_is_cleared_by_an_explicit_reset() {
    let mut env = Autoreset::new(Counter::new(1));
    env.reset(None, &no_options()).unwrap();
    assert!(env.step(ok()).unwrap().terminated);
    env.reset(None, &no_options()).unwrap();
    let s = env.step(ok()).unwrap();
    assert_eq!(
        (s.obs.to_vec(), s.reward),
        (vec![2, 1], 1.0),
        "a real step, not an autoreset"
    );
}

#[test]
fn transform_reward_applies_the_function() {
    let mut env = TransformReward::new(Counter::new(5), |r| 10.0 * r - 1.0);
    env.reset(None, &no_options()).unwrap();
    assert_eq!(env.step(ok()).unwrap().reward, 9.0);
    assert_eq!(env.step(ok()).unwrap().reward, 19.0);
}

#[test]
fn wrappers_stack_over_boxed_dyn_envs() {
    let inner: Box<dyn env_core::DynEnv> = Box::new(Counter::new(10));
    let mut env = ValueEnv::boxed(OrderEnforcing::new(TimeLimit::new(inner, 1).unwrap()));
    assert_eq!(
        env.step(Value::Text("ok".into())).unwrap_err(),
        EnvError::ResetNeeded
    );
    env.reset(None, &no_options()).unwrap();
    assert!(matches!(
        env.step(Value::Discrete(1)),
        Err(EnvError::InvalidAction(_))
    ));
    let s = env.step(Value::Text("ok".into())).unwrap();
    assert!(s.truncated);
    assert_eq!(
        s.obs,
        Value::Tensor(env_core::Tensor::I64(ndarray::arr1(&[1_i64, 1]).into_dyn()))
    );
}
