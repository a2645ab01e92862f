//! CartPole against Gymnasium's formulas, written out here independently of the implementation.

use env_core::envs::cartpole::{CartPole, CartPoleAction, CartPoleConfig};
use env_core::{DynEnv, EnvError, Kwargs, Options, Registry, Space, Tensor, Value};
use serde_json::json;

fn options(v: serde_json::Value) -> Options {
    v.as_object().cloned().unwrap_or_default()
}

fn dyn_cartpole() -> Box<dyn DynEnv> {
    Box::new(CartPole::new(CartPoleConfig::default()))
}

fn obs_vec(v: &Value) -> Vec<f32> {
    match v {
        Value::Tensor(Tensor::F32(a)) => {
            assert_eq!(a.shape(), [4]);
            a.iter().copied().collect()
        }
        other => panic!("expected an f32 tensor, got {other:?}"),
    }
}

/// Gymnasium's `cartpole.py` step, spelled out with its literal constants.
fn reference_step(s: [f64; 4], action: i64) -> [f64; 4] {
    let (gravity, masscart, masspole, length, force_mag, tau) = (9.8, 1.0, 0.1, 0.5, 10.0, 0.02);
    let total_mass = masspole + masscart;
    let polemass_length = masspole * length;
    let [x, x_dot, theta, theta_dot] = s;
    let force = if action == 1 { force_mag } else { -force_mag };
    let temp = (force + polemass_length * theta_dot.powi(2) * theta.sin()) / total_mass;
    let thetaacc = (gravity * theta.sin() - theta.cos() * temp)
        / (length * (4.0 / 3.0 - masspole * theta.cos().powi(2) / total_mass));
    let xacc = temp - polemass_length * thetaacc * theta.cos() / total_mass;
    [
        x + tau * x_dot,
        x_dot + tau * xacc,
        theta + tau * theta_dot,
        theta_dot + tau * thetaacc,
    ]
}

#[test]
fn one_step_from_a_known_state_matches_the_formulas() {
    let start = [0.01, -0.2, 0.03, 0.4];
    for action in [0, 1] {
        let mut env = dyn_cartpole();
        let (obs, info) = env.reset(None, &options(json!({"state": start}))).unwrap();
        assert!(info.is_empty());
        assert_eq!(obs_vec(&obs), start.map(|x| x as f32).to_vec());
        let step = env.step(Value::Discrete(action)).unwrap();
        let expected = reference_step(start, action);
        assert_eq!(
            obs_vec(&step.obs),
            expected.map(|x| x as f32).to_vec(),
            "action {action}"
        );
        assert_eq!(
            (step.reward, step.terminated, step.truncated),
            (1.0, false, false)
        );
        assert!(step.info.is_empty());
    }
}

#[test]
fn hand_computed_first_step_from_rest() {
    // From the upright rest state pushing right: theta = 0 so sin = 0, cos = 1;
    // temp = 10 / 1.1, thetaacc = -temp / (0.5 * (4/3 - 0.1/1.1)), xacc = temp - 0.05 * thetaacc / 1.1.
    let mut env = CartPole::new(CartPoleConfig::default());
    env_core::Env::reset(
        &mut env,
        None,
        &options(json!({"state": [0.0, 0.0, 0.0, 0.0]})),
    )
    .unwrap();
    env_core::Env::step(&mut env, CartPoleAction::Right).unwrap();
    let temp = 10.0 / 1.1;
    let thetaacc = -temp / (0.5 * (4.0 / 3.0 - 0.1 / 1.1));
    let xacc = temp - 0.05 * thetaacc / 1.1;
    let s = env.state().unwrap();
    // Positions move only on the next step (Euler uses the old velocities).
    assert_eq!(s[0], 0.0);
    assert_eq!(s[2], 0.0);
    assert!(
        (s[1] - 0.02 * xacc).abs() < 1e-12,
        "x_dot {} vs {}",
        s[1],
        0.02 * xacc
    );
    assert!((s[3] - 0.02 * thetaacc).abs() < 1e-12);
    assert!(s[1] > 0.0 && s[3] < 0.0, "cart goes right, pole falls left");
}

