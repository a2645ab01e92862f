//! Registry: id parsing and resolution, `make` with Gymnasium's wrappers, evaluators, `make_vec`.

mod common;

use std::sync::Arc;

use env_core::{
    CallCost, DynEnv, EnvCreator, EnvError, EnvId, EnvSpec, EvalItem, Kwargs, Options, Registry,
    ResetStepEvaluator, Space, Value,
};
use futures::executor::block_on;
use serde_json::json;

fn spec(id: &str, max_episode_steps: Option<u32>) -> EnvSpec {
    EnvSpec {
        id: id.into(),
        description: format!("test env {id}"),
        max_episode_steps,
        reward_threshold: None,
        nondeterministic: false,
        observation_space: Space::discrete(2),
        action_space: Space::text(0, 8),
        default_kwargs: Kwargs::new(),
        call_cost: CallCost::Blocking,
        metadata: Default::default(),
    }
}

/// A counter env terminating after `terminate_after` steps (kwarg, default 1000); records the kwargs
/// it was created with in `seen`.
fn counter_creator(seen: Arc<std::sync::Mutex<Vec<Kwargs>>>) -> EnvCreator {
    Arc::new(move |kwargs: &Kwargs| {
        seen.lock().unwrap().push(kwargs.clone());
        let n = match kwargs.get("terminate_after") {
            None => 1000,
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| EnvError::InvalidKwargs(format!("terminate_after: {v}")))?,
        };
        Ok(Box::new(common::Counter::new(n)) as Box<dyn DynEnv>)
    })
}

fn plain_creator() -> EnvCreator {
    counter_creator(Arc::default())
}

fn kwargs(v: serde_json::Value) -> Kwargs {
    v.as_object().cloned().unwrap_or_default()
}

fn classic() -> Registry {
    let mut r = Registry::new();
    env_core::register_classic(&mut r).unwrap();
    r
}

