//! `VectorEnv`: `num_envs` independent sub-envs stepped in parallel on rayon, with Gymnasium 1.x's
//! next-step autoreset.

use ndarray::{Array1, ArrayD, Axis};
use rayon::prelude::*;

use crate::{DynEnv, EnvError, Info, Options, Result, Space, Tensor, Value};

/// One batched step: entry `i` of every field belongs to sub-env `i`.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorStep {
    pub obs: Vec<Value>,
    pub rewards: Array1<f64>,
    pub terminated: Array1<bool>,
    pub truncated: Array1<bool>,
    pub infos: Vec<Info>,
}

impl VectorStep {
    /// The observations stacked along a new leading axis, when all are tensors of the same dtype and
    /// shape.
    pub fn stacked_obs(&self) -> Option<Tensor> {
        stack_obs(&self.obs)
    }
}

/// A batch of independent environments, Gymnasium's `SyncVectorEnv` semantics with rayon parallelism.
///
/// Autoreset is next-step (Gymnasium 1.x): the step after sub-env `i` terminated or truncated resets
/// it (its action is ignored) and reports the reset observation and info with reward 0,
/// `terminated = false`, `truncated = false`.
pub struct VectorEnv {
    envs: Vec<Box<dyn DynEnv>>,
    autoreset: Vec<bool>,
}

impl std::fmt::Debug for VectorEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorEnv")
            .field("num_envs", &self.envs.len())
            .field("autoreset", &self.autoreset)
            .finish()
    }
}

impl VectorEnv {
    /// Fails with [`EnvError::InvalidKwargs`] when `envs` is empty.
    pub fn new(envs: Vec<Box<dyn DynEnv>>) -> Result<Self> {
        if envs.is_empty() {
            return Err(EnvError::InvalidKwargs(
                "a vector env needs at least one sub-env".into(),
            ));
        }
        let autoreset = vec![false; envs.len()];
        Ok(Self { envs, autoreset })
    }

    pub fn num_envs(&self) -> usize {
        self.envs.len()
    }

    /// The observation space of one sub-env.
    pub fn single_observation_space(&self) -> Space {
        self.envs[0].observation_space()
    }

    /// The action space of one sub-env.
    pub fn single_action_space(&self) -> Space {
        self.envs[0].action_space()
    }

    /// Resets every sub-env; with a seed, sub-env `i` gets `seed + i` (wrapping), as in Gymnasium.
    pub fn reset(
        &mut self,
        seed: Option<u64>,
        options: &Options,
    ) -> Result<(Vec<Value>, Vec<Info>)> {
        let results: Vec<Result<(Value, Info)>> = self
            .envs
            .par_iter_mut()
            .enumerate()
            .map(|(i, env)| env.reset(seed.map(|s| s.wrapping_add(i as u64)), options))
            .collect();
        self.autoreset.iter_mut().for_each(|a| *a = false);
        results
            .into_iter()
            .collect::<Result<Vec<_>>>()
            .map(|v| v.into_iter().unzip())
    }

    /// Steps every sub-env with its action; `actions.len()` must equal `num_envs`.
    pub fn step(&mut self, actions: Vec<Value>) -> Result<VectorStep> {
        if actions.len() != self.envs.len() {
            return Err(EnvError::InvalidAction(format!(
                "expected {} actions (one per sub-env), got {}",
                self.envs.len(),
                actions.len()
            )));
        }
        let results: Vec<Result<crate::Step<Value>>> = self
            .envs
            .par_iter_mut()
            .zip(self.autoreset.par_iter())
            .zip(actions.into_par_iter())
            .map(|((env, &autoreset), action)| {
                if autoreset {
                    let (obs, info) = env.reset(None, &Options::new())?;
                    Ok(crate::Step {
                        obs,
                        reward: 0.0,
                        terminated: false,
                        truncated: false,
                        info,
                    })
                } else {
                    env.step(action)
                }
            })
            .collect();
        // Flags follow every sub-env that did step, even if another failed, so that a retried batch
        // still autoresets the finished ones.
        for (flag, r) in self.autoreset.iter_mut().zip(&results) {
            if let Ok(s) = r {
                *flag = s.is_final();
            }
        }
        let steps = results.into_iter().collect::<Result<Vec<_>>>()?;
        let n = steps.len();
        let mut out = VectorStep {
            obs: Vec::with_capacity(n),
            rewards: Array1::zeros(n),
            terminated: Array1::from_elem(n, false),
            truncated: Array1::from_elem(n, false),
            infos: Vec::with_capacity(n),
        };
        for (i, s) in steps.into_iter().enumerate() {
            out.rewards[i] = s.reward;
            out.terminated[i] = s.terminated;
            out.truncated[i] = s.truncated;
            out.obs.push(s.obs);
            out.infos.push(s.info);
        }
        Ok(out)
    }

    /// Closes every sub-env, reporting the first failure after trying them all.
    pub fn close(&mut self) -> Result<()> {
        let results: Vec<Result<()>> = self.envs.par_iter_mut().map(|e| e.close()).collect();
        results.into_iter().collect()
    }
}

/// Stacks same-dtype, same-shape tensor observations along a new leading axis.
pub fn stack_obs(obs: &[Value]) -> Option<Tensor> {
    let tensors: Vec<&Tensor> = obs
        .iter()
        .map(|v| match v {
            Value::Tensor(t) => Some(t),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let first = *tensors.first()?;
    macro_rules! stack {
        ($variant:ident) => {{
            let views = tensors
                .iter()
                .map(|t| match t {
                    Tensor::$variant(a) => Some(a.view()),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            let stacked: ArrayD<_> = ndarray::stack(Axis(0), &views).ok()?;
            Some(Tensor::$variant(stacked))
        }};
    }
    match first {
        Tensor::F32(_) => stack!(F32),
        Tensor::F64(_) => stack!(F64),
        Tensor::I32(_) => stack!(I32),
        Tensor::I64(_) => stack!(I64),
        Tensor::U8(_) => stack!(U8),
        Tensor::Bool(_) => stack!(Bool),
    }
}
