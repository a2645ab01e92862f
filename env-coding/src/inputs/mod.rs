//! Inputs derived from a task, and whether two programs agree on them: the reference and a
//! candidate compared beyond the task's own tests (EvalPlus's idea, for any task with a
//! reference solution).
//!
//! [`derive`] finds the task's seed inputs ([`seeds`]: the arguments its unit tests pass,
//! recovered by running them against the reference with the entry point recorded; a
//! differential task's argument lists; a stdin task's test inputs and prompt samples), adds
//! type-aware mutations of them ([`mutate`]: deterministic, seeded by the task's id), runs the
//! reference on all of them once and keeps the inputs it handles, with its outputs. Then
//! [`Derived::disagreements`] runs a candidate on the same inputs and returns every input where
//! its output is not the reference's (as the task compares outputs), with both outputs. Function
//! inputs go through the differential runner ([`calls`]), stdin and plain runs through the
//! sandbox directly ([`stdio`]). Everything runs in the sandbox; only trusted code (the
//! reference, the task's tests) runs in the recorder.
//!
//! [`Derived`] is computed once per task and reused for every candidate (the audit's surviving
//! mutants; [`cross_check`] does both steps for one candidate).

pub mod calls;
pub mod mutate;
pub mod numbers;
pub mod samples;
pub mod seeds;
pub mod stdio;

use serde::Serialize;

pub use mutate::Rng;
pub use seeds::{RECORD_SOURCE, Seeds, TextCheck};

use crate::tasks::Task;
use codegym_sandbox::{Sandbox, SandboxError};

/// Characters of an input or output kept in a [`Disagreement`].
const SHOWN: usize = 300;

/// One input on which two programs disagree, with both outputs (rendered, capped).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Disagreement {
    pub input: String,
    pub reference: String,
    pub candidate: String,
}

impl Disagreement {
    fn new(input: &str, reference: &str, candidate: &str) -> Disagreement {
        let cap = |s: &str| match s.char_indices().nth(SHOWN) {
            Some((at, _)) => format!("{}...", &s[..at]),
            None => s.to_string(),
        };
        Disagreement {
            input: cap(input),
            reference: cap(reference),
            candidate: cap(candidate),
        }
    }
}

/// The inputs of one task, with the reference's outputs.
#[derive(Debug, Clone)]
pub struct Derived {
    kind: Kind,
    /// Distinct seed inputs found (before the reference dropped any).
    pub seeds: usize,
    /// Mutated inputs made from them (likewise).
    pub mutated: usize,
}

#[derive(Debug, Clone)]
enum Kind {
    Calls(calls::CallInputs),
    Stdin(stdio::StdinInputs),
    Plain(stdio::PlainRun),
    Unavailable(String),
}

impl Derived {
    fn unavailable(why: impl Into<String>) -> Derived {
        Derived {
            kind: Kind::Unavailable(why.into()),
            seeds: 0,
            mutated: 0,
        }
    }

    /// The inputs a candidate is compared on (those the reference handles).
    pub fn len(&self) -> usize {
        match &self.kind {
            Kind::Calls(c) => c.len(),
            Kind::Stdin(s) => s.len(),
            Kind::Plain(_) => 1,
            Kind::Unavailable(_) => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Why there are no inputs, when there are none.
    pub fn why_none(&self) -> Option<String> {
        match &self.kind {
            Kind::Unavailable(why) => Some(why.clone()),
            _ if self.is_empty() => Some("the reference handles none of the inputs".into()),
            _ => None,
        }
    }

    /// Every input on which `candidate` (a whole program, as the task scores it: a function
    /// task's program defines the function) and the reference disagree. `Err` only for
    /// machinery failures.
    pub async fn disagreements(
        &self,
        sandbox: &Sandbox,
        candidate: &str,
    ) -> Result<Vec<Disagreement>, SandboxError> {
        match &self.kind {
            Kind::Calls(c) => c.disagreements(sandbox, candidate).await,
            Kind::Stdin(s) => s.disagreements(sandbox, candidate).await,
            Kind::Plain(p) => p.disagreements(sandbox, candidate).await,
            Kind::Unavailable(_) => Ok(Vec::new()),
        }
    }
}

/// The inputs of `task` (seeds, their mutations) that its reference solution handles, with its
/// outputs. A task without a reference, or whose inputs cannot be found, gives none (and says
/// why). `Err` only for machinery failures.
pub async fn derive(sandbox: &Sandbox, task: &Task) -> Result<Derived, SandboxError> {
    let Some(reference) = task.reference_solution.as_deref() else {
        return Ok(Derived::unavailable("the task has no reference solution"));
    };
    let mut rng = Rng::new(&task.id);
    match seeds::seeds(sandbox, task, reference).await? {
        Seeds::Unavailable(why) => Ok(Derived::unavailable(why)),
        Seeds::Plain => Ok(
            match stdio::PlainRun::new(sandbox, reference, task).await? {
                Some(p) => Derived {
                    kind: Kind::Plain(p),
                    seeds: 1,
                    mutated: 0,
                },
                None => Derived::unavailable("the reference's own run fails"),
            },
        ),
        Seeds::Calls {
            entry_point,
            groups,
            atol,
            oracle,
        } => {
            let (mut seeds, mut mutated) = (0, 0);
            let groups = groups
                .into_iter()
                .map(|(deserialize, args)| {
                    let (all, n) = calls::expand(&args, reference, &mut rng);
                    seeds += n;
                    mutated += all.len() - n;
                    (deserialize, all)
                })
                .collect();
            let made =
                calls::CallInputs::new(sandbox, reference, &entry_point, groups, atol, oracle)
                    .await?;
            Ok(match made {
                Ok(c) => Derived {
                    kind: Kind::Calls(c),
                    seeds,
                    mutated,
                },
                Err(why) => Derived::unavailable(why),
            })
        }
        Seeds::Stdin {
            inputs,
            check,
            driver,
            time_limit_ms,
        } => {
            let seeds = inputs.len();
            let mut all = inputs;
            // Twice as many mutated texts as seeds (10 to 30: each is a run per program), where
            // the format is clear; each joins the pool later ones are mutated from.
            let want = seeds + (2 * seeds).clamp(10, 30);
            for _ in 0..want * 5 {
                if all.len() >= want || seeds == 0 {
                    break;
                }
                let base = &all[rng.below(all.len())];
                if let Some(m) = numbers::mutate_numbers(base, &mut rng)
                    && !all.contains(&m)
                {
                    all.push(m);
                }
            }
            let mutated = all.len() - seeds;
            let s = stdio::StdinInputs::new(
                sandbox,
                reference,
                task,
                all,
                check,
                driver,
                time_limit_ms,
            )
            .await?;
            Ok(Derived {
                kind: Kind::Stdin(s),
                seeds,
                mutated,
            })
        }
    }
}

/// The inputs on which `candidate` and `task`'s reference disagree ([`derive`], then
/// [`Derived::disagreements`]; derive once per task to check many candidates).
pub async fn cross_check(
    sandbox: &Sandbox,
    task: &Task,
    candidate: &str,
) -> Result<Vec<Disagreement>, SandboxError> {
    derive(sandbox, task)
        .await?
        .disagreements(sandbox, candidate)
        .await
}
