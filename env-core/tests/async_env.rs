//! The asynchronous API: synchronous envs adapted by their call cost, asynchronous envs registered
//! natively, Gymnasium's wrappers on both, and panics contained to their own call.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use env_core::{
    AsyncEnv, AsyncEnvCreator, CallCost, DynEnv, Env, EnvError, EnvFuture, EnvSpec, Info, Kwargs,
    Offload, Options, Registry, Result, Space, Step, Value,
};
use futures::executor::block_on;

fn text() -> Space {
    Space::text(0, 64)
}

fn spec(id: &str, call_cost: CallCost, max_episode_steps: Option<u32>) -> EnvSpec {
    EnvSpec {
        id: id.into(),
        description: String::new(),
        max_episode_steps,
        reward_threshold: None,
        nondeterministic: false,
        observation_space: text(),
        action_space: text(),
        default_kwargs: Kwargs::new(),
        call_cost,
        metadata: Default::default(),
    }
}

/// Observes the name of the thread each call ran on; panics on the action "panic".
struct Where;

impl Env for Where {
    type Obs = Value;
    type Action = String;

    fn reset(&mut self, _seed: Option<u64>, _options: &Options) -> Result<(Value, Info)> {
        Ok((thread_name(), Info::new()))
    }

    fn step(&mut self, action: String) -> Result<Step<Value>> {
        assert!(action != "panic", "test env told to panic");
        Ok(step(thread_name()))
    }

    fn observation_space(&self) -> Space {
        text()
    }

    fn action_space(&self) -> Space {
        text()
    }
}

fn thread_name() -> Value {
    Value::Text(std::thread::current().name().unwrap_or("?").to_string())
}

fn step(obs: Value) -> Step<Value> {
    Step {
        obs,
        reward: 1.0,
        terminated: false,
        truncated: false,
        info: Info::new(),
    }
}

/// Counts the jobs it runs, each on a thread named "counted".
#[derive(Default)]
struct Counting(AtomicUsize);

impl Offload for Counting {
    fn offload(&self, job: Box<dyn FnOnce() + Send>) {
        self.0.fetch_add(1, Ordering::SeqCst);
        std::thread::Builder::new()
            .name("counted".into())
            .spawn(job)
            .expect("spawn a test thread");
    }
}

fn registry_with(cost: CallCost, offload: Arc<Counting>) -> Registry {
    let mut r = Registry::with_offload(offload);
    r.register(
        spec("t/Where-v0", cost, None),
        Arc::new(|_: &Kwargs| Ok(Box::new(Where) as Box<dyn DynEnv>)),
    )
    .unwrap();
    r
}

fn obs_text(v: &Value) -> &str {
    match v {
        Value::Text(t) => t,
        other => panic!("expected text, got {other:?}"),
    }
}

#[test]
fn cheap_envs_run_in_place_and_blocking_ones_through_the_offload() {
    let here = std::thread::current().name().unwrap_or("?").to_string();
    for (cost, offloaded) in [(CallCost::Cheap, false), (CallCost::Blocking, true)] {
        let offload = Arc::new(Counting::default());
        let r = registry_with(cost, offload.clone());
        let mut env = block_on(r.make_async("t/Where-v0", &Kwargs::new())).unwrap();
        let (obs, _) = block_on(env.reset(None, Options::new())).unwrap();
        let s = block_on(env.step(Value::Text("go".into()))).unwrap();
        block_on(env.close()).unwrap();
        let expected = if offloaded { "counted" } else { here.as_str() };
        assert_eq!(obs_text(&obs), expected, "{cost:?} reset");
        assert_eq!(obs_text(&s.obs), expected, "{cost:?} step");
        // make, reset, step and close each go through the offload when blocking; none when cheap.
        let jobs = offload.0.load(Ordering::SeqCst);
        assert_eq!(jobs, if offloaded { 4 } else { 0 }, "{cost:?}");
    }
}

#[test]
fn a_panicking_sync_env_fails_its_call_then_is_closed_either_way() {
    for cost in [CallCost::Cheap, CallCost::Blocking] {
        let r = registry_with(cost, Arc::default());
        let mut env = block_on(r.make_async("t/Where-v0", &Kwargs::new())).unwrap();
        block_on(env.reset(None, Options::new())).unwrap();
        let err = block_on(env.step(Value::Text("panic".into()))).unwrap_err();
        assert!(matches!(err, EnvError::Panicked(_)), "{cost:?}: {err:?}");
        let again = block_on(env.step(Value::Text("go".into()))).unwrap_err();
        assert_eq!(again, EnvError::ClosedEnvironment, "{cost:?}");
        block_on(env.close()).expect("closing a lost env is not an error");
    }
}

#[test]
fn the_wrappers_of_make_apply_through_the_adapter() {
    let mut r = Registry::new();
    r.register(
        spec("t/Where-v0", CallCost::Cheap, Some(2)),
        Arc::new(|_: &Kwargs| Ok(Box::new(Where) as Box<dyn DynEnv>)),
    )
    .unwrap();
    let mut env = block_on(r.make_async("t/Where-v0", &Kwargs::new())).unwrap();
    let go = || Value::Text("go".into());
    assert_eq!(block_on(env.step(go())).unwrap_err(), EnvError::ResetNeeded);
    block_on(env.reset(Some(1), Options::new())).unwrap();
    assert!(!block_on(env.step(go())).unwrap().truncated);
    assert!(block_on(env.step(go())).unwrap().truncated, "TimeLimit(2)");
    assert_eq!(
        block_on(env.step(go())).unwrap_err(),
        EnvError::EpisodeEnded
    );
}

