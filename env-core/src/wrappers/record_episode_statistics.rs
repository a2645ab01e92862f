//! `RecordEpisodeStatistics`: reports each episode's return, length and duration in `info`.

use std::collections::VecDeque;
use std::time::Instant;

use crate::{Env, EnvError, Info, Options, Result, Space, Step};

/// The `info` key Gymnasium uses.
pub const EPISODE_KEY: &str = "episode";

/// On the final (terminated or truncated) step, adds `info["episode"] = {"r": return, "l": length,
/// "t": elapsed seconds}` with Gymnasium's keys, and keeps the last `buffer_length` episodes' values.
#[derive(Debug)]
pub struct RecordEpisodeStatistics<E> {
    env: E,
    episode_start: Instant,
    episode_return: f64,
    episode_length: u64,
    buffer_length: usize,
    return_queue: VecDeque<f64>,
    length_queue: VecDeque<u64>,
    time_queue: VecDeque<f64>,
}

impl<E: Env> RecordEpisodeStatistics<E> {
    /// Keeps the statistics of the last 100 episodes, Gymnasium's default.
    pub fn new(env: E) -> Self {
        Self::with_buffer_length(env, 100)
    }

    pub fn with_buffer_length(env: E, buffer_length: usize) -> Self {
        Self {
            env,
            episode_start: Instant::now(),
            episode_return: 0.0,
            episode_length: 0,
            buffer_length,
            return_queue: VecDeque::with_capacity(buffer_length),
            length_queue: VecDeque::with_capacity(buffer_length),
            time_queue: VecDeque::with_capacity(buffer_length),
        }
    }

    /// Returns of the most recent finished episodes, oldest first.
    pub fn return_queue(&self) -> &VecDeque<f64> {
        &self.return_queue
    }

    /// Lengths of the most recent finished episodes, oldest first.
    pub fn length_queue(&self) -> &VecDeque<u64> {
        &self.length_queue
    }

    /// Durations in seconds of the most recent finished episodes, oldest first.
    pub fn time_queue(&self) -> &VecDeque<f64> {
        &self.time_queue
    }

    pub fn inner(&self) -> &E {
        &self.env
    }

    pub fn into_inner(self) -> E {
        self.env
    }

    fn push<T>(queue: &mut VecDeque<T>, cap: usize, v: T) {
        if cap == 0 {
            return;
        }
        if queue.len() == cap {
            queue.pop_front();
        }
        queue.push_back(v);
    }
}

impl<E: Env> Env for RecordEpisodeStatistics<E> {
    type Obs = E::Obs;
    type Action = E::Action;

    fn reset(&mut self, seed: Option<u64>, options: &Options) -> Result<(E::Obs, Info)> {
        let out = self.env.reset(seed, options)?;
        self.episode_start = Instant::now();
        self.episode_return = 0.0;
        self.episode_length = 0;
        Ok(out)
    }

    fn step(&mut self, action: E::Action) -> Result<Step<E::Obs>> {
        let mut step = self.env.step(action)?;
        self.episode_return += step.reward;
        self.episode_length += 1;
        if step.is_final() {
            if step.info.contains_key(EPISODE_KEY) {
                // Gymnasium asserts here; overwriting would silently hide another producer's data.
                return Err(EnvError::Infrastructure(format!(
                    "info already contains the key {EPISODE_KEY:?} that RecordEpisodeStatistics writes"
                )));
            }
            // Rounded to microseconds as Gymnasium does.
            let t = (self.episode_start.elapsed().as_secs_f64() * 1e6).round() / 1e6;
            step.info.insert(
                EPISODE_KEY.into(),
                serde_json::json!({"r": self.episode_return, "l": self.episode_length, "t": t}),
            );
            let cap = self.buffer_length;
            Self::push(&mut self.return_queue, cap, self.episode_return);
            Self::push(&mut self.length_queue, cap, self.episode_length);
            Self::push(&mut self.time_queue, cap, t);
        }
        Ok(step)
    }

    fn close(&mut self) -> Result<()> {
        self.env.close()
    }

    fn observation_space(&self) -> Space {
        self.env.observation_space()
    }

    fn action_space(&self) -> Space {
        self.env.action_space()
    }
}
