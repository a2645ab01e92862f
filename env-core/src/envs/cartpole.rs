//! `classic/CartPole-v1`, a faithful port of Gymnasium's `classic_control/cartpole.py`.
//!
//! The state is integrated in `f64` with Gymnasium's operations in Gymnasium's order (Euler,
//! `tau = 0.02`) and observed as `f32`, so trajectories from the same initial state (set with the
//! `state` reset option) are bit-identical to Python's. Only the random initial states differ: the
//! generator is ChaCha8, not numpy's PCG64.
//!
//! The observation space's velocity coordinates are unbounded (`inf`), as in Gymnasium 1.x.

use std::sync::Arc;

use ndarray::Array1;
use rand::Rng;
use serde::Deserialize;

use crate::{
    BoxSpace, CallCost, ChaCha8Rng, DType, Env, EnvError, EnvSpec, Info, Kwargs, Options, Registry,
    Result, Space, Step, Tensor, Value, entropy_rng, seeded_rng,
};

/// The registered id.
pub const ID: &str = "classic/CartPole-v1";

const GRAVITY: f64 = 9.8;
const MASSCART: f64 = 1.0;
const MASSPOLE: f64 = 0.1;
const TOTAL_MASS: f64 = MASSPOLE + MASSCART;
/// Half the pole's length, as in Gymnasium.
const LENGTH: f64 = 0.5;
const POLEMASS_LENGTH: f64 = MASSPOLE * LENGTH;
const FORCE_MAG: f64 = 10.0;
/// Seconds between state updates.
const TAU: f64 = 0.02;
/// 12 degrees.
pub const THETA_THRESHOLD_RADIANS: f64 = 12.0 * 2.0 * std::f64::consts::PI / 360.0;
pub const X_THRESHOLD: f64 = 2.4;
const DEFAULT_RESET_BOUND: f64 = 0.05;

/// Constructor kwargs of CartPole.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CartPoleConfig {
    /// Gymnasium's `sutton_barto_reward`: reward 0 per step and -1 on termination instead of 1 always.
    pub sutton_barto_reward: bool,
}

impl CartPoleConfig {
    /// Parses `make` kwargs; unknown keys are [`EnvError::InvalidKwargs`].
    pub fn from_kwargs(kwargs: &Kwargs) -> Result<Self> {
        serde_json::from_value(serde_json::Value::Object(kwargs.clone()))
            .map_err(|e| EnvError::InvalidKwargs(format!("CartPole: {e}")))
    }
}

/// Push the cart to the left (0) or to the right (1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CartPoleAction {
    Left = 0,
    Right = 1,
}

impl TryFrom<i64> for CartPoleAction {
    type Error = EnvError;
    fn try_from(a: i64) -> Result<Self> {
        match a {
            0 => Ok(Self::Left),
            1 => Ok(Self::Right),
            other => Err(EnvError::InvalidAction(format!(
                "CartPole actions are 0 or 1, got {other}"
            ))),
        }
    }
}

/// Accepts `Discrete(0|1)`, a JSON integer, or an integer tensor with exactly one element.
impl TryFrom<Value> for CartPoleAction {
    type Error = EnvError;
    fn try_from(v: Value) -> Result<Self> {
        let bad =
            |what: String| EnvError::InvalidAction(format!("CartPole expects 0 or 1, got {what}"));
        let a = match &v {
            Value::Discrete(a) => *a,
            Value::Json(j) => j.as_i64().ok_or_else(|| bad(format!("json {j}")))?,
            Value::Tensor(t) if t.shape().iter().product::<usize>() == 1 => match t {
                Tensor::I32(a) => a.iter().next().map(|&x| i64::from(x)),
                Tensor::I64(a) => a.iter().next().copied(),
                Tensor::U8(a) => a.iter().next().map(|&x| i64::from(x)),
                _ => None,
            }
            .ok_or_else(|| bad("a non-integer tensor".into()))?,
            Value::Tensor(t) => return Err(bad(format!("a tensor of shape {:?}", t.shape()))),
            other => return Err(bad(other.kind().into())),
        };
        Self::try_from(a)
    }
}

/// Gymnasium's CartPole: balance a pole on a cart by pushing the cart left or right.
#[derive(Debug, Clone)]
pub struct CartPole {
    config: CartPoleConfig,
    /// `[x, x_dot, theta, theta_dot]`; `None` before the first reset.
    state: Option<[f64; 4]>,
    rng: Option<ChaCha8Rng>,
    /// Gymnasium's `steps_beyond_terminated`.
    steps_beyond_terminated: Option<u64>,
}

impl CartPole {
    pub fn new(config: CartPoleConfig) -> Self {
        Self {
            config,
            state: None,
            rng: None,
            steps_beyond_terminated: None,
        }
    }

    /// The current state `[x, x_dot, theta, theta_dot]`, if reset.
    pub fn state(&self) -> Option<[f64; 4]> {
        self.state
    }

    /// The registered spec.
    pub fn spec() -> EnvSpec {
        EnvSpec {
            id: ID.into(),
            description:
                "Gymnasium's CartPole: keep a pole upright by pushing a cart left or right; \
                          reward 1 per step, at most 500 steps."
                    .into(),
            max_episode_steps: Some(500),
            reward_threshold: Some(475.0),
            nondeterministic: false,
            observation_space: observation_space(),
            action_space: Space::Discrete { n: 2, start: 0 },
            default_kwargs: Kwargs::new(),
            call_cost: CallCost::Cheap,
            metadata: Default::default(),
        }
    }

    fn observation(state: &[f64; 4]) -> Array1<f32> {
        // Narrowing to f32 is the observation dtype Gymnasium uses.
        Array1::from_iter(state.iter().map(|&x| x as f32))
    }
}

