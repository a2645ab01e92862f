//! Python mutants, made by `mutate.py` from the reference's syntax tree: a trusted helper run in
//! the sandbox (only the sandbox crate starts processes; the script parses and compiles the
//! reference, never runs it), like the unit-test harness.
//!
//! The operators: arithmetic (`+ - * / // % **` and the bitwise ones swapped), comparisons (`<`
//! with `<=`, `==` with `!=`, `in` with `not in`, `is` with `is not`), boolean (`and` with `or`,
//! `not` removed), constants (integers +-1, `True` with `False`, strings emptied; docstrings and
//! f-strings left alone), boundaries (`range(a, b)` to `range(a, b - 1)` and `range(a + 1, b)`,
//! slice bounds +-1), returned values (`return x` to `return None` or a constant of `x`'s kind),
//! statements replaced by `pass`, and augmented assignments swapped (`+=` to `-=`). Only the part
//! after the task's completion prefix is mutated (the prompt's code is not the solution's). Each
//! mutant is the unparsed tree: mutants equal as text are one, and one that does not compile is
//! dropped. The order is a round robin over the operators, shuffled by a generator seeded with
//! the task's id, so the same task and `n` give the same mutants. [`mutants_in_place`] keeps the
//! source's own text (comments, layout) and rewrites only the changed node's span, checked to parse
//! to the mutated tree: the form a repository task's broken module takes (`repo::synth`).

use serde::Deserialize;
use serde_json::json;

use super::Mutant;
use codegym_sandbox::{ExecRequest, Limits, Sandbox, SandboxError};

/// The generator (`main.py` of its run).
pub const MUTATE_SOURCE: &str = include_str!("mutate.py");

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    mutants: Vec<Mutant>,
    #[serde(default)]
    error: Option<String>,
}

/// Up to `n` mutants of `source`, mutating from line `first_line` on. `Ok(Err(why))`: the source
/// does not parse; `Err`: the machinery failed.
pub async fn mutants(
    sandbox: &Sandbox,
    source: &str,
    first_line: usize,
    n: usize,
    seed: &str,
) -> Result<Result<Vec<Mutant>, String>, SandboxError> {
    generate(sandbox, source, (first_line, None), n, seed, false).await
}

/// [`mutants`] whose sources are `source` with only the changed span rewritten.
pub async fn mutants_in_place(
    sandbox: &Sandbox,
    source: &str,
    first_line: usize,
    n: usize,
    seed: &str,
) -> Result<Result<Vec<Mutant>, String>, SandboxError> {
    generate(sandbox, source, (first_line, None), n, seed, true).await
}

/// [`mutants_in_place`] of the lines `first..=last` only (a repository task's fix and its
/// surroundings).
pub async fn mutants_of_lines(
    sandbox: &Sandbox,
    source: &str,
    (first, last): (usize, usize),
    n: usize,
    seed: &str,
) -> Result<Result<Vec<Mutant>, String>, SandboxError> {
    generate(sandbox, source, (first, Some(last)), n, seed, true).await
}

async fn generate(
    sandbox: &Sandbox,
    source: &str,
    (first_line, last_line): (usize, Option<usize>),
    n: usize,
    seed: &str,
    in_place: bool,
) -> Result<Result<Vec<Mutant>, String>, SandboxError> {
    let config = json!({
        "source": source, "n": n, "seed": seed, "first_line": first_line,
        "last_line": last_line, "in_place": in_place
    });
    let base = *sandbox.limits();
    let req = ExecRequest {
        source: MUTATE_SOURCE.to_string(),
        stdin: Some(config.to_string().into_bytes()),
        limits: Some(Limits {
            cpu_ms: base.cpu_ms.max(20_000),
            wall_ms: base.wall_ms.max(60_000),
            stdout_cap: base.stdout_cap.max(32 << 20),
            ..base
        }),
        ..ExecRequest::default()
    };
    let result = sandbox.run(req).await?;
    let line = result.stdout.lines().next_back().unwrap_or("");
    match serde_json::from_str::<Answer>(line) {
        Ok(Answer {
            error: Some(why), ..
        }) => Ok(Err(why)),
        Ok(a) => Ok(Ok(a.mutants)),
        // The script is ours: a run that did not answer is the machinery's failure.
        Err(e) => Err(SandboxError::Setup {
            stage: "mutant generator",
            source: std::io::Error::other(format!(
                "{e} (exit {:?}, timed out {}, stderr: {})",
                result.exit_code,
                result.timed_out,
                result.stderr.chars().take(500).collect::<String>()
            )),
        }),
    }
}