/// A natively asynchronous env: each step yields to the executor once before answering; panics
/// while being polled on the action "panic".
struct Yielding {
    log: Arc<Mutex<Vec<String>>>,
}

impl AsyncEnv for Yielding {
    fn reset(&mut self, seed: Option<u64>, _options: Options) -> EnvFuture<'_, (Value, Info)> {
        Box::pin(async move {
            self.log.lock().unwrap().push(format!("reset {seed:?}"));
            Ok((Value::Text("ready".into()), Info::new()))
        })
    }

    fn step(&mut self, action: Value) -> EnvFuture<'_, Step<Value>> {
        Box::pin(async move {
            let mut yielded = false;
            std::future::poll_fn(|cx| {
                if yielded {
                    return std::task::Poll::Ready(());
                }
                yielded = true;
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            })
            .await;
            assert!(
                action != Value::Text("panic".into()),
                "async test env told to panic"
            );
            self.log.lock().unwrap().push("step".into());
            Ok(step(action))
        })
    }

    fn close(&mut self) -> EnvFuture<'_, ()> {
        self.log.lock().unwrap().push("close".into());
        Box::pin(std::future::ready(Ok(())))
    }

    fn observation_space(&self) -> Space {
        text()
    }

    fn action_space(&self) -> Space {
        text()
    }
}

fn async_registry(log: Arc<Mutex<Vec<String>>>) -> Registry {
    let mut r = Registry::new();
    let creator: AsyncEnvCreator = Arc::new(move |kwargs: Kwargs| {
        let log = log.clone();
        Box::pin(async move {
            if kwargs.contains_key("explode") {
                panic!("constructor told to panic");
            }
            if kwargs.contains_key("bad") {
                return Err(EnvError::InvalidKwargs("bad".into()));
            }
            Ok(Box::new(Yielding { log }) as Box<dyn AsyncEnv>)
        })
    });
    r.register_async(spec("t/Yielding-v0", CallCost::Blocking, Some(3)), creator)
        .unwrap();
    r
}

#[test]
fn async_envs_get_the_same_wrappers_and_no_sync_make() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let r = async_registry(log.clone());
    assert!(matches!(
        r.make("t/Yielding-v0", &Kwargs::new()),
        Err(EnvError::Unsupported(_))
    ));
    let kwargs = serde_json::json!({"max_episode_steps": 1});
    let mut env = block_on(r.make_async("t/Yielding-v0", kwargs.as_object().unwrap())).unwrap();
    let a = || Value::Text("a".into());
    assert_eq!(block_on(env.step(a())).unwrap_err(), EnvError::ResetNeeded);
    block_on(env.reset(Some(7), Options::new())).unwrap();
    let s = block_on(env.step(a())).unwrap();
    assert!(
        s.truncated,
        "the max_episode_steps kwarg overrides the spec's 3"
    );
    assert_eq!(block_on(env.step(a())).unwrap_err(), EnvError::EpisodeEnded);
    block_on(env.close()).unwrap();
    block_on(env.close()).unwrap();
    assert_eq!(
        block_on(env.reset(None, Options::new())).unwrap_err(),
        EnvError::ClosedEnvironment
    );
    assert_eq!(*log.lock().unwrap(), ["reset Some(7)", "step", "close"]);
}

#[test]
fn async_panics_fail_only_their_own_call() {
    let r = async_registry(Arc::default());
    let explode = serde_json::json!({"explode": true});
    let made = block_on(r.make_async("t/Yielding-v0", explode.as_object().unwrap()));
    assert!(matches!(made, Err(EnvError::Panicked(m)) if m.contains("constructor")));
    let bad = serde_json::json!({"bad": true});
    let made = block_on(r.make_async("t/Yielding-v0", bad.as_object().unwrap()));
    assert!(matches!(made, Err(EnvError::InvalidKwargs(_))));

    let mut env = block_on(r.make_async("t/Yielding-v0", &Kwargs::new())).unwrap();
    block_on(env.reset(None, Options::new())).unwrap();
    let err = block_on(env.step(Value::Text("panic".into()))).unwrap_err();
    assert!(
        matches!(&err, EnvError::Panicked(m) if m.contains("told to panic")),
        "{err:?}"
    );
    assert_eq!(
        block_on(env.reset(None, Options::new())).unwrap_err(),
        EnvError::ClosedEnvironment
    );
    // Another env of the same registry is unaffected.
    let mut other = block_on(r.make_async("t/Yielding-v0", &Kwargs::new())).unwrap();
    block_on(other.reset(None, Options::new())).unwrap();
    assert!(block_on(other.step(Value::Text("a".into()))).is_ok());
}

#[test]
fn unknown_ids_fail_make_async_with_gymnasiums_errors() {
    let r = Registry::new();
    let err = block_on(r.make_async("t/Nope-v0", &Kwargs::new())).err();
    assert!(
        matches!(err, Some(EnvError::NameNotFound { .. })),
        "{err:?}"
    );
}
