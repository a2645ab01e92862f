//! The mutation part of an audit's report: per task (mutants, killed, survivors, probably
//! equivalent, the score and the surviving mutants' diffs), per set (the score's distribution and
//! the tasks below the gate), and the summary lines `codegym audit` prints.

use serde::Serialize;

use crate::inputs::Disagreement;
use codegym_sandbox::lang::Language;

/// Whether a task could be scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MutationStatus {
    Scored,
    /// No reference solution: nothing to mutate (never a score of 0 or 1).
    NoReference,
    /// The reference itself is not solved: the task is broken, its tests are not measured.
    ReferenceFails,
    /// The reference has nothing to mutate (or does not parse).
    NoMutants,
}

/// A mutant the tests do not kill.
#[derive(Debug, Clone, Serialize)]
pub struct SurvivingMutant {
    pub operator: String,
    /// Its line in the reference.
    pub line: usize,
    pub what: String,
    /// Its diff against the reference (`-` and `+` lines).
    pub diff: Vec<String>,
    pub reward: f64,
    /// It agrees with the reference on every derived input: probably equivalent, not a weakness.
    pub probably_equivalent: bool,
    /// An input on which it disagrees with the reference: what a stronger test would check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disagreement: Option<Disagreement>,
}

/// One task's mutation result.
#[derive(Debug, Clone, Serialize)]
pub struct TaskMutation {
    pub task_id: String,
    pub language: Language,
    pub status: MutationStatus,
    /// Why the task is not scored, or what limited its score.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Mutants scored (killed + survivors + equivalent).
    pub mutants: usize,
    pub killed: usize,
    /// Surviving mutants not found equivalent: the tests' weaknesses.
    pub survivors: usize,
    /// Surviving mutants that agree with the reference on every derived input.
    pub equivalent: usize,
    /// `killed / (mutants - equivalent)`; `None` when not scored.
    pub mutation_score: Option<f64>,
    /// Mutants dropped because they do not compile (compiled languages).
    pub uncompilable: usize,
    /// Inputs the survivors were compared with the reference on.
    pub equivalence_inputs: usize,
    /// Why survivors could not be compared with the reference (then none is called equivalent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inputs_unavailable: Option<String>,
    /// Every surviving mutant, the probably equivalent ones included (flagged).
    pub surviving: Vec<SurvivingMutant>,
}

impl TaskMutation {
    /// No mutant yet, no note.
    pub fn empty(task_id: &str, language: Language, status: MutationStatus) -> Self {
        TaskMutation {
            task_id: task_id.to_string(),
            language,
            status,
            note: None,
            mutants: 0,
            killed: 0,
            survivors: 0,
            equivalent: 0,
            mutation_score: None,
            uncompilable: 0,
            equivalence_inputs: 0,
            inputs_unavailable: None,
            surviving: Vec::new(),
        }
    }

    /// A task that is not scored, and why.
    pub fn unscored(
        task_id: &str,
        language: Language,
        status: MutationStatus,
        note: String,
    ) -> Self {
        TaskMutation {
            note: Some(note),
            ..TaskMutation::empty(task_id, language, status)
        }
    }
}

/// The scores' distribution over a set's scored tasks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Distribution {
    pub tasks: usize,
    pub min: f64,
    pub q1: f64,
    pub median: f64,
    pub q3: f64,
    pub max: f64,
    pub mean: f64,
}

impl Distribution {
    /// Quartiles by linear interpolation between order statistics (numpy's default).
    pub fn of(scores: &[f64]) -> Option<Distribution> {
        if scores.is_empty() {
            return None;
        }
        let mut s = scores.to_vec();
        s.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let pos = q * (s.len() - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
        };
        Some(Distribution {
            tasks: s.len(),
            min: s[0],
            q1: at(0.25),
            median: at(0.5),
            q3: at(0.75),
            max: s[s.len() - 1],
            mean: s.iter().sum::<f64>() / s.len() as f64,
        })
    }
}

/// The mutation part of an audit.
#[derive(Debug, Clone, Serialize)]
pub struct MutationReport {
    /// Mutants asked for per task (`--mutants`).
    pub mutants_per_task: usize,
    /// The gate (`--min-mutation-score`).
    pub min_mutation_score: Option<f64>,
    pub tasks: Vec<TaskMutation>,
    /// Over the scored tasks.
    pub distribution: Option<Distribution>,
    /// Scored tasks whose score is below the gate.
    pub below_gate: Vec<String>,
    pub no_reference: Vec<String>,
    pub reference_fails: Vec<String>,
    /// Mutants scored in all, and the wall time of the mutation part.
    pub mutants_scored: usize,
    pub seconds: f64,
}

