//! The `codegym` package: the gRPC environment server (`server`), configuration files (`config`),
//! the process's descriptor setup (`fds`) and the default environment registry, behind the
//! `codegym` binary (and used by the `codegym-bench` benchmarks). The binary's `cli` module only
//! parses arguments and calls into here and into the workspace crates.

pub mod config;
pub mod fds;
pub mod server;

/// Every built-in environment: `classic/CartPole-v1` and the coding environments.
pub fn registry(coding: env_coding::CodingConfig) -> Result<env_core::Registry, RegistryError> {
    let mut registry = env_core::Registry::new();
    env_core::envs::register_classic(&mut registry)?;
    env_coding::register(&mut registry, coding)?;
    Ok(registry)
}

/// Why the default registry could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    Env(#[from] env_core::EnvError),
    #[error(transparent)]
    Coding(#[from] env_coding::CodingError),
}
