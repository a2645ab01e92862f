//! A tiny deterministic environment shared by the integration tests.

// Each test crate uses a different subset of these helpers.
#![allow(dead_code)]

use env_core::{Env, EnvError, Info, Options, Result, Space, Step};
use ndarray::Array1;

/// Counts steps; terminates after `terminate_after` steps. Observation `[episode, t]` as i64, reward
/// `t` (1-based), info `{"reset_seed": seed}` on reset. Action: the text "ok" (anything else is invalid).
#[derive(Debug)]
pub struct Counter {
    pub terminate_after: u32,
    pub episode: i64,
    pub t: i64,
    pub closed: u32,
}

impl Counter {
    pub fn new(terminate_after: u32) -> Self {
        Self {
            terminate_after,
            episode: 0,
            t: 0,
            closed: 0,
        }
    }
}

impl Env for Counter {
    type Obs = Array1<i64>;
    type Action = String;

    fn reset(&mut self, seed: Option<u64>, _options: &Options) -> Result<(Array1<i64>, Info)> {
        self.episode += 1;
        self.t = 0;
        let mut info = Info::new();
        info.insert("reset_seed".into(), serde_json::json!(seed));
        Ok((Array1::from_vec(vec![self.episode, 0]), info))
    }

    fn step(&mut self, action: String) -> Result<Step<Array1<i64>>> {
        if action != "ok" {
            return Err(EnvError::InvalidAction(action));
        }
        self.t += 1;
        Ok(Step {
            obs: Array1::from_vec(vec![self.episode, self.t]),
            reward: self.t as f64,
            terminated: self.t >= i64::from(self.terminate_after),
            truncated: false,
            info: Info::new(),
        })
    }

    fn close(&mut self) -> Result<()> {
        self.closed += 1;
        Ok(())
    }

    fn observation_space(&self) -> Space {
        Space::Box(
            env_core::BoxSpace::uniform(0.0, f64::INFINITY, &[2], env_core::DType::I64)
                .expect("valid bounds"),
        )
    }

    fn action_space(&self) -> Space {
        Space::text(0, 8)
    }
}

pub fn ok() -> String {
    "ok".to_string()
}
