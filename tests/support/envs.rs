//! Envs that exist only to exercise the server: one that sleeps, one that panics.

use std::sync::Arc;
use std::time::Duration;

use env_core::{Env, EnvSpec, Info, Options, Registry, Space, Step, Value, ValueEnv};

/// Each step sleeps for `sleep_ms` (kwarg) and returns the step count; never terminates.
pub struct Sleepy {
    sleep: Duration,
    steps: i64,
}

/// Panics on `step` when the action is `Discrete(13)`.
pub struct Panicky;

impl Env for Sleepy {
    type Obs = Value;
    type Action = Value;

    fn reset(&mut self, _seed: Option<u64>, _options: &Options) -> env_core::Result<(Value, Info)> {
        self.steps = 0;
        Ok((Value::Discrete(0), Info::new()))
    }

    fn step(&mut self, _action: Value) -> env_core::Result<Step<Value>> {
        std::thread::sleep(self.sleep);
        self.steps += 1;
        Ok(Step {
            obs: Value::Discrete(self.steps),
            reward: 0.0,
            terminated: false,
            truncated: false,
            info: Info::new(),
        })
    }

    fn observation_space(&self) -> Space {
        Space::Discrete {
            n: i64::MAX,
            start: 0,
        }
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: 2, start: 0 }
    }
}

impl Env for Panicky {
    type Obs = Value;
    type Action = Value;

    fn reset(&mut self, _seed: Option<u64>, _options: &Options) -> env_core::Result<(Value, Info)> {
        Ok((Value::Discrete(0), Info::new()))
    }

    fn step(&mut self, action: Value) -> env_core::Result<Step<Value>> {
        if action == Value::Discrete(13) {
            panic!("test env asked to panic");
        }
        Ok(Step {
            obs: Value::Discrete(1),
            reward: 1.0,
            terminated: false,
            truncated: false,
            info: Info::new(),
        })
    }

    fn observation_space(&self) -> Space {
        Space::Discrete { n: 2, start: 0 }
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: 100, start: 0 }
    }
}

fn spec(id: &str, space: Space) -> EnvSpec {
    EnvSpec {
        id: id.into(),
        description: "test env".into(),
        max_episode_steps: None,
        reward_threshold: None,
        nondeterministic: false,
        observation_space: space.clone(),
        action_space: space,
        default_kwargs: Default::default(),
        call_cost: Default::default(),
        metadata: Default::default(),
    }
}

pub fn register(registry: &mut Registry) {
    registry
        .register(
            spec("test/Sleepy-v0", Space::Discrete { n: 2, start: 0 }),
            Arc::new(|kwargs| {
                let ms = kwargs
                    .get("sleep_ms")
                    .and_then(|v| v.as_u64())
                    .unwrap_or(50);
                Ok(ValueEnv::boxed(Sleepy {
                    sleep: Duration::from_millis(ms),
                    steps: 0,
                }))
            }),
        )
        .expect("register Sleepy");
    registry
        .register(
            spec("test/Panicky-v0", Space::Discrete { n: 100, start: 0 }),
            Arc::new(|_| Ok(ValueEnv::boxed(Panicky))),
        )
        .expect("register Panicky");
}
