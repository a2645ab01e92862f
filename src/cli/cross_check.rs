//! `--cross-check` and `--on-disagreement`, shared by `rollout` and `rescore`, and the rollout
//! engine's `CrossCheck` made of the coding env's one checker (`env_coding::cross_check`): the
//! engine knows no environment, so the binary, which knows both, joins them here.

use std::sync::Arc;

use clap::ValueEnum;
use env_coding::Scorer;
use env_coding::cross_check::Checker;
use env_coding::tasks::TaskSet;
use rollout::CrossCheck;
use rollout::cross_check::CheckFuture;
use trajectory::record::OnDisagreement;

/// Cross-checks of rewarded programs against the tasks' references.
#[derive(Debug, Clone, clap::Args)]
pub struct CrossCheckArgs {
    /// Compare this fraction (0 to 1) of the programs that earned a reward with their task's
    /// reference solution, on inputs derived from the task's own tests; the outcome is recorded
    /// on the step (`cross_check`). Steps are sampled by a stable hash of the episode's seed and
    /// the step's index; tasks without a reference are never checked. Default 0 (off).
    #[arg(long = "cross-check", value_name = "FRACTION")]
    pub fraction: Option<f64>,
    /// What a disagreement with the reference does: `keep` records it, `flag` also makes the
    /// episode not solved (reward kept), `zero` also sets the step's reward to 0. Default keep.
    #[arg(long, value_enum, value_name = "ACTION")]
    pub on_disagreement: Option<OnDisagreementArg>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OnDisagreementArg {
    Keep,
    Flag,
    Zero,
}

impl From<OnDisagreementArg> for OnDisagreement {
    fn from(a: OnDisagreementArg) -> Self {
        match a {
            OnDisagreementArg::Keep => OnDisagreement::Keep,
            OnDisagreementArg::Flag => OnDisagreement::Flag,
            OnDisagreementArg::Zero => OnDisagreement::Zero,
        }
    }
}

impl CrossCheckArgs {
    /// The fraction given, checked to be in 0..=1.
    pub fn fraction(&self) -> anyhow::Result<Option<f64>> {
        match self.fraction {
            Some(f) if !(f.is_finite() && (0.0..=1.0).contains(&f)) => {
                anyhow::bail!("--cross-check must be between 0 and 1, not {f}")
            }
            f => Ok(f),
        }
    }
}

/// The coding env's checker behind the rollout engine's trait.
pub struct EnvChecker(Checker);

impl EnvChecker {
    /// A checker of the programs of `tasks`, running in `scorer`'s sandbox.
    pub fn shared(scorer: Arc<Scorer>, tasks: TaskSet) -> Arc<dyn CrossCheck> {
        Arc::new(EnvChecker(Checker::new(scorer, tasks)))
    }
}

impl CrossCheck for EnvChecker {
    fn covers(&self, task_id: &str) -> bool {
        self.0.covers(task_id)
    }

    fn check<'a>(
        &'a self,
        task_id: &'a str,
        program: &'a str,
        language: &'a str,
    ) -> CheckFuture<'a> {
        Box::pin(async move {
            self.0
                .check(task_id, program, language)
                .await
                .map_err(Into::into)
        })
    }
}