#[test]
fn trajectory_follows_the_formulas_until_termination() {
    let mut env = dyn_cartpole();
    let mut state = [0.0, 0.0, 0.05, 0.0];
    env.reset(None, &options(json!({"state": state}))).unwrap();
    let mut steps = 0;
    loop {
        let step = env.step(Value::Discrete(1)).unwrap();
        state = reference_step(state, 1);
        steps += 1;
        assert_eq!(
            obs_vec(&step.obs),
            state.map(|x| x as f32).to_vec(),
            "step {steps}"
        );
        let expect_done =
            state[0].abs() > 2.4 || state[2].abs() > 12.0 * 2.0 * std::f64::consts::PI / 360.0;
        assert_eq!(step.terminated, expect_done);
        assert_eq!(
            step.reward, 1.0,
            "reward is 1 on every step including the terminating one"
        );
        if step.terminated {
            break;
        }
        assert!(steps < 200, "always pushing right must topple the pole");
    }
    // Gymnasium returns reward 0 for steps beyond termination (the raw env allows them).
    let beyond = env.step(Value::Discrete(1)).unwrap();
    assert_eq!((beyond.reward, beyond.terminated), (0.0, true));
}

#[test]
fn termination_thresholds() {
    let theta_max = 12.0 * 2.0 * std::f64::consts::PI / 360.0;
    // Each start sits just inside a threshold with a velocity that crosses it in one Euler step.
    let cases = [
        ([2.39, 1.0, 0.0, 0.0], true),
        ([-2.39, -1.0, 0.0, 0.0], true),
        ([0.0, 0.0, theta_max - 0.001, 1.0], true),
        ([0.0, 0.0, -theta_max + 0.001, -1.0], true),
        ([2.39, 0.0, 0.0, 0.0], false),
        ([0.0, 0.0, theta_max - 0.001, -1.0], false),
    ];
    for (start, done) in cases {
        let mut env = dyn_cartpole();
        env.reset(None, &options(json!({"state": start}))).unwrap();
        let step = env.step(Value::Discrete(0)).unwrap();
        assert_eq!(step.terminated, done, "start {start:?}");
        assert!(!step.truncated);
    }
}

#[test]
fn sutton_barto_reward() {
    let mut kwargs = Kwargs::new();
    kwargs.insert("sutton_barto_reward".into(), json!(true));
    let mut env: Box<dyn DynEnv> =
        Box::new(CartPole::new(CartPoleConfig::from_kwargs(&kwargs).unwrap()));
    env.reset(None, &options(json!({"state": [0.0, 0.0, 0.0, 0.0]})))
        .unwrap();
    assert_eq!(env.step(Value::Discrete(0)).unwrap().reward, 0.0);
    env.reset(None, &options(json!({"state": [2.4, 5.0, 0.0, 0.0]})))
        .unwrap();
    let s = env.step(Value::Discrete(0)).unwrap();
    assert_eq!((s.reward, s.terminated), (-1.0, true));
}

#[test]
fn seeded_reset_is_deterministic_and_within_bounds() {
    let mut a = dyn_cartpole();
    let mut b = dyn_cartpole();
    let (oa, _) = a.reset(Some(42), &Options::new()).unwrap();
    let (ob, _) = b.reset(Some(42), &Options::new()).unwrap();
    assert_eq!(oa, ob);
    let (oc, _) = b.reset(Some(43), &Options::new()).unwrap();
    assert_ne!(oa, oc);
    // Unseeded resets continue the stream: a second episode differs from the first.
    let (a2, _) = a.reset(None, &Options::new()).unwrap();
    let (b2, _) = {
        let mut c = dyn_cartpole();
        c.reset(Some(42), &Options::new()).unwrap();
        c.reset(None, &Options::new()).unwrap()
    };
    assert_ne!(a2, oa);
    assert_eq!(a2, b2);
    for v in [&oa, &oc, &a2] {
        assert!(
            obs_vec(v).iter().all(|x| (-0.05..0.05).contains(x)),
            "{v:?}"
        );
    }
    // Unseeded from scratch works and lands within the default bounds too.
    let (o, _) = dyn_cartpole().reset(None, &Options::new()).unwrap();
    assert!(obs_vec(&o).iter().all(|x| (-0.05..0.05).contains(x)));
}

