//! `VectorEnv`: per-env seeds, next-step autoreset, shapes and stacking.

mod common;

use env_core::{DynEnv, EnvError, Kwargs, Options, Registry, Tensor, Value, VectorEnv, stack_obs};

fn counters(terminate_after: &[u32]) -> VectorEnv {
    VectorEnv::new(
        terminate_after
            .iter()
            .map(|&n| Box::new(common::Counter::new(n)) as Box<dyn DynEnv>)
            .collect(),
    )
    .unwrap()
}

fn ok(n: usize) -> Vec<Value> {
    vec![Value::Text("ok".into()); n]
}

fn i64s(v: &Value) -> Vec<i64> {
    match v {
        Value::Tensor(Tensor::I64(a)) => a.iter().copied().collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn reset_seeds_each_sub_env_with_seed_plus_index() {
    let mut v = counters(&[5, 5, 5]);
    let (obs, infos) = v.reset(Some(10), &Options::new()).unwrap();
    assert_eq!(obs.len(), 3);
    let seeds: Vec<_> = infos.iter().map(|i| i["reset_seed"].clone()).collect();
    assert_eq!(
        seeds,
        vec![
            serde_json::json!(10),
            serde_json::json!(11),
            serde_json::json!(12)
        ]
    );
    let (_, infos) = v.reset(None, &Options::new()).unwrap();
    assert!(infos.iter().all(|i| i["reset_seed"].is_null()));
}

#[test]
fn seeded_cartpole_vector_matches_single_envs() {
    let mut r = Registry::new();
    env_core::register_classic(&mut r).unwrap();
    let mut v = r
        .make_vec("classic/CartPole-v1", 4, &Kwargs::new())
        .unwrap();
    let (obs, _) = v.reset(Some(100), &Options::new()).unwrap();
    for (i, o) in obs.iter().enumerate() {
        let mut single = r.make("classic/CartPole-v1", &Kwargs::new()).unwrap();
        assert_eq!(
            &single
                .reset(Some(100 + i as u64), &Options::new())
                .unwrap()
                .0,
            o
        );
    }
    let s = v.step(vec![Value::Discrete(1); 4]).unwrap();
    let stacked = s.stacked_obs().unwrap();
    assert_eq!(stacked.shape(), [4, 4]);
    assert!(matches!(stacked, Tensor::F32(_)));
    assert_eq!(s.rewards.to_vec(), vec![1.0; 4]);
}

#[test]
fn next_step_autoreset_per_sub_env() {
    let mut v = counters(&[1, 2]);
    v.reset(None, &Options::new()).unwrap();
    let s1 = v.step(ok(2)).unwrap();
    assert_eq!(s1.terminated.to_vec(), vec![true, false]);
    assert_eq!(s1.rewards.to_vec(), vec![1.0, 1.0]);
    // Sub-env 0 autoresets (reward 0, flags false, reset obs [episode 2, t 0]); sub-env 1 terminates.
    let s2 = v.step(ok(2)).unwrap();
    assert_eq!(i64s(&s2.obs[0]), vec![2, 0]);
    assert_eq!(i64s(&s2.obs[1]), vec![1, 2]);
    assert_eq!(s2.rewards.to_vec(), vec![0.0, 2.0]);
    assert_eq!(s2.terminated.to_vec(), vec![false, true]);
    assert_eq!(s2.truncated.to_vec(), vec![false, false]);
    assert!(
        s2.infos[0].contains_key("reset_seed"),
        "autoreset step carries the reset info"
    );
    let s3 = v.step(ok(2)).unwrap();
    assert_eq!(i64s(&s3.obs[0]), vec![2, 1]);
    assert_eq!(i64s(&s3.obs[1]), vec![2, 0]);
    assert_eq!(s3.rewards.to_vec(), vec![1.0, 0.0]);
    assert_eq!(s3.terminated.to_vec(), vec![true, false]);
}

#[test]
fn wrong_number_of_actions_is_invalid() {
    let mut v = counters(&[3, 3]);
    v.reset(None, &Options::new()).unwrap();
    assert!(matches!(v.step(ok(1)), Err(EnvError::InvalidAction(_))));
    assert!(matches!(v.step(ok(3)), Err(EnvError::InvalidAction(_))));
    // A rejected batch stepped nothing.
    let s = v.step(ok(2)).unwrap();
    assert_eq!(s.rewards.to_vec(), vec![1.0, 1.0]);
}

#[test]
fn empty_vector_env_is_rejected() {
    assert!(matches!(
        VectorEnv::new(vec![]),
        Err(EnvError::InvalidKwargs(_))
    ));
}

#[test]
fn stacking_requires_same_dtype_and_shape() {
    let f = |v: &[f32]| {
        Value::Tensor(Tensor::F32(
            ndarray::Array1::from_vec(v.to_vec()).into_dyn(),
        ))
    };
    let stacked = stack_obs(&[f(&[1.0, 2.0]), f(&[3.0, 4.0])]).unwrap();
    assert_eq!(
        stacked,
        Tensor::F32(ndarray::arr2(&[[1.0_f32, 2.0], [3.0, 4.0]]).into_dyn())
    );
    assert_eq!(stack_obs(&[f(&[1.0]), f(&[1.0, 2.0])]), None);
    let i = Value::Tensor(Tensor::I64(ndarray::arr1(&[1_i64]).into_dyn()));
    assert_eq!(stack_obs(&[f(&[1.0]), i]), None);
    assert_eq!(stack_obs(&[f(&[1.0]), Value::Text("x".into())]), None);
    assert_eq!(stack_obs(&[]), None);
}

#[test]
fn close_closes_every_sub_env() {
    let mut r = Registry::new();
    env_core::register_classic(&mut r).unwrap();
    let mut v = r.make_vec("classic/CartPole", 2, &Kwargs::new()).unwrap();
    v.close().unwrap();
    assert_eq!(
        v.reset(None, &Options::new()).unwrap_err(),
        EnvError::ClosedEnvironment
    );
}
