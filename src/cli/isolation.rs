//! The `--isolation` flag of every command that runs programs in the sandbox: one definition, so
//! that each refuses a degraded sandbox the same way unless the user asks for less.

use codegym_sandbox::IsolationLevel;

#[derive(Debug, Clone, clap::Args)]
pub struct IsolationArg {
    /// The least sandbox isolation to run with: strict (the default), basic or none. Below it the
    /// command refuses to start and names the missing layers. basic = a process per run, rlimits,
    /// a cleared environment and a wall-clock kill of the whole tree; strict = basic + a network
    /// namespace, seccomp, Landlock or a mount namespace, and a PID namespace or a cgroup.
    #[arg(long, value_name = "LEVEL")]
    pub isolation: Option<IsolationLevel>,
}

impl IsolationArg {
    /// The level asked for, else `configured` (a config file's, or the default `strict`).
    pub fn level(&self, configured: IsolationLevel) -> IsolationLevel {
        self.isolation.unwrap_or(configured)
    }
}