#[test]
fn reset_options_low_high() {
    let mut env = dyn_cartpole();
    let (obs, _) = env
        .reset(Some(0), &options(json!({"low": 0.1, "high": 0.2})))
        .unwrap();
    assert!(
        obs_vec(&obs).iter().all(|x| (0.1..0.2).contains(x)),
        "{obs:?}"
    );
    let (obs, _) = env
        .reset(Some(0), &options(json!({"low": 0.3, "high": 0.3})))
        .unwrap();
    assert_eq!(obs_vec(&obs), vec![0.3_f32; 4]);
    for bad in [
        json!({"low": 1.0, "high": 0.0}),
        json!({"low": "x"}),
        json!({"state": [1, 2, 3]}),
        json!({"state": "no"}),
    ] {
        assert!(
            matches!(
                env.reset(Some(0), &options(bad.clone())),
                Err(EnvError::InvalidOptions(_))
            ),
            "{bad}"
        );
    }
}

#[test]
fn actions_accepted_and_rejected() {
    let mut env = dyn_cartpole();
    env.reset(Some(1), &Options::new()).unwrap();
    let good = [
        Value::Discrete(0),
        Value::Discrete(1),
        Value::Json(json!(1)),
        Value::Tensor(Tensor::I64(ndarray::arr0(1_i64).into_dyn())),
        Value::Tensor(Tensor::I32(ndarray::arr1(&[0_i32]).into_dyn())),
    ];
    for a in good {
        env.step(a.clone())
            .unwrap_or_else(|e| panic!("{a:?} rejected: {e}"));
    }
    let bad = [
        Value::Discrete(2),
        Value::Discrete(-1),
        Value::Text("1".into()),
        Value::Json(json!(0.5)),
        Value::Tensor(Tensor::F32(ndarray::arr1(&[1.0_f32]).into_dyn())),
        Value::Tensor(Tensor::I64(ndarray::arr1(&[0_i64, 1]).into_dyn())),
        Value::List(vec![Value::Discrete(0)]),
    ];
    for a in bad {
        assert!(
            matches!(env.step(a.clone()), Err(EnvError::InvalidAction(_))),
            "{a:?}"
        );
    }
}

#[test]
fn step_before_reset_is_an_error_not_a_panic() {
    assert_eq!(
        dyn_cartpole().step(Value::Discrete(0)).unwrap_err(),
        EnvError::ResetNeeded
    );
}

#[test]
fn spaces_and_spec_match_gymnasium() {
    let env = dyn_cartpole();
    assert_eq!(env.action_space(), Space::Discrete { n: 2, start: 0 });
    let Space::Box(b) = env.observation_space() else {
        panic!("Box expected")
    };
    assert_eq!(b.dtype, env_core::DType::F32);
    let high: Vec<f64> = b.high.iter().copied().collect();
    assert_eq!(high[0], f64::from(4.8_f32));
    assert_eq!(high[1], f64::INFINITY);
    assert_eq!(
        high[2],
        f64::from((2.0 * 12.0 * 2.0 * std::f64::consts::PI / 360.0) as f32)
    );
    assert_eq!(high[3], f64::INFINITY);
    assert_eq!(
        b.low.iter().copied().collect::<Vec<_>>(),
        high.iter().map(|x| -x).collect::<Vec<_>>()
    );

    let mut registry = Registry::new();
    env_core::register_classic(&mut registry).unwrap();
    let spec = registry.spec("classic/CartPole-v1").unwrap();
    assert_eq!(spec.max_episode_steps, Some(500));
    assert_eq!(spec.reward_threshold, Some(475.0));
    assert_eq!(spec.observation_space, env.observation_space());
    assert_eq!(spec.action_space, env.action_space());
}

#[test]
fn observations_are_in_the_observation_space() {
    let mut env = dyn_cartpole();
    let space = env.observation_space();
    let (obs, _) = env.reset(Some(3), &Options::new()).unwrap();
    assert!(space.contains(&obs));
    for _ in 0..5 {
        let s = env.step(Value::Discrete(0)).unwrap();
        assert!(space.contains(&s.obs));
    }
}

#[test]
fn unknown_kwargs_are_rejected() {
    let mut kwargs = Kwargs::new();
    kwargs.insert("gravity".into(), json!(1.0));
    assert!(matches!(
        CartPoleConfig::from_kwargs(&kwargs),
        Err(EnvError::InvalidKwargs(_))
    ));
}
