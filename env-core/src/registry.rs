//! The environment registry: `register`, `make`, `make_vec` and id resolution, as in Gymnasium.
//!
//! A [`Registry`] is a plain value (no global state): the server builds one at start-up and shares it
//! read-only. `make` applies the same standard wrappers as Gymnasium's `make`.

mod evaluate;
mod resolve;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::wrappers::{OrderEnforcing, TimeLimit};
use crate::{DynEnv, EnvError, EnvId, EnvSpec, Result, ValueEnv, VectorEnv};

pub use evaluate::{BatchEvaluator, EvalItem, ResetStepEvaluator};

/// Constructor keyword arguments, as given to `make`.
pub type Kwargs = serde_json::Map<String, serde_json::Value>;

/// Builds a fresh, unwrapped environment from merged kwargs.
pub type EnvCreator = Arc<dyn Fn(&Kwargs) -> Result<Box<dyn DynEnv>> + Send + Sync>;

/// The kwarg that overrides `spec.max_episode_steps` in `make` (never passed to the creator).
pub const MAX_EPISODE_STEPS_KWARG: &str = "max_episode_steps";

/// The most sub-envs `make_vec` creates: a request-supplied count must not exhaust memory. Servers
/// should cap far lower for envs that hold real resources.
pub const MAX_NUM_ENVS: usize = 65_536;

struct Entry {
    spec: EnvSpec,
    creator: EnvCreator,
    evaluator: Option<Arc<dyn BatchEvaluator>>,
}

