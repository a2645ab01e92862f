//! The environment registry: `register`, `make`, `make_vec` and id resolution, as in Gymnasium.
//!
//! A [`Registry`] is a plain value (no global state): the server builds one at start-up and shares it
//! read-only. `make` applies the same standard wrappers as Gymnasium's `make`.
//!
//! Envs are registered synchronous ([`Registry::register`], Gymnasium's `Env`) or asynchronous
//! ([`Registry::register_async`], envs that wait on processes or the network). [`Registry::make_async`]
//! serves both through [`AsyncEnv`] and is what servers and the rollout engine call;
//! [`Registry::make`] serves synchronous envs to synchronous callers (vector envs, embedders).

mod batch;
mod resolve;
mod tasks;

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;

use crate::async_env::{PanicGuard, panic_message};
use crate::offload::{Offload, SyncAdapter, ThreadOffload, run_offloaded};
use crate::wrappers::{OrderEnforcing, TimeLimit};
use crate::{
    AsyncEnv, CallCost, DynEnv, EnvError, EnvFuture, EnvId, EnvSpec, Result, ValueEnv, VectorEnv,
};

pub use batch::{BatchEvaluator, EvalItem, EvalStream, ResetStepEvaluator};
pub use tasks::{TaskInfo, TaskLister, TaskPage};

/// Constructor keyword arguments, as given to `make`.
pub type Kwargs = serde_json::Map<String, serde_json::Value>;

/// Builds a fresh, unwrapped synchronous environment from merged kwargs.
pub type EnvCreator = Arc<dyn Fn(&Kwargs) -> Result<Box<dyn DynEnv>> + Send + Sync>;

/// Builds a fresh, unwrapped asynchronous environment from merged kwargs.
pub type AsyncEnvCreator =
    Arc<dyn Fn(Kwargs) -> EnvFuture<'static, Box<dyn AsyncEnv>> + Send + Sync>;

/// [`Registry::make_async`] detached from the registry: the same env, wrappers included.
pub type AsyncMaker = Arc<dyn Fn(&Kwargs) -> EnvFuture<'static, Box<dyn AsyncEnv>> + Send + Sync>;

#[derive(Clone)]
enum Creator {
    Sync(EnvCreator),
    Async(AsyncEnvCreator),
}

/// The kwarg that overrides `spec.max_episode_steps` in `make` (never passed to the creator).
pub const MAX_EPISODE_STEPS_KWARG: &str = "max_episode_steps";

/// The most sub-envs `make_vec` creates: a request-supplied count must not exhaust memory. Servers
/// should cap far lower for envs that hold real resources.
pub const MAX_NUM_ENVS: usize = 65_536;

struct Entry {
    spec: EnvSpec,
    creator: Creator,
    evaluator: Option<Arc<dyn BatchEvaluator>>,
    lister: Option<Arc<dyn TaskLister>>,
}