fn observation_space() -> Space {
    // Gymnasium builds `high` as a float32 array, so the thresholds are rounded to f32 too.
    let high: Vec<f64> = [
        X_THRESHOLD * 2.0,
        f64::INFINITY,
        THETA_THRESHOLD_RADIANS * 2.0,
        f64::INFINITY,
    ]
    .iter()
    .map(|&x| f64::from(x as f32))
    .collect();
    let low: Vec<f64> = high.iter().map(|x| -x).collect();
    Space::Box(BoxSpace {
        low: Array1::from_vec(low).into_dyn(),
        high: Array1::from_vec(high).into_dyn(),
        dtype: DType::F32,
    })
}

fn option_f64(options: &Options, key: &str, default: f64) -> Result<f64> {
    match options.get(key) {
        None | Some(serde_json::Value::Null) => Ok(default),
        Some(v) => v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| {
            EnvError::InvalidOptions(format!("{key:?} must be a finite number, got {v}"))
        }),
    }
}

fn option_state(options: &Options) -> Result<Option<[f64; 4]>> {
    let Some(v) = options.get("state") else {
        return Ok(None);
    };
    let bad = || {
        EnvError::InvalidOptions(format!(
            "\"state\" must be 4 finite numbers [x, x_dot, theta, theta_dot], got {v}"
        ))
    };
    let arr = v.as_array().ok_or_else(bad)?;
    if arr.len() != 4 {
        return Err(bad());
    }
    let mut state = [0.0; 4];
    for (s, x) in state.iter_mut().zip(arr) {
        *s = x.as_f64().filter(|x| x.is_finite()).ok_or_else(bad)?;
    }
    Ok(Some(state))
}

impl Env for CartPole {
    type Obs = Array1<f32>;
    type Action = CartPoleAction;

    /// Options: Gymnasium's `low`/`high` (bounds of the uniform initial state, default ±0.05), and the
    /// codegym extension `state = [x, x_dot, theta, theta_dot]` that sets the initial state exactly.
    fn reset(&mut self, seed: Option<u64>, options: &Options) -> Result<(Array1<f32>, Info)> {
        let low = option_f64(options, "low", -DEFAULT_RESET_BOUND)?;
        let high = option_f64(options, "high", DEFAULT_RESET_BOUND)?;
        if low > high {
            return Err(EnvError::InvalidOptions(format!(
                "lower bound {low} must not exceed upper bound {high}"
            )));
        }
        let explicit = option_state(options)?;
        if let Some(seed) = seed {
            self.rng = Some(seeded_rng(seed));
        }
        let rng = self.rng.get_or_insert_with(entropy_rng);
        let state = match explicit {
            Some(s) => s,
            // numpy's uniform is `low + (high - low) * random()`; it also tolerates low == high.
            None => std::array::from_fn(|_| low + (high - low) * rng.random::<f64>()),
        };
        self.state = Some(state);
        self.steps_beyond_terminated = None;
        Ok((Self::observation(&state), Info::new()))
    }

    fn step(&mut self, action: CartPoleAction) -> Result<Step<Array1<f32>>> {
        let [x, x_dot, theta, theta_dot] = self.state.ok_or(EnvError::ResetNeeded)?;
        let force = match action {
            CartPoleAction::Right => FORCE_MAG,
            CartPoleAction::Left => -FORCE_MAG,
        };
        let (sintheta, costheta) = theta.sin_cos();
        // Operation order mirrors Gymnasium's `np.square(...)` grouping exactly: a different
        // association rounds differently and trajectories drift apart after a few hundred steps.
        let temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS;
        let thetaacc = (GRAVITY * sintheta - costheta * temp)
            / (LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS));
        let xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS;
        let state = [
            x + TAU * x_dot,
            x_dot + TAU * xacc,
            theta + TAU * theta_dot,
            theta_dot + TAU * thetaacc,
        ];
        self.state = Some(state);
        let [x, _, theta, _] = state;
        let terminated = !(-X_THRESHOLD..=X_THRESHOLD).contains(&x)
            || !(-THETA_THRESHOLD_RADIANS..=THETA_THRESHOLD_RADIANS).contains(&theta);
        let sb = self.config.sutton_barto_reward;
        let reward = if !terminated {
            if sb { 0.0 } else { 1.0 }
        } else if self.steps_beyond_terminated.is_none() {
            self.steps_beyond_terminated = Some(0);
            if sb { -1.0 } else { 1.0 }
        } else {
            let n = self.steps_beyond_terminated.map_or(1, |n| n + 1);
            self.steps_beyond_terminated = Some(n);
            tracing::warn!(
                steps_beyond_terminated = n,
                "CartPole stepped after termination; call reset()"
            );
            if sb { -1.0 } else { 0.0 }
        };
        Ok(Step {
            obs: Self::observation(&state),
            reward,
            terminated,
            truncated: false,
            info: Info::new(),
        })
    }

    fn observation_space(&self) -> Space {
        observation_space()
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: 2, start: 0 }
    }
}

/// Registers `classic/CartPole-v1` with its generic reset+step batch evaluator.
pub fn register(registry: &mut Registry) -> Result<()> {
    registry.register(
        CartPole::spec(),
        Arc::new(|kwargs: &Kwargs| {
            Ok(
                Box::new(CartPole::new(CartPoleConfig::from_kwargs(kwargs)?))
                    as Box<dyn crate::DynEnv>,
            )
        }),
    )?;
    let maker = registry.async_maker(ID)?;
    registry.register_evaluator(ID, Arc::new(crate::ResetStepEvaluator::new(maker)))
}
