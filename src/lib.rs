//! The `codegym` package: the gRPC environment server (`server`), its HTTP facades for
//! SandboxFusion and OpenEnv clients (`http`), both wired to one state (`listeners`), configuration files (`config`), its Prometheus
//! metrics (`metrics`),
//! the process's descriptor setup (`fds`) and the default environment registry, behind the
//! `codegym` binary (and used by the `codegym-bench` benchmarks). The binary's `cli` module only
//! parses arguments and calls into here and into the workspace crates.

pub mod config;
pub mod fds;
pub mod http;
pub mod listeners;
pub mod metrics;
pub mod server;

/// Every built-in environment: `classic/CartPole-v1` and the coding environments.
pub fn registry(coding: env_coding::CodingConfig) -> Result<env_core::Registry, RegistryError> {
    Ok(registry_and_sandbox(coding)?.0)
}

/// [`registry`], plus the coding environments' sandbox, so that the HTTP judge API (`/run_code`)
/// runs programs in the same sandbox (one per server: same limits, same concurrency bound).
pub fn registry_and_sandbox(
    coding: env_coding::CodingConfig,
) -> Result<(env_core::Registry, std::sync::Arc<codegym_sandbox::Sandbox>), RegistryError> {
    let (registry, scorer) = registry_and_scorer(coding)?;
    Ok((registry, scorer.sandbox().clone()))
}

/// [`registry`], plus the coding environments' scorer, so that what checks their programs
/// outside a step (a rollout's cross-checks) runs in the same sandbox.
pub fn registry_and_scorer(
    coding: env_coding::CodingConfig,
) -> Result<(env_core::Registry, std::sync::Arc<env_coding::Scorer>), RegistryError> {
    let mut registry = empty_registry();
    env_core::envs::register_classic(&mut registry)?;
    let scorer = env_coding::register(&mut registry, coding)?;
    Ok((registry, scorer))
}

/// A registry with no environments whose blocking env calls (synchronous envs that are not
/// `CallCost::Cheap`) run on tokio's blocking pool: the server and the rollout engine both use it.
pub fn empty_registry() -> env_core::Registry {
    env_core::Registry::with_offload(std::sync::Arc::new(TokioBlockingPool))
}

/// Tokio's blocking pool as the registry's offload (threads are reused across calls); outside a
/// runtime, a thread per call.
struct TokioBlockingPool;

impl env_core::Offload for TokioBlockingPool {
    fn offload(&self, job: Box<dyn FnOnce() + Send>) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(job)),
            Err(_) => env_core::ThreadOffload.offload(job),
        }
    }
}

/// Why the default registry could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    Env(#[from] env_core::EnvError),
    #[error(transparent)]
    Coding(#[from] env_coding::CodingError),
}
