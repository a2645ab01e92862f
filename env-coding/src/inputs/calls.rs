//! Function inputs: argument lists run through the differential runner
//! ([`crate::differential::outputs`]: `runner.py` in the sandbox computes outputs, the host
//! compares them with EvalPlus's rule, [`crate::differential::compare`]).
//!
//! The reference runs once on every candidate input; an input on which it raises, returns
//! something that is not plain data, or runs out of time is dropped (EvalPlus keeps only inputs
//! the reference handles). A second program then runs on the inputs kept, each limited as a
//! differential score limits it (`max(2 s, 4 x the reference's time)`).

use std::collections::HashSet;

use serde_json::Value;

use super::Disagreement;
use super::mutate::{Ingredients, Rng, fits_json_values, mutate_args};
use crate::differential::outputs::{Output, outputs_of};
use crate::differential::value::PyVal;
use crate::differential::{DiffSpec, Oracle, TestSet, compare};
use codegym_sandbox::{Limits, Sandbox, SandboxError};

/// Least time per input, for the reference and the programs compared with it.
const TIME_LIMIT_MS: u64 = 2_000;
/// Runs of the reference when inputs time out (each drops the input that did).
const REFERENCE_ROUNDS: usize = 4;
/// Room for the reference's record of unknown size.
const REFERENCE_OUTPUT_CAP: usize = 64 << 20;

/// One group of inputs sharing a type transform, with the reference's outputs on them.
#[derive(Debug, Clone)]
struct Group {
    spec: DiffSpec,
    /// Argument lists (JSON text) the reference handles.
    inputs: Vec<String>,
    expected: Vec<PyVal>,
    times: Vec<f64>,
}

/// Argument lists of one Python function and the reference's outputs on them.
#[derive(Debug, Clone)]
pub struct CallInputs {
    groups: Vec<Group>,
}

/// The extra inputs made from `seeds`: many (one run of the runner covers them all, and an
/// input that tells two programs apart may be rare), at least a few for one seed.
fn extra_for(seeds: usize) -> usize {
    (seeds * 10).clamp(50, 200)
}

/// `seeds` and their mutations, deduplicated: (inputs, how many are seeds). As in EvalPlus, a
/// mutated input joins the pool later inputs are mutated from, so inputs drift further than one
/// change from the tests'; values come from the seeds and from `reference`'s constants.
pub(super) fn expand(seeds: &[String], reference: &str, rng: &mut Rng) -> (Vec<String>, usize) {
    let mut out: Vec<String> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut pool = Vec::new();
    for s in seeds {
        if !seen.insert(s.clone()) {
            continue;
        }
        out.push(s.clone());
        if fits_json_values(s)
            && let Ok(v) = serde_json::from_str::<Value>(s)
        {
            pool.push(v);
        }
    }
    let n_seeds = out.len();
    let mut with = Ingredients::of(&pool);
    with.add_constants_of(reference);
    let want = n_seeds + extra_for(n_seeds);
    let mut tries = 0;
    while !pool.is_empty() && out.len() < want && tries < want * 10 {
        tries += 1;
        let base = &pool[rng.below(pool.len())];
        if let Some(m) = mutate_args(base, &with, rng)
            && seen.insert(m.to_string())
        {
            out.push(m.to_string());
            pool.push(m);
        }
    }
    (out, n_seeds)
}