/// Registered environments, keyed by canonical id (`ns/Name-vN`).
pub struct Registry {
    entries: BTreeMap<String, Entry>,
    /// Other ids of registered envs (an env's former id keeps working): alias -> canonical id.
    aliases: BTreeMap<String, String>,
    /// Where blocking calls of synchronous envs run under [`Registry::make_async`].
    offload: Arc<dyn Offload>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::with_offload(Arc::new(ThreadOffload))
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("ids", &self.entries.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Registry {
    /// An empty registry whose blocking env calls each get a thread of their own ([`ThreadOffload`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty registry whose blocking calls of synchronous envs run through `offload` (e.g. a
    /// runtime's blocking pool).
    pub fn with_offload(offload: Arc<dyn Offload>) -> Self {
        Registry {
            entries: BTreeMap::new(),
            aliases: BTreeMap::new(),
            offload,
        }
    }

    /// Registers a synchronous env: `spec` under `spec.id`. `spec.call_cost` says how
    /// [`Registry::make_async`] calls it.
    ///
    /// Fails with [`EnvError::MalformedId`] when the id does not parse and
    /// [`EnvError::AlreadyRegistered`] when it is taken.
    pub fn register(&mut self, spec: EnvSpec, creator: EnvCreator) -> Result<()> {
        self.insert(spec, Creator::Sync(creator))
    }

    /// Registers an asynchronous env: `spec` under `spec.id` (`spec.call_cost` does not apply).
    pub fn register_async(&mut self, spec: EnvSpec, creator: AsyncEnvCreator) -> Result<()> {
        self.insert(spec, Creator::Async(creator))
    }

    fn insert(&mut self, spec: EnvSpec, creator: Creator) -> Result<()> {
        let id = EnvId::parse(&spec.id)?.to_string();
        if id != spec.id {
            // Lookups go by canonical id (`-v01` is `-v1`), which must never disagree with `spec.id`.
            return Err(EnvError::MalformedId(spec.id));
        }
        if self.entries.contains_key(&id) || self.aliases.contains_key(&id) {
            return Err(EnvError::AlreadyRegistered(id));
        }
        tracing::debug!(env_id = %id, "registered environment");
        self.entries.insert(
            id,
            Entry {
                spec,
                creator,
                evaluator: None,
                lister: None,
            },
        );
        Ok(())
    }

    /// Registers `alias` as another id of the env `target` resolves to: `make`, `spec`, evaluators
    /// and task listers answer it as that env (whose spec keeps its own id). An unversioned request
    /// resolves among aliases as among ids.
    ///
    /// Fails like [`Registry::register`] for the alias, and when `target` is not registered.
    pub fn register_alias(&mut self, alias: &str, target: &str) -> Result<()> {
        let id = EnvId::parse(alias)?.to_string();
        if id != alias {
            return Err(EnvError::MalformedId(alias.to_string()));
        }
        let target = self.resolve(target)?.to_string();
        if self.entries.contains_key(&id) || self.aliases.contains_key(&id) {
            return Err(EnvError::AlreadyRegistered(id));
        }
        tracing::debug!(alias = %id, env_id = %target, "registered environment alias");
        self.aliases.insert(id, target);
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

    /// Attaches a task lister (the `ListTasks` RPC) to the registered env that `id` resolves to.
    pub fn register_task_lister(&mut self, id: &str, lister: Arc<dyn TaskLister>) -> Result<()> {
        let key = self.resolve(id)?.to_string();
        let entry = self
            .entries
            .get_mut(&key)
            .ok_or_else(|| EnvError::UnregisteredEnv(key.clone()))?;
        if entry.lister.is_some() {
            return Err(EnvError::AlreadyRegistered(format!(
                "task lister for {key}"
            )));
        }
        entry.lister = Some(lister);
        Ok(())
    }

    /// The task lister of the env that `id` resolves to; [`EnvError::Unsupported`] if it has none.
    pub fn task_lister(&self, id: &str) -> Result<Arc<dyn TaskLister>> {
        let entry = self.entry(id)?;
        entry.lister.clone().ok_or_else(|| {
            EnvError::Unsupported(format!("{} has no task set to list", entry.spec.id))
        })
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

    /// Creates the synchronous env that `id` resolves to, wrapped as Gymnasium's `make` does.
    ///
    /// `kwargs` are merged over `spec.default_kwargs`; a `max_episode_steps` kwarg overrides the spec's
    /// (`null` keeps it) and is not passed to the creator. An asynchronous env is
    /// [`EnvError::Unsupported`] here: use [`Registry::make_async`].
    pub fn make(&self, id: &str, kwargs: &Kwargs) -> Result<Box<dyn DynEnv>> {
        let entry = self.entry(id)?;
        make_with(&entry.spec, sync_creator(entry)?, kwargs)
    }

    /// Creates the env that `id` resolves to, synchronous or not, as an [`AsyncEnv`]: wrapped as
    /// `make` does, then guarded so that a panic fails only its own call. A synchronous env is called
    /// in place when its spec says [`CallCost::Cheap`], else through this registry's [`Offload`]
    /// (its constructor too).
    pub fn make_async(&self, id: &str, kwargs: &Kwargs) -> EnvFuture<'static, Box<dyn AsyncEnv>> {
        match self.async_maker(id) {
            Ok(maker) => maker(kwargs),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    /// [`Registry::make_async`] for one id, detached from the registry (for batch evaluators).
    pub fn async_maker(&self, id: &str) -> Result<AsyncMaker> {
        let entry = self.entry(id)?;
        let spec = Arc::new(entry.spec.clone());
        let creator = entry.creator.clone();
        let offload = self.offload.clone();
        Ok(Arc::new(move |kwargs: &Kwargs| {
            make_async_with(
                spec.clone(),
                creator.clone(),
                offload.clone(),
                kwargs.clone(),
            )
        }))
    }

    /// Creates `num_envs` independent copies of the env, as `make` would, in a [`VectorEnv`].
    pub fn make_vec(&self, id: &str, num_envs: usize, kwargs: &Kwargs) -> Result<VectorEnv> {
        if num_envs == 0 || num_envs > MAX_NUM_ENVS {
            return Err(EnvError::InvalidKwargs(format!(
                "num_envs must be in 1..={MAX_NUM_ENVS}, got {num_envs}"
            )));
        }
        let entry = self.entry(id)?;
        let creator = sync_creator(entry)?;
        let envs = (0..num_envs)
            .map(|_| make_with(&entry.spec, creator, kwargs))
            .collect::<Result<Vec<_>>>()?;
        VectorEnv::new(envs)
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
            .chain(self.aliases.keys())
            .filter_map(|k| EnvId::parse(k).ok())
            .collect();
        let found = resolve::resolve(&wanted, &candidates)?;
        match self.aliases.get(&found.to_string()) {
            Some(target) => EnvId::parse(target),
            None => Ok(found),
        }
    }
}

fn sync_creator(entry: &Entry) -> Result<&EnvCreator> {
    match &entry.creator {
        Creator::Sync(c) => Ok(c),
        Creator::Async(_) => Err(EnvError::Unsupported(format!(
            "{} is asynchronous: create it with make_async",
            entry.spec.id
        ))),
    }
}

/// Gymnasium's `make` for one synchronous spec: merge kwargs, create, then wrap.
///
/// Wrapper order: Gymnasium applies `OrderEnforcing` then `TimeLimit`. Here `OrderEnforcing` is the
/// outermost so that it also sees truncations set by `TimeLimit` and rejects a step after them with
/// [`EnvError::EpisodeEnded`]; every other observable behaviour is the same.
fn make_with(spec: &EnvSpec, creator: &EnvCreator, kwargs: &Kwargs) -> Result<Box<dyn DynEnv>> {
    let (merged, max_steps) = merge_kwargs(spec, kwargs)?;
    let env = creator(&merged)?;
    Ok(match max_steps {
        Some(n) => ValueEnv::boxed(OrderEnforcing::new(TimeLimit::new(env, n)?)),
        None => ValueEnv::boxed(OrderEnforcing::new(env)),
    })
}

/// [`Registry::make_async`] for one spec: the same kwargs and wrappers for both kinds of env.
fn make_async_with(
    spec: Arc<EnvSpec>,
    creator: Creator,
    offload: Arc<dyn Offload>,
    kwargs: Kwargs,
) -> EnvFuture<'static, Box<dyn AsyncEnv>> {
    let making = async move {
        let env = match creator {
            Creator::Sync(creator) => {
                let cost = spec.call_cost;
                let env = match cost {
                    CallCost::Cheap => make_with(&spec, &creator, &kwargs)?,
                    CallCost::Blocking => {
                        let spec = spec.clone();
                        run_offloaded(offload.as_ref(), move || {
                            make_with(&spec, &creator, &kwargs)
                        })
                        .await??
                    }
                };
                SyncAdapter::boxed(env, cost, offload)
            }
            Creator::Async(creator) => {
                let (merged, max_steps) = merge_kwargs(&spec, &kwargs)?;
                let env = creator(merged).await?;
                match max_steps {
                    Some(n) => Box::new(OrderEnforcing::new(TimeLimit::new(env, n)?)),
                    None => Box::new(OrderEnforcing::new(env)) as Box<dyn AsyncEnv>,
                }
            }
        };
        Ok(PanicGuard::boxed(env))
    };
    // A constructor that panics fails only this `make`.
    Box::pin(async move {
        AssertUnwindSafe(making)
            .catch_unwind()
            .await
            .unwrap_or_else(|payload| Err(EnvError::Panicked(panic_message(payload.as_ref()))))
    })
}

/// `spec.default_kwargs` with `kwargs` over them, and the time limit taken out of them.
fn merge_kwargs(spec: &EnvSpec, kwargs: &Kwargs) -> Result<(Kwargs, Option<u32>)> {
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
    Ok((merged, max_steps))
}