/// Registered environments, keyed by canonical id (`ns/Name-vN`).
#[derive(Default)]
pub struct Registry {
    entries: BTreeMap<String, Entry>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("ids", &self.entries.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `spec` under `spec.id`.
    ///
    /// Fails with [`EnvError::MalformedId`] when the id does not parse and
    /// [`EnvError::AlreadyRegistered`] when it is taken.
    pub fn register(&mut self, spec: EnvSpec, creator: EnvCreator) -> Result<()> {
        let id = EnvId::parse(&spec.id)?.to_string();
        if id != spec.id {
            // Lookups go by canonical id (`-v01` is `-v1`), which must never disagree with `spec.id`.
            return Err(EnvError::MalformedId(spec.id));
        }
        if self.entries.contains_key(&id) {
            return Err(EnvError::AlreadyRegistered(id));
        }
        tracing::debug!(env_id = %id, "registered environment");
        self.entries.insert(
            id,
            Entry {
                spec,
                creator,
                evaluator: None,
            },
        );
        Ok(())
    }

    /// Attaches a batch evaluator (the `Evaluate` RPC) to the registered env that `id` resolves to.
    pub fn register_evaluator(
        &mut self,
        id: &str,
        evaluator: Arc<dyn BatchEvaluator>,
    ) -> Result<()> {
        let key = self.resolve(id)?.to_string();
        let entry = self
            .entries
            .get_mut(&key)
            .ok_or_else(|| EnvError::UnregisteredEnv(key.clone()))?;
        if entry.evaluator.is_some() {
            return Err(EnvError::AlreadyRegistered(format!("evaluator for {key}")));
        }
        entry.evaluator = Some(evaluator);
        Ok(())
    }

    /// The spec that `id` resolves to (an id without a version means the latest version).
    pub fn spec(&self, id: &str) -> Result<&EnvSpec> {
        Ok(&self.entry(id)?.spec)
    }

    /// Every registered spec, sorted by id.
    pub fn specs(&self) -> impl Iterator<Item = &EnvSpec> {
        self.entries.values().map(|e| &e.spec)
    }

    /// Whether the env that `id` resolves to has a batch evaluator.
    pub fn supports_evaluate(&self, id: &str) -> Result<bool> {
        Ok(self.entry(id)?.evaluator.is_some())
    }

    /// The batch evaluator of the env that `id` resolves to; [`EnvError::Unsupported`] if it has none.
    pub fn evaluator(&self, id: &str) -> Result<Arc<dyn BatchEvaluator>> {
        let entry = self.entry(id)?;
        entry.evaluator.clone().ok_or_else(|| {
            EnvError::Unsupported(format!("{} has no batch evaluator", entry.spec.id))
        })
    }

    /// Creates the env that `id` resolves to, wrapped as Gymnasium's `make` does.
    ///
    /// `kwargs` are merged over `spec.default_kwargs`; a `max_episode_steps` kwarg overrides the spec's
    /// (`null` keeps it) and is not passed to the creator.
    pub fn make(&self, id: &str, kwargs: &Kwargs) -> Result<Box<dyn DynEnv>> {
        let entry = self.entry(id)?;
        make_with(&entry.spec, &entry.creator, kwargs)
    }

    /// Creates `num_envs` independent copies of the env, as `make` would, in a [`VectorEnv`].
    pub fn make_vec(&self, id: &str, num_envs: usize, kwargs: &Kwargs) -> Result<VectorEnv> {
        if num_envs == 0 || num_envs > MAX_NUM_ENVS {
            return Err(EnvError::InvalidKwargs(format!(
                "num_envs must be in 1..={MAX_NUM_ENVS}, got {num_envs}"
            )));
        }
        let entry = self.entry(id)?;
        let envs = (0..num_envs)
            .map(|_| make_with(&entry.spec, &entry.creator, kwargs))
            .collect::<Result<Vec<_>>>()?;
        VectorEnv::new(envs)
    }

    /// A creator that builds the env exactly as [`Registry::make`] does (wrappers included), detached
    /// from the registry; handy for [`ResetStepEvaluator`].
    pub fn make_creator(&self, id: &str) -> Result<EnvCreator> {
        let entry = self.entry(id)?;
        let spec = entry.spec.clone();
        let creator = entry.creator.clone();
        Ok(Arc::new(move |kwargs: &Kwargs| {
            make_with(&spec, &creator, kwargs)
        }))
    }

    fn entry(&self, id: &str) -> Result<&Entry> {
        let key = self.resolve(id)?.to_string();
        self.entries.get(&key).ok_or(EnvError::UnregisteredEnv(key))
    }

    fn resolve(&self, id: &str) -> Result<EnvId> {
        let wanted = EnvId::parse(id)?;
        let candidates: Vec<EnvId> = self
            .entries
            .keys()
            .filter_map(|k| EnvId::parse(k).ok())
            .collect();
        resolve::resolve(&wanted, &candidates)
    }
}

/// Gymnasium's `make` for one spec: merge kwargs, create, then wrap.
///
/// Wrapper order: Gymnasium applies `OrderEnforcing` then `TimeLimit`. Here `OrderEnforcing` is the
/// outermost so that it also sees truncations set by `TimeLimit` and rejects a step after them with
/// [`EnvError::EpisodeEnded`]; every other observable behaviour is the same.
fn make_with(spec: &EnvSpec, creator: &EnvCreator, kwargs: &Kwargs) -> Result<Box<dyn DynEnv>> {
    let mut merged = spec.default_kwargs.clone();
    merged.extend(kwargs.iter().map(|(k, v)| (k.clone(), v.clone())));
    let max_steps = match merged.remove(MAX_EPISODE_STEPS_KWARG) {
        None | Some(serde_json::Value::Null) => spec.max_episode_steps,
        Some(v) => Some(
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    EnvError::InvalidKwargs(format!(
                        "{MAX_EPISODE_STEPS_KWARG} must be a positive integer, got {v}"
                    ))
                })?,
        ),
    };
    let env = creator(&merged)?;
    Ok(match max_steps {
        Some(n) => ValueEnv::boxed(OrderEnforcing::new(TimeLimit::new(env, n)?)),
        None => ValueEnv::boxed(OrderEnforcing::new(env)),
    })
}
