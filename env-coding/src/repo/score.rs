//! Scoring a patch in a fresh copy of a task's prepared state, against a patch that runs inside
//! the test process (pytest imports it) and so can act on the report and on the run itself.
//!
//! 1. `git apply` the patch (one that does not apply is a verdict of 0 with git's reason) and list
//!    what it changed (`git diff --name-status` against the base commit).
//! 2. The patch may not change how the tests run: its changes to [`protected`] paths (whatever
//!    loads code into pytest's process or configures it, and the task's test files) are undone
//!    before the tests run, and listed in the verdict's `dropped`. The rest of the patch is scored.
//! 3. The hidden tests are copied in, the test patch applied (its files are protected, so they
//!    are as in the prepared state), and the test command runs; its JUnit report is read.
//!    - No report, or one that is not JUnit: with changes of the patch's own in the copy, the
//!      patched code can cause it (`os._exit` before pytest writes, deleting the file), so it is a
//!      verdict of 0 with the reason; from the prepared state alone it is an infrastructure error.
//!    - The report must agree with the command's exit status (0 exactly when no test failed or
//!      errored), as pytest's does; a report claiming success under a failing exit (a forged
//!      rewrite after pytest wrote it) is a verdict of 0.
//!
//! 4. A task with a `reward_file` (Harbor's) is judged by the number its test command left there
//!    instead (copied out when the command's shell exits): `x` or `{"reward": x}`, `x` in [0, 1]; the
//!    reward is `x`, resolved when it is 1. A missing or bad reward follows the rule of a missing
//!    report. Its dir is a fresh, empty tmpfs in every run (`image::RootPaths`), so nothing an
//!    agent's command wrote there survives into scoring; the hidden tests go to the task's
//!    `tests_dir` when it names one (a tmpfs of the same kind), not into the repository.
//!
//! [`RepoScorer::test_run`] is steps 1-4 with every test's result ([`TestRun`]); the verdict is
//! judged from it ([`RepoScorer::score`]). The task synthesizer (`synth`) reads the whole run.

use std::collections::BTreeMap;

use codegym_sandbox::WorkspaceRun;

use super::junit::{self, TestStatus};
use super::{
    GIT_ENV, Prepared, RepoError, RepoScorer, RepoVerdict, failure, limits, missing, shell_quote,
};
use crate::tasks::RepoTask;

/// The scoring run's exit when the hidden tests could not be copied in (before any test ran).
const HIDDEN_NOT_ADDED: i32 = 97;
/// The scoring run's exit when the test patch did not apply over the patched repository (it
/// applies to the prepared state, checked at preparation: the patch is to blame).
const TEST_PATCH_NOT_APPLIED: i32 = 98;

/// File names that load code into the test process or configure pytest, wherever they are.
const CONFIG_NAMES: &[&str] = &[
    "conftest.py",
    "pytest.ini",
    ".pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    "sitecustomize.py",
    "usercustomize.py",
];

/// Top-level names that would shadow the test runner itself (the repository is on `sys.path`).
const RUNNER_MODULES: &[&str] = &["pytest", "_pytest", "pluggy", "py", "iniconfig"];

/// Whether the patch may not change `path`: a file of [`CONFIG_NAMES`], a `.pth` file, a module
/// shadowing the test runner, a hidden test, or a file of a test the task lists.
pub fn protected(task: &RepoTask, path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let top = path.split('/').next().unwrap_or(path);
    let top = top.strip_suffix(".py").unwrap_or(top);
    CONFIG_NAMES.contains(&name)
        || name.ends_with(".pth")
        || RUNNER_MODULES.contains(&top)
        || (task.tests_dir.is_none() && task.hidden_tests.contains_key(path))
        || task.test_patch_paths.iter().any(|p| p == path)
        || task
            .fail_to_pass
            .iter()
            .chain(&task.pass_to_pass)
            .any(|id| id.split("::").next() == Some(path))
}