impl CallInputs {
    /// Runs `reference` on `groups` of candidate inputs and keeps those it handles. `Ok(Err)`:
    /// the reference does not load.
    pub(super) async fn new(
        sandbox: &Sandbox,
        reference: &str,
        entry_point: &str,
        groups: Vec<(Option<String>, Vec<String>)>,
        atol: f64,
        oracle: Oracle,
    ) -> Result<Result<CallInputs, String>, SandboxError> {
        let mut kept = Vec::new();
        for (deserialize, inputs) in groups {
            let spec = DiffSpec {
                entry_point: entry_point.to_string(),
                reference: reference.to_string(),
                base_inputs: "[]".into(),
                plus_inputs: String::new(),
                atol,
                tests: TestSet::Base,
                // Only the rule applies here: the runner's `not_none` mode is the reference's.
                oracle: if oracle == Oracle::NotNone {
                    Oracle::Exact
                } else {
                    oracle
                },
                deserialize,
                time_limit_ms: TIME_LIMIT_MS,
                partial: true,
                weight: 1.0,
            };
            match reference_outputs(sandbox, &spec, inputs).await? {
                Ok(group) if !group.inputs.is_empty() => kept.push(group),
                Ok(_) => {}
                Err(why) => return Ok(Err(why)),
            }
        }
        Ok(Ok(CallInputs { groups: kept }))
    }

    pub(super) fn len(&self) -> usize {
        self.groups.iter().map(|g| g.inputs.len()).sum()
    }

    /// Where `candidate` (a Python program defining the function) and the reference disagree.
    pub async fn disagreements(
        &self,
        sandbox: &Sandbox,
        candidate: &str,
    ) -> Result<Vec<Disagreement>, SandboxError> {
        let mut out = Vec::new();
        for g in &self.groups {
            let text = list(&g.inputs);
            let ran = outputs_of(
                sandbox,
                candidate,
                &[],
                &g.spec,
                &text,
                &g.times,
                *sandbox.limits(),
            )
            .await?;
            for (i, (input, exp)) in g.inputs.iter().zip(&g.expected).enumerate() {
                let got = ran.outputs.get(i).cloned().unwrap_or(Output::NotRun);
                let agrees = match &got {
                    Output::Value(v) => {
                        let args: Value = serde_json::from_str(input).unwrap_or(Value::Null);
                        compare::check(v, exp, &args, g.spec.atol, g.spec.oracle).is_ok()
                    }
                    _ => false,
                };
                if !agrees {
                    let candidate = match (&got, &ran.error) {
                        (Output::NotRun, Some(why)) => why.clone(),
                        _ => got.render(),
                    };
                    out.push(Disagreement::new(input, &exp.render(), &candidate));
                }
            }
        }
        Ok(out)
    }
}

/// A JSON array of argument lists from their texts.
fn list(inputs: &[String]) -> String {
    format!("[{}]", inputs.join(","))
}

/// The reference's outputs on `inputs`, keeping the inputs it handles: a run that stops at an
/// input past its time limit is resumed after it.
async fn reference_outputs(
    sandbox: &Sandbox,
    spec: &DiffSpec,
    mut inputs: Vec<String>,
) -> Result<Result<Group, String>, SandboxError> {
    let base = Limits {
        stdout_cap: REFERENCE_OUTPUT_CAP,
        ..*sandbox.limits()
    };
    let mut group = Group {
        spec: spec.clone(),
        inputs: Vec::new(),
        expected: Vec::new(),
        times: Vec::new(),
    };
    for _ in 0..REFERENCE_ROUNDS {
        if inputs.is_empty() {
            break;
        }
        let zeros = vec![0.0; inputs.len()];
        let ran = outputs_of(
            sandbox,
            &spec.reference,
            &[],
            spec,
            &list(&inputs),
            &zeros,
            base,
        )
        .await?;
        if let Some(why) = ran.error {
            if group.inputs.is_empty() {
                return Ok(Err(format!("the reference: {why}")));
            }
            break;
        }
        let mut resume_at = None;
        for (i, out) in ran.outputs.iter().enumerate() {
            match out {
                Output::Value(v) if v.opaque_part().is_none() => {
                    group.inputs.push(inputs[i].clone());
                    group.expected.push(v.clone());
                    group.times.push(ran.times.get(i).copied().unwrap_or(0.0));
                }
                Output::TimedOut => {
                    resume_at = Some(i + 1);
                    break;
                }
                _ => {}
            }
        }
        let Some(at) = resume_at else { break };
        inputs.drain(..at.min(inputs.len()));
    }
    Ok(Ok(group))
}