#[test]
fn env_id_parsing() {
    let id = EnvId::parse("classic/CartPole-v1").unwrap();
    assert_eq!(
        (id.namespace.as_deref(), id.name.as_str(), id.version),
        (Some("classic"), "CartPole", Some(1))
    );
    assert_eq!(id.to_string(), "classic/CartPole-v1");
    let id = EnvId::parse("My-Env.x").unwrap();
    assert_eq!(
        (id.namespace, id.name.as_str(), id.version),
        (None, "My-Env.x", None)
    );
    for bad in [
        "",
        "/CartPole-v1",
        "a/b/c",
        "Cart Pole",
        "CartPole-v1/",
        "ns/-v1",
        "ünïcode",
    ] {
        assert!(
            matches!(EnvId::parse(bad), Err(EnvError::MalformedId(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn register_rejects_malformed_and_duplicate_ids() {
    let mut r = Registry::new();
    assert!(matches!(
        r.register(spec("bad id", None), plain_creator()),
        Err(EnvError::MalformedId(_))
    ));
    r.register(spec("t/Count-v0", None), plain_creator())
        .unwrap();
    assert_eq!(
        r.register(spec("t/Count-v0", None), plain_creator())
            .unwrap_err(),
        EnvError::AlreadyRegistered("t/Count-v0".into())
    );
}

#[test]
fn resolution_errors_follow_gymnasium() {
    let mut r = classic();
    r.register(spec("classic/CartPole-v0", None), plain_creator())
        .unwrap();
    assert!(matches!(
        r.make("not an id!", &Kwargs::new()),
        Err(EnvError::MalformedId(_))
    ));
    match r.spec("classic/CartPoel-v1") {
        Err(EnvError::NameNotFound { name, suggestion }) => {
            assert_eq!(name, "classic/CartPoel");
            assert_eq!(suggestion.as_deref(), Some("classic/CartPole"));
        }
        other => panic!("{other:?}"),
    }
    // A missing namespace still suggests the namespaced name.
    match r.spec("CartPole-v1") {
        Err(EnvError::NameNotFound { suggestion, .. }) => {
            assert_eq!(suggestion.as_deref(), Some("classic/CartPole"))
        }
        other => panic!("{other:?}"),
    }
    match r.spec("Pendulum-v1") {
        Err(EnvError::NameNotFound { suggestion, .. }) => assert_eq!(suggestion, None),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        r.spec("classic/CartPole-v7").unwrap_err(),
        EnvError::VersionNotFound {
            name: "classic/CartPole".into(),
            version: 7,
            available: vec![0, 1]
        }
    );
    let msg = r.spec("classic/CartPoel-v1").unwrap_err().to_string();
    assert!(msg.contains("did you mean \"classic/CartPole\""), "{msg}");
}

#[test]
fn id_without_version_resolves_to_the_latest() {
    let mut r = Registry::new();
    for id in ["t/Count-v2", "t/Count-v10", "t/Count-v3"] {
        r.register(spec(id, None), plain_creator()).unwrap();
    }
    assert_eq!(r.spec("t/Count").unwrap().id, "t/Count-v10");
    assert_eq!(r.spec("t/Count-v2").unwrap().id, "t/Count-v2");
    let ids: Vec<&str> = r.specs().map(|s| s.id.as_str()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted);
    assert_eq!(ids.len(), 3);
}

#[test]
fn aliases_answer_as_the_env_they_name() {
    let mut r = Registry::new();
    r.register(spec("t/Code-v0", Some(2)), plain_creator())
        .unwrap();
    r.register_alias("t/Python-v0", "t/Code-v0").unwrap();
    // The alias and its unversioned form resolve to the env, whose spec keeps its own id.
    assert_eq!(r.spec("t/Python-v0").unwrap().id, "t/Code-v0");
    assert_eq!(r.spec("t/Python").unwrap().id, "t/Code-v0");
    let mut env = r.make("t/Python-v0", &Kwargs::new()).unwrap();
    env.reset(Some(1), &Options::new()).unwrap();
    env.step(Value::Text("ok".into())).unwrap();
    let second = env.step(Value::Text("ok".into())).unwrap();
    assert!(second.truncated, "the alias gets the env's spec time limit");
    // Listing shows the env once, under its id.
    let ids: Vec<&str> = r.specs().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["t/Code-v0"]);
    // Evaluators attached through the alias are the env's.
    let ev = Arc::new(ResetStepEvaluator::new(r.async_maker("t/Code-v0").unwrap()));
    r.register_evaluator("t/Python-v0", ev).unwrap();
    assert!(r.supports_evaluate("t/Code-v0").unwrap());
    // An alias is an id like any other: no duplicates either way, no alias of nothing.
    assert!(matches!(
        r.register_alias("t/Python-v0", "t/Code-v0"),
        Err(EnvError::AlreadyRegistered(_))
    ));
    assert!(matches!(
        r.register(spec("t/Python-v0", None), plain_creator()),
        Err(EnvError::AlreadyRegistered(_))
    ));
    assert!(matches!(
        r.register_alias("t/Other-v0", "t/Nope-v0"),
        Err(EnvError::NameNotFound { .. })
    ));
    assert!(matches!(
        r.register_alias("not an id", "t/Code-v0"),
        Err(EnvError::MalformedId(_))
    ));
}

#[test]
fn make_applies_order_enforcing_and_the_spec_time_limit() {
    let mut r = Registry::new();
    r.register(spec("t/Count-v0", Some(3)), plain_creator())
        .unwrap();
    let mut env = r.make("t/Count-v0", &Kwargs::new()).unwrap();
    let ok = || Value::Text("ok".into());
    assert_eq!(env.step(ok()).unwrap_err(), EnvError::ResetNeeded);
    env.reset(Some(0), &Options::new()).unwrap();
    let flags: Vec<bool> = (0..3).map(|_| env.step(ok()).unwrap().truncated).collect();
    assert_eq!(flags, vec![false, false, true]);
    assert_eq!(env.step(ok()).unwrap_err(), EnvError::EpisodeEnded);
    env.close().unwrap();
    env.close().unwrap();
    assert_eq!(
        env.reset(None, &Options::new()).unwrap_err(),
        EnvError::ClosedEnvironment
    );
}

#[test]
fn make_merges_kwargs_and_strips_max_episode_steps() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut s = spec("t/Count-v0", Some(500));
    s.default_kwargs = kwargs(json!({"terminate_after": 50, "keep": "default"}));
    let mut r = Registry::new();
    r.register(s, counter_creator(seen.clone())).unwrap();
    let mut env = r
        .make(
            "t/Count",
            &kwargs(json!({"terminate_after": 10, "max_episode_steps": 2})),
        )
        .unwrap();
    assert_eq!(
        seen.lock().unwrap().last().unwrap(),
        &kwargs(json!({"terminate_after": 10, "keep": "default"}))
    );
    env.reset(None, &Options::new()).unwrap();
    env.step(Value::Text("ok".into())).unwrap();
    assert!(
        env.step(Value::Text("ok".into())).unwrap().truncated,
        "kwarg overrides the spec's 500"
    );

    for bad in [json!(0), json!(-1), json!("3"), json!(1.5)] {
        let r = r.make("t/Count-v0", &kwargs(json!({"max_episode_steps": bad})));
        assert!(matches!(r, Err(EnvError::InvalidKwargs(_))), "{bad}");
    }
    assert!(matches!(
        r.make("t/Count-v0", &kwargs(json!({"terminate_after": "x"}))),
        Err(EnvError::InvalidKwargs(_))
    ));
}

#[test]
fn make_without_a_spec_limit_never_truncates() {
    let mut r = Registry::new();
    r.register(spec("t/Count-v0", None), plain_creator())
        .unwrap();
    let mut env = r.make("t/Count-v0", &Kwargs::new()).unwrap();
    env.reset(None, &Options::new()).unwrap();
    for _ in 0..600 {
        assert!(!env.step(Value::Text("ok".into())).unwrap().truncated);
    }
}

#[test]
fn cartpole_truncates_at_500_under_a_balancing_policy() {
    let r = classic();
    let mut env = r.make("classic/CartPole-v1", &Kwargs::new()).unwrap();
    let (mut obs, _) = env.reset(Some(0), &Options::new()).unwrap();
    let mut steps = 0;
    loop {
        let o = match &obs {
            Value::Tensor(t) => t.to_f64_vec(),
            other => panic!("{other:?}"),
        };
        // Push toward where the pole is falling, damped by the cart's drift: balances for 500 steps.
        let a = i64::from(o[2] + 0.5 * o[3] + 0.01 * o[0] + 0.1 * o[1] > 0.0);
        let s = env.step(Value::Discrete(a)).unwrap();
        steps += 1;
        assert!(!s.terminated, "pole fell at step {steps}");
        obs = s.obs;
        if s.truncated {
            break;
        }
    }
    assert_eq!(steps, 500);
}

#[test]
fn evaluators_are_optional_and_resolved_like_make() {
    let mut r = classic();
    r.register(spec("t/Count-v0", None), plain_creator())
        .unwrap();
    assert!(r.supports_evaluate("classic/CartPole").unwrap());
    assert!(!r.supports_evaluate("t/Count-v0").unwrap());
    assert!(matches!(
        r.evaluator("t/Count-v0"),
        Err(EnvError::Unsupported(_))
    ));
    assert!(matches!(
        r.supports_evaluate("t/Nope-v0"),
        Err(EnvError::NameNotFound { .. })
    ));
    let ev = Arc::new(ResetStepEvaluator::new(
        r.async_maker("t/Count-v0").unwrap(),
    ));
    assert!(matches!(
        r.register_evaluator("t/Nope-v0", ev.clone()),
        Err(EnvError::NameNotFound { .. })
    ));
    r.register_evaluator("t/Count", ev.clone()).unwrap();
    assert!(r.supports_evaluate("t/Count-v0").unwrap());
    assert!(matches!(
        r.register_evaluator("t/Count-v0", ev),
        Err(EnvError::AlreadyRegistered(_))
    ));
}

#[test]
fn reset_step_evaluator_scores_items_independently_and_in_order() {
    let r = classic();
    let ev = r.evaluator("classic/CartPole-v1").unwrap();
    let item = |seed: Option<u64>, options: serde_json::Value, action: Value| EvalItem {
        seed,
        options: options.as_object().cloned().unwrap_or_default(),
        action,
    };
    let mut items: Vec<EvalItem> = (0..40)
        .map(|i| item(Some(i), json!({}), Value::Discrete((i % 2) as i64)))
        .collect();
    items.push(item(Some(1), json!({}), Value::Discrete(5)));
    items.push(item(
        None,
        json!({"low": 2.0, "high": 1.0}),
        Value::Discrete(0),
    ));
    items.push(item(
        None,
        json!({"state": [3.0, 0.0, 0.0, 0.0]}),
        Value::Discrete(0),
    ));
    let out = block_on(ev.evaluate(Kwargs::new(), items)).unwrap();
    assert_eq!(out.len(), 43);
    // Every good slot equals a sequential make + reset + step with the same inputs.
    for (i, res) in out.iter().take(40).enumerate() {
        let mut env = r.make("classic/CartPole-v1", &Kwargs::new()).unwrap();
        env.reset(Some(i as u64), &Options::new()).unwrap();
        let expected = env.step(Value::Discrete((i % 2) as i64)).unwrap();
        assert_eq!(res.as_ref().unwrap(), &expected, "slot {i}");
    }
    assert!(matches!(out[40], Err(EnvError::InvalidAction(_))));
    assert!(matches!(out[41], Err(EnvError::InvalidOptions(_))));
    let last = out[42].as_ref().unwrap();
    assert!(last.terminated, "x = 3 is past the threshold");

    // Bad kwargs fail the whole call; an empty batch with good kwargs is fine.
    assert!(matches!(
        block_on(ev.evaluate(kwargs(json!({"nope": 1})), vec![])),
        Err(EnvError::InvalidKwargs(_))
    ));
    assert!(
        block_on(ev.evaluate(Kwargs::new(), vec![]))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn reset_step_evaluator_applies_make_wrappers() {
    let mut r = Registry::new();
    r.register(spec("t/Count-v0", Some(1)), plain_creator())
        .unwrap();
    let ev = ResetStepEvaluator::new(r.async_maker("t/Count-v0").unwrap());
    let out = block_on(env_core::BatchEvaluator::evaluate(
        &ev,
        Kwargs::new(),
        vec![EvalItem {
            seed: None,
            options: Options::new(),
            action: Value::Text("ok".into()),
        }],
    ))
    .unwrap();
    assert!(
        out[0].as_ref().unwrap().truncated,
        "TimeLimit(1) from the spec"
    );
}

#[test]
fn make_vec_creates_independent_wrapped_envs() {
    let r = classic();
    assert!(matches!(
        r.make_vec("classic/CartPole-v1", 0, &Kwargs::new()),
        Err(EnvError::InvalidKwargs(_))
    ));
    assert!(matches!(
        r.make_vec(
            "classic/CartPole-v1",
            env_core::MAX_NUM_ENVS + 1,
            &Kwargs::new()
        ),
        Err(EnvError::InvalidKwargs(_))
    ));
    let mut v = r
        .make_vec(
            "classic/CartPole-v1",
            3,
            &kwargs(json!({"max_episode_steps": 2})),
        )
        .unwrap();
    assert_eq!(v.num_envs(), 3);
    v.reset(Some(5), &Options::new()).unwrap();
    v.step(vec![Value::Discrete(0); 3]).unwrap();
    let s = v.step(vec![Value::Discrete(0); 3]).unwrap();
    assert!(
        s.truncated.iter().all(|&t| t),
        "TimeLimit(2) on every sub-env"
    );
}

#[test]
fn shared_types_are_thread_safe() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Registry>();
    send_sync::<ResetStepEvaluator>();
    send::<env_core::VectorEnv>();
    send::<Box<dyn DynEnv>>();
}

/// A lister over a fixed list of task ids.
struct FixedTasks(Vec<&'static str>);

impl env_core::TaskLister for FixedTasks {
    fn list(
        &self,
        _kwargs: Kwargs,
        offset: usize,
        limit: usize,
    ) -> env_core::EnvFuture<'_, env_core::TaskPage> {
        let tasks = self
            .0
            .iter()
            .skip(offset)
            .take(limit)
            .map(|id| env_core::TaskInfo {
                id: id.to_string(),
                prompt: format!("solve {id}"),
                completion_prefix: None,
                metadata: serde_json::Map::new(),
                language: None,
            })
            .collect();
        let total = self.0.len();
        Box::pin(async move { Ok(env_core::TaskPage { tasks, total }) })
    }
}

#[test]
fn task_listers_attach_to_registered_envs() {
    let mut r = Registry::new();
    r.register(spec("t/Count-v0", None), plain_creator())
        .unwrap();
    assert!(matches!(
        r.task_lister("t/Count-v0"),
        Err(EnvError::Unsupported(_))
    ));
    let lister = Arc::new(FixedTasks(vec!["a", "b", "c"]));
    assert!(matches!(
        r.register_task_lister("t/Nope-v0", lister.clone()),
        Err(EnvError::NameNotFound { .. })
    ));
    r.register_task_lister("t/Count", lister.clone()).unwrap();
    assert!(matches!(
        r.register_task_lister("t/Count-v0", lister),
        Err(EnvError::AlreadyRegistered(_))
    ));
    let page = block_on(
        r.task_lister("t/Count-v0")
            .unwrap()
            .list(Kwargs::new(), 1, 5),
    )
    .unwrap();
    assert_eq!(page.total, 3);
    let ids: Vec<_> = page.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["b", "c"]);
}