/// The paths of `git apply --numstat -z`'s listing (`added\tdeleted\tpath\0`, a rename's two
/// paths as fields of their own).
fn patch_paths(numstat: &str) -> Vec<String> {
    numstat
        .split('\0')
        .map(|f| f.rsplit('\t').next().unwrap_or(f))
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// A patch's test run in a fresh copy (steps 1-3 of the module's doc).
#[derive(Debug, Clone, Default)]
pub struct TestRun {
    pub applied: bool,
    /// Why the tests did not run or left no report (the patch's own doing: a verdict of 0).
    pub reason: Option<String>,
    /// Every test case of the report by id.
    pub results: BTreeMap<String, TestStatus>,
    /// The JUnit report as written.
    pub report: Option<String>,
    /// A `reward_file` task's reward, as the test command wrote it.
    pub reward: Option<f64>,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub wall_ms: u64,
    /// The patch's changes to protected paths, undone before the tests ran.
    pub dropped: Vec<String>,
}

impl RepoScorer {
    /// Scores `patch` in a fresh copy of the prepared state (see the module's doc).
    pub async fn score(&self, prepared: &Prepared, patch: &str) -> Result<RepoVerdict, RepoError> {
        let task = &prepared.task;
        let run = self.test_run(prepared, patch).await?;
        let mut verdict = RepoVerdict {
            resolved: false,
            reward: 0.0,
            applied: run.applied,
            reason: run.reason.clone(),
            fail_to_pass: missing(&task.fail_to_pass),
            pass_to_pass: missing(&task.pass_to_pass),
            wall_ms: run.wall_ms,
            dropped: run.dropped,
        };
        if run.reason.is_some() {
            return Ok(verdict);
        }
        if task.reward_file.is_some() {
            let reward = run.reward.filter(|_| !run.timed_out).unwrap_or(0.0);
            verdict.resolved = reward == 1.0;
            verdict.reward = reward;
            verdict.reason = match (run.timed_out, verdict.resolved) {
                (true, _) => Some(wall_limit(task)),
                (false, false) => Some(format!("the reward file holds {reward}")),
                (false, true) => None,
            };
            return Ok(verdict);
        }
        let results = run.results;
        for (id, status) in verdict
            .fail_to_pass
            .iter_mut()
            .chain(verdict.pass_to_pass.iter_mut())
        {
            *status = results.get(id).copied().unwrap_or(TestStatus::Missing);
        }
        let not_passed: Vec<&String> = verdict
            .fail_to_pass
            .iter()
            .chain(verdict.pass_to_pass.iter())
            .filter(|(_, s)| **s != TestStatus::Passed)
            .map(|(id, _)| id)
            .collect();
        let failing = results
            .values()
            .any(|s| matches!(s, TestStatus::Failed | TestStatus::Error));
        let agrees = (run.exit_code == Some(0)) != failing;
        verdict.resolved = not_passed.is_empty() && !run.timed_out && agrees;
        verdict.reward = if verdict.resolved { 1.0 } else { 0.0 };
        verdict.reason = match (run.timed_out, not_passed.first(), agrees) {
            (true, _, _) => Some(wall_limit(task)),
            (false, Some(first), _) => Some(format!(
                "{} of the task's tests did not pass (first: {first})",
                not_passed.len()
            )),
            (false, None, false) => Some(format!(
                "the report disagrees with the test command's exit status ({:?}): {}",
                run.exit_code,
                if failing {
                    "it shows a failing test under a successful exit"
                } else {
                    "it shows no failing test under a failing exit"
                }
            )),
            (false, None, true) => None,
        };
        Ok(verdict)
    }

    /// Applies `patch` in a fresh copy of the prepared state, adds the hidden tests and runs the
    /// test command: every test's result. `reason` is set when the patch did not apply, the hidden
    /// tests could not be added, or the patched code left no report.
    pub async fn test_run(&self, prepared: &Prepared, patch: &str) -> Result<TestRun, RepoError> {
        let task = &prepared.task;
        let ws = self.episode(prepared)?;
        let mut run = TestRun {
            applied: true,
            ..TestRun::default()
        };
        let base = shell_quote(&prepared.base_commit);
        // What the patch changed, as (status, path); undoing the protected ones.
        let mut changed: Vec<(String, String)> = Vec::new();
        if !patch.trim().is_empty() {
            let request = WorkspaceRun {
                command: format!(
                    "{GIT_ENV}git apply --whitespace=nowarn \"$HOME/patch.diff\" || exit 1\n\
                     git apply --numstat -z \"$HOME/patch.diff\" > \"$HOME/touched\"\n\
                     git add -A && git diff --cached --no-renames --name-status -z {base} \
                     > \"$HOME/changed\"\n"
                ),
                files: vec![("patch.diff".into(), patch.as_bytes().to_vec())],
                fetch: vec!["changed".into(), "touched".into()],
                limits: Some(limits(task, task.limits.setup_wall_ms)),
                ..WorkspaceRun::default()
            };
            let (applied, fetched) = ws.run(request).await?;
            run.wall_ms += applied.wall_ms;
            if applied.exit_code != Some(0) {
                run.applied = false;
                run.reason = Some(format!("the patch does not apply: {}", failure(&applied)));
                return Ok(run);
            }
            let file = |name: &str| {
                let bytes = fetched.iter().find(|(n, _)| n == name).map(|(_, b)| b);
                String::from_utf8_lossy(bytes.map_or(&[][..], |b| &b[..])).into_owned()
            };
            let fields: Vec<String> = file("changed").split('\0').map(str::to_string).collect();
            changed = fields
                .chunks(2)
                .filter(|c| c.len() == 2 && !c[1].is_empty())
                .map(|c| (c[0].clone(), c[1].clone()))
                .collect();
            // The paths the patch itself names: git's listing leaves out what `.gitignore` hides
            // (a patch can add both a conftest.py and the line that ignores it).
            for path in patch_paths(&file("touched")) {
                if !changed.iter().any(|(_, p)| *p == path) {
                    changed.push(("?".into(), path));
                }
            }
        }
        let mut undo = String::new();
        for (status, path) in &changed {
            if !protected(task, path) {
                continue;
            }
            let quoted = shell_quote(path);
            undo.push_str(&match status.as_str() {
                "A" => format!("rm -rf -- {quoted}\n"),
                _ => {
                    format!("rm -rf -- {quoted}; git checkout -q {base} -- {quoted} 2>/dev/null\n")
                }
            });
            run.dropped.push(path.clone());
        }
        let own_changes = changed.len() > run.dropped.len();
        let mut files: Vec<(String, Vec<u8>)> = task
            .hidden_tests
            .iter()
            .map(|(path, bytes)| (format!("hidden/{path}"), bytes.clone()))
            .collect();
        // The hidden tests replace whatever the patch left at their paths (as a test patch's files
        // would); a patch that makes that impossible fails the task, it is no infrastructure error.
        let mut add = String::new();
        if let (Some(dir), false) = (&task.tests_dir, task.hidden_tests.is_empty()) {
            add = format!(
                "cp -R \"$HOME/hidden/.\" {} || exit {HIDDEN_NOT_ADDED}\n",
                shell_quote(dir)
            );
        } else if !task.hidden_tests.is_empty() {
            let paths: Vec<String> = task.hidden_tests.keys().map(|p| shell_quote(p)).collect();
            add = format!(
                "{{ rm -rf -- {} && cp -R \"$HOME/hidden/.\" . ; }} || exit {HIDDEN_NOT_ADDED}\n",
                paths.join(" ")
            );
        }
        let mut apply = String::new();
        if let Some(test_patch) = &task.test_patch {
            files.push(("test.diff".into(), test_patch.as_bytes().to_vec()));
            apply = format!(
                "git apply --whitespace=nowarn \"$HOME/test.diff\" || exit {TEST_PATCH_NOT_APPLIED}\n"
            );
        }
        // A reward file lives in a tmpfs of the run: copied out as the shell exits, however the
        // test command ends it.
        let (keep, output) = match &task.reward_file {
            Some(file) => (
                format!(
                    "trap 'cp -- {} \"$HOME/reward\" 2>/dev/null' EXIT\n",
                    shell_quote(file)
                ),
                "reward",
            ),
            None => (String::new(), "junit.xml"),
        };
        let command = format!(
            "{GIT_ENV}{undo}{add}{apply}{keep}\
             export CODEGYM_JUNIT=\"$HOME/junit.xml\"\n{}\n",
            task.test_command
        );
        let request = WorkspaceRun {
            command,
            files,
            fetch: vec![output.into()],
            limits: Some(limits(task, task.limits.test_wall_ms)),
            site_dir: prepared.site_dir.clone(),
            ..WorkspaceRun::default()
        };
        let (tested, fetched) = ws.run(request).await?;
        run.wall_ms += tested.wall_ms;
        run.exit_code = tested.exit_code;
        run.timed_out = tested.timed_out;
        // The one branch on the verdict's kind: what the run left, read.
        let read = match (fetched.into_iter().next(), &task.reward_file) {
            (None, _) => None,
            (Some((_, bytes)), Some(_)) => Some(read_reward(&bytes).map(|r| run.reward = Some(r))),
            (Some((_, bytes)), None) => {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let parsed = junit::parse(&text);
                run.report = Some(text);
                Some(parsed.map(|r| run.results = r).map_err(|e| e.to_string()))
            }
        };
        match (read, tested.timed_out) {
            (Some(Ok(())), _) | (_, true) => {}
            (None, false) if tested.exit_code == Some(HIDDEN_NOT_ADDED) => {
                run.reason = Some(format!(
                    "the hidden tests cannot be added to the patched repository: {}",
                    failure(&tested)
                ));
                return Ok(run);
            }
            (None, false) if tested.exit_code == Some(TEST_PATCH_NOT_APPLIED) => {
                run.reason = Some(format!(
                    "the test patch does not apply to the patched repository: {}",
                    failure(&tested)
                ));
                return Ok(run);
            }
            (read, false) => {
                let detail = match read {
                    Some(Err(e)) => e,
                    _ => failure(&tested),
                };
                let (task_id, reward_file) = (task.id.clone(), task.reward_file.clone());
                run.reason = Some(match (&reward_file, own_changes) {
                    (None, false) => {
                        return Err(RepoError::Report {
                            task: task_id,
                            detail,
                        });
                    }
                    (Some(file), false) => {
                        let file = file.clone();
                        return Err(RepoError::Reward {
                            task: task_id,
                            file,
                            detail,
                        });
                    }
                    (None, true) => format!(
                        "the test command left no JUnit report with the patch applied: {detail}"
                    ),
                    (Some(file), true) => format!(
                        "the test command left no reward in {file} with the patch applied: {detail}"
                    ),
                });
                return Ok(run);
            }
        }
        Ok(run)
    }
}

fn wall_limit(task: &RepoTask) -> String {
    format!(
        "the test command hit its wall limit ({} ms)",
        task.limits.test_wall_ms
    )
}

/// A reward file's number: `x` or `{"reward": x}` (Harbor's `reward.txt` and `reward.json`), `x`
/// in [0, 1].
fn read_reward(bytes: &[u8]) -> Result<f64, String> {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    let value = match text.parse::<f64>() {
        Ok(x) => Some(x),
        Err(_) => serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| v.get("reward").and_then(serde_json::Value::as_f64)),
    };
    match value {
        Some(x) if (0.0..=1.0).contains(&x) => Ok(x),
        Some(x) => Err(format!("the reward {x} is not in [0, 1]")),
        None => Err(format!(
            "{:?} is neither a number nor {{\"reward\": NUMBER}}",
            text.chars().take(80).collect::<String>()
        )),
    }
}
