//! Scoring completion files (`codegym evaluate`) and checking reference solutions
//! (`codegym tasks check`), as library functions the CLI wraps. Both score through the one engine,
//! [`Scorer::score`], exactly as the env's steps and `Evaluate` do.
//!
//! Samples follow the HumanEval convention: JSONL lines `{"task_id": ..., "completion": ...}` where the
//! completion continues the task's prompt (a task's `completion_prefix`). pass@k is
//! [`trajectory::mean_pass_at_k`] (HumanEval's estimator and rule: a k is reported only when every
//! task has at least k samples). Results and metrics files are written with
//! [`trajectory::atomic`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use serde::Serialize;

use crate::reward::run::{EvalOptions, Program};
use crate::scoring::{Scorer, Submission};
use crate::tasks::{Task, TaskSet};
use env_core::EnvError;

/// Executions kept in flight by the drivers here; the sandbox's own permits bound the real
/// concurrency, this only bounds memory on huge sample files.
const IN_FLIGHT: usize = 256;

/// Why an evaluation could not run.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{path}: no samples")]
    Empty { path: PathBuf },
    #[error("task {task_id:?}: {error}")]
    Score { task_id: String, error: EnvError },
}

/// One completion to score.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub task_id: String,
    pub completion: String,
    /// Line in the samples file (1-based).
    pub line: usize,
}

/// Reads a samples JSONL file (optionally gzip-compressed); every task id must exist in `tasks`.
pub fn read_samples(path: &Path, tasks: &TaskSet) -> Result<Vec<Sample>, EvalError> {
    let io = |source| EvalError::Io {
        path: path.to_path_buf(),
        source,
    };
    let bytes = crate::tasks::read_maybe_gzip(path).map_err(io)?;
    let parse = |line, message| EvalError::Parse {
        path: path.to_path_buf(),
        line,
        message,
    };
    let text = String::from_utf8(bytes).map_err(|e| parse(0, format!("not UTF-8: {e}")))?;
    let mut samples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| parse(i + 1, format!("invalid JSON: {e}")))?;
        let task_id = match v.get("task_id") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) => n.to_string(),
            _ => return Err(parse(i + 1, "missing task_id (a string or number)".into())),
        };
        let Some(completion) = v.get("completion").and_then(|c| c.as_str()) else {
            return Err(parse(i + 1, "missing completion (a string)".into()));
        };
        if tasks.get(&task_id).is_none() {
            return Err(parse(
                i + 1,
                format!("unknown task_id {task_id:?} (not in {})", tasks.source()),
            ));
        }
        samples.push(Sample {
            task_id,
            completion: completion.to_string(),
            line: i + 1,
        });
    }
    if samples.is_empty() {
        return Err(EvalError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(samples)
}

/// The verdict on one sample (one line of the results file).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SampleResult {
    pub task_id: String,
    pub completion: String,
    pub passed: bool,
    pub reward: f64,
    pub reward_breakdown: serde_json::Value,
}

/// Scores every sample, in parallel, results in input order. A sample that cannot be scored (the
/// machinery failed, or the deployment lacks what its task needs) fails the whole evaluation: a
/// pass@k over the samples that happened to run would mislead.
pub async fn evaluate_samples(
    scorer: &Scorer,
    tasks: &TaskSet,
    samples: Vec<Sample>,
    opts: EvalOptions,
) -> Result<Vec<SampleResult>, EvalError> {
    let results: Vec<Result<SampleResult, EvalError>> = futures::stream::iter(samples)
        .map(|s| async move {
            let Some(task) = tasks.get(&s.task_id) else {
                return Err(EvalError::Parse {
                    path: PathBuf::from(tasks.source()),
                    line: s.line,
                    message: format!("unknown task_id {:?}", s.task_id),
                });
            };
            let program = Program::new(task.program_from_completion(&s.completion));
            let outcome = score(scorer, task, program, opts).await?;
            Ok(SampleResult {
                task_id: s.task_id,
                completion: s.completion,
                passed: outcome.solved,
                reward: outcome.reward,
                reward_breakdown: outcome.breakdown(),
            })
        })
        .buffered(IN_FLIGHT)
        .collect()
        .await;
    results.into_iter().collect()
}

/// pass@k over the tasks of `results`, keyed `"pass@k"`, for every `k` of `ks` that the one
/// aggregation ([`trajectory::aggregate`], also behind the rollout summary and `codegym report`)
/// reports: a `k` above some task's sample count is omitted (no key), as in HumanEval's
/// `evaluate_functional_correctness`. Every scored sample is a sample (none is an infrastructure
/// failure: a sample that could not be scored fails the whole evaluation).
pub fn pass_at_ks(results: &[SampleResult], ks: &[usize]) -> BTreeMap<String, f64> {
    let tally = trajectory::Tally::of(results.iter().map(|r| trajectory::Outcome {
        task_id: &r.task_id,
        sampled: true,
        solved: r.passed,
        final_reward: r.reward,
        total_reward: r.reward,
        cross_checks: Default::default(),
    }));
    let ks: Vec<u64> = ks.iter().map(|&k| k as u64).collect();
    tally.aggregate_with_ks(&ks).pass_at_k
}