impl MutationReport {
    pub fn new(
        mutants_per_task: usize,
        min_mutation_score: Option<f64>,
        tasks: Vec<TaskMutation>,
        seconds: f64,
    ) -> Self {
        let ids = |status| {
            tasks
                .iter()
                .filter(|t| t.status == status)
                .map(|t| t.task_id.clone())
                .collect::<Vec<_>>()
        };
        let scores: Vec<f64> = tasks.iter().filter_map(|t| t.mutation_score).collect();
        let below_gate = tasks
            .iter()
            .filter(
                |t| matches!((t.mutation_score, min_mutation_score), (Some(s), Some(g)) if s < g),
            )
            .map(|t| t.task_id.clone())
            .collect();
        MutationReport {
            mutants_per_task,
            min_mutation_score,
            distribution: Distribution::of(&scores),
            below_gate,
            no_reference: ids(MutationStatus::NoReference),
            reference_fails: ids(MutationStatus::ReferenceFails),
            mutants_scored: tasks.iter().map(|t| t.mutants).sum(),
            seconds,
            tasks,
        }
    }

    /// The summary `codegym audit` prints: each task with surviving non-equivalent mutants (and
    /// their diffs), the unscored ones, then the distribution and the gate.
    pub fn summary_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for t in &self.tasks {
            match (t.status, t.mutation_score) {
                (MutationStatus::Scored, Some(score)) if t.survivors > 0 => {
                    let below = self.below_gate.contains(&t.task_id);
                    out.push(format!(
                        "{} {}: mutation score {score:.2} ({} of {} killed, {} survived, {} probably equivalent)",
                        if below { "WEAK TESTS" } else { "SURVIVORS" },
                        t.task_id,
                        t.killed,
                        t.mutants - t.equivalent,
                        t.survivors,
                        t.equivalent
                    ));
                    for m in t
                        .surviving
                        .iter()
                        .filter(|m| !m.probably_equivalent)
                        .take(3)
                    {
                        out.push(format!("  line {} ({}: {})", m.line, m.operator, m.what));
                        out.extend(m.diff.iter().take(4).map(|d| format!("    {d}")));
                    }
                }
                (MutationStatus::Scored, _) => {}
                (status, _) => out.push(format!(
                    "NOT SCORED {}: {}",
                    t.task_id,
                    t.note.as_deref().unwrap_or(match status {
                        MutationStatus::NoReference => "no reference",
                        _ => "not scored",
                    })
                )),
            }
        }
        let rate = self.mutants_scored as f64 / self.seconds.max(1e-9);
        match &self.distribution {
            Some(d) => out.push(format!(
                "mutation score over {} task(s): min {:.2}, q1 {:.2}, median {:.2}, q3 {:.2}, max {:.2}, mean {:.2} ({} mutants in {:.1} s, {rate:.1}/s)",
                d.tasks, d.min, d.q1, d.median, d.q3, d.max, d.mean, self.mutants_scored, self.seconds
            )),
            None => out.push("mutation score: no task could be scored".into()),
        }
        let unscored = self
            .tasks
            .iter()
            .filter(|t| t.mutation_score.is_none())
            .count();
        if unscored > 0 {
            out.push(format!(
                "{unscored} task(s) not scored ({} no reference, {} reference fails)",
                self.no_reference.len(),
                self.reference_fails.len()
            ));
        }
        if let Some(gate) = self.min_mutation_score {
            out.push(if self.below_gate.is_empty() {
                format!("every scored task reaches mutation score {gate}")
            } else {
                format!(
                    "{} task(s) below mutation score {gate}: {}",
                    self.below_gate.len(),
                    self.below_gate.join(", ")
                )
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quartiles_interpolate() {
        let d = Distribution::of(&[1.0, 0.0, 0.5, 0.25, 0.75]).unwrap();
        assert_eq!(
            (d.min, d.q1, d.median, d.q3, d.max),
            (0.0, 0.25, 0.5, 0.75, 1.0)
        );
        assert_eq!(d.mean, 0.5);
        let d = Distribution::of(&[0.2, 0.4]).unwrap();
        assert!((d.median - 0.3).abs() < 1e-12 && (d.q1 - 0.25).abs() < 1e-12);
        assert_eq!(Distribution::of(&[]), None);
    }
}
