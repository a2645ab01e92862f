//! Reference environments implemented natively in Rust.

pub mod cartpole;

pub use cartpole::{CartPole, CartPoleAction, CartPoleConfig};

use crate::{Registry, Result};

/// Registers the classic-control environments (`classic/CartPole-v1`).
pub fn register_classic(registry: &mut Registry) -> Result<()> {
    cartpole::register(registry)
}