/// HumanEval's default results path: `<samples>_results.jsonl`.
pub fn default_results_path(samples: &Path) -> PathBuf {
    let mut s = samples.as_os_str().to_owned();
    s.push("_results.jsonl");
    PathBuf::from(s)
}

/// Writes `results` as JSONL to `path` atomically ([`trajectory::atomic::write_atomic`]).
pub fn write_results(path: &Path, results: &[SampleResult]) -> Result<(), EvalError> {
    let mut body = Vec::new();
    for r in results {
        // Serializing plain data into a Vec cannot fail.
        if let Ok(line) = serde_json::to_vec(r) {
            body.extend_from_slice(&line);
            body.push(b'\n');
        }
    }
    trajectory::atomic::write_atomic(path, &body).map_err(|source| EvalError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The verdict on one task's reference solution.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckResult {
    pub task_id: String,
    pub passed: bool,
    pub reward: f64,
    /// The engine's breakdown ([`crate::reward::RewardOutcome::breakdown`]); null when the task
    /// could not be scored.
    pub reward_breakdown: serde_json::Value,
    /// Why it failed (no reference solution, failing components).
    pub error: Option<String>,
}

/// Scores `program` (in the task's language) for `task`: the one engine's verdict.
async fn score(
    scorer: &Scorer,
    task: &Arc<Task>,
    program: Program,
    opts: EvalOptions,
) -> Result<crate::reward::RewardOutcome, EvalError> {
    let program = program.in_language(task.language);
    scorer
        .score(task.clone(), Submission::ScoreOnly(program), opts)
        .await
        .map(|scored| scored.outcome)
        .map_err(|error| EvalError::Score {
            task_id: task.id.clone(),
            error,
        })
}

/// Runs every task's reference solution through its reward spec, in parallel, in task order. A
/// task the deployment cannot score (its language's toolchain or its packages are missing) fails
/// with the reason; a failure of the machinery fails the whole check.
pub async fn check_tasks(
    scorer: &Scorer,
    tasks: &TaskSet,
    opts: EvalOptions,
) -> Result<Vec<CheckResult>, EvalError> {
    let results: Vec<Result<CheckResult, EvalError>> = futures::stream::iter(tasks.iter())
        .map(|task| async move {
            let Some(reference) = &task.reference_solution else {
                return Ok(CheckResult {
                    task_id: task.id.clone(),
                    passed: false,
                    reward: 0.0,
                    reward_breakdown: serde_json::Value::Null,
                    error: Some("no reference solution".into()),
                });
            };
            let outcome = match score(scorer, task, Program::new(reference.clone()), opts).await {
                Ok(outcome) => outcome,
                Err(EvalError::Score {
                    error: EnvError::FailedPrecondition(reason),
                    ..
                }) => {
                    return Ok(CheckResult {
                        task_id: task.id.clone(),
                        passed: false,
                        reward: 0.0,
                        reward_breakdown: serde_json::Value::Null,
                        error: Some(reason),
                    });
                }
                Err(e) => return Err(e),
            };
            let failing: Vec<String> = outcome
                .components
                .iter()
                .filter(|c| c.score < 1.0)
                .map(|c| format!("{} scored {:.3}: {}", c.kind, c.score, c.detail))
                .collect();
            Ok(CheckResult {
                task_id: task.id.clone(),
                passed: outcome.solved,
                reward: outcome.reward,
                reward_breakdown: outcome.breakdown(),
                error: (!failing.is_empty()).then(|| failing.join("; ")),
            })
        })
        .buffered(IN_FLIGHT)
        .collect()
        .await;
    results.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_at_ks_skips_k_above_the_sample_count() {
        let r = |id: &str, passed| SampleResult {
            task_id: id.into(),
            completion: String::new(),
            passed,
            reward: 0.0,
            reward_breakdown: serde_json::Value::Null,
        };
        let results = vec![r("a", true), r("a", false), r("b", false), r("b", false)];
        let m = pass_at_ks(&results, &[1, 2, 10]);
        assert_eq!(m.len(), 2);
        assert!((m["pass@1"] - 0.25).abs() < 1e-12);
        assert!((m["pass@2"] - 0.5).abs() < 1e-12);
    }

    #[test]
    fn results_file_and_default_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.jsonl");
        let result = SampleResult {
            task_id: "a".into(),
            completion: "x".into(),
            passed: true,
            reward: 1.0,
            reward_breakdown: serde_json::Value::Null,
        };
        write_results(&p, std::slice::from_ref(&result)).unwrap();
        let line = std::fs::read_to_string(&p).unwrap();
        assert_eq!(line.lines().count(), 1);
        assert!(line.contains(r#""task_id":"a""#), "{line}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert_eq!(
            default_results_path(Path::new("x/s.jsonl")),
            PathBuf::from("x/s.jsonl_results.jsonl")
        );
        let err = write_results(&dir.path().join("missing/out"), &[result]).unwrap_err();
        assert!(err.to_string().contains("missing/out"), "{err}");
    }
}
