//! `codegym rescore` and verdict provenance end to end: real rollouts (the real coding env and
//! sandbox, the fake model answering from a script) over task files written here, rescored by the
//! real binary. A rollout's rewards come back exactly when nothing changed; a changed reward spec
//! and a changed prompt are each explained; `--repeat` finds a flaky task and spares a
//! deterministic one; an old file without provenance and bad inputs are handled.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;
#[path = "support/rollout_util.rs"]
mod rollout_util;

use std::path::{Path, PathBuf};

use fake_llm::{FakeLlm, FakeScript, Reply, Rule};
use rollout_util::{records, rollout_args};
use serde_json::{Value, json};
use trajectory::record::{DriftReason, EnvStepRecord, TrajectoryRecord};

/// A native task line: `id`, its prompt, one `contains` check (and how deterministic it is).
fn task(id: &str, prompt: &str, expected: &str, deterministic: bool) -> Value {
    json!({"id": id, "prompt": prompt, "deterministic": deterministic,
           "reward": {"version": 1, "components": [{"type": "contains", "text": expected}]}})
}

fn write_tasks(path: &Path, tasks: &[Value]) {
    let mut text = String::from("{\"schema_version\": 1, \"name\": \"rescore-test\"}\n");
    for t in tasks {
        text.push_str(&format!("{t}\n"));
    }
    std::fs::write(path, text).unwrap();
}

/// The fake model: for each `(prompt, program)`, a reply with the program.
fn model(answers: &[(&str, &str)]) -> FakeScript {
    FakeScript {
        rules: answers
            .iter()
            .map(|(prompt, program)| Rule {
                prompt_contains: Some(prompt.to_string()),
                turn: None,
                reply: Reply::code(program),
            })
            .collect(),
        ..FakeScript::default()
    }
}

/// `codegym ARGS`: exit code, stdout, stderr.
async fn codegym(args: &[&str]) -> (i32, String, String) {
    codegym_bin::finish(codegym_bin::spawn(args)).await
}

/// A rollout of `samples` samples of `ids` over the task file `tasks`, answered by `script`.
async fn rollout(
    dir: &Path,
    tasks: &Path,
    ids: &[&str],
    samples: u32,
    script: FakeScript,
) -> PathBuf {
    let server = FakeLlm::start(script).await.unwrap();
    let out = dir.join("run.jsonl");
    let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    let mut args = rollout_args(&server.base_url(), &ids, samples, &out);
    args.extend(["--tasks".to_string(), tasks.display().to_string()]);
    let (code, _, stderr) = codegym_bin::finish(codegym_bin::spawn(&args)).await;
    assert_eq!(code, 0, "{stderr}");
    out
}

/// `codegym rescore IN -o OUT ARGS`: exit code, the rescored records, the summary and stdout.
async fn rescore(
    input: &Path,
    out: &Path,
    args: &[&str],
) -> (i32, Vec<TrajectoryRecord>, Value, String) {
    let mut all = vec![
        "rescore",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    all.extend(args);
    let (code, stdout, stderr) = codegym(&all).await;
    assert!(code == 0 || code == 1, "{stderr}");
    let summary_path = format!("{}.rescore.json", out.display());
    let summary = serde_json::from_str(&std::fs::read_to_string(summary_path).unwrap()).unwrap();
    (code, records(out), summary, stdout)
}

/// Every rescored step of `records`.
fn rescored(records: &[TrajectoryRecord]) -> Vec<(&TrajectoryRecord, &EnvStepRecord)> {
    records
        .iter()
        .flat_map(|r| {
            r.turns
                .iter()
                .flat_map(move |t| t.env_steps.iter().map(move |s| (r, s)))
        })
        .filter(|(_, s)| s.rescore.is_some())
        .collect()
}

/// The version the sandbox's interpreter reports, asked here independently of codegym.
#[allow(clippy::disallowed_methods)] // the test asks the interpreter codegym resolves
fn python_version() -> String {
    let python = std::env::var("CODEGYM_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(python)
        .args(["-c", "import sys; print(sys.version.split()[0])"])
        .output()
        .unwrap();
    format!("Python {}", String::from_utf8_lossy(&out.stdout).trim())
}

const SQUARES: &str = "Print the sum of the squares of 1..10 as `Result: N`.";
const HELLO: &str = "Print exactly `Hello`.";
const TWICE: &str = "Print 2 * 21.";

fn tasks_v1() -> Vec<Value> {
    vec![
        task("squares", SQUARES, "Result: 385", true),
        task("hello", HELLO, "Hello", true),
        task("twice", TWICE, "42", true),
    ]
}

fn answers() -> FakeScript {
    model(&[
        (
            SQUARES,
            "print(f'Result: {sum(i * i for i in range(1, 11))}')",
        ),
        (HELLO, "print('Hello')"),
        (TWICE, "print(41)"),
    ])
}

/// A rollout of `samples` samples of the three tasks of [`tasks_v1`], answered by [`answers`].
async fn rollout_of_three(dir: &Path, samples: u32) -> PathBuf {
    let tasks = dir.join("tasks.jsonl");
    write_tasks(&tasks, &tasks_v1());
    let ids = ["squares", "hello", "twice"];
    rollout(dir, &tasks, &ids, samples, answers()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_changed_reproduces_every_reward_and_every_step_carries_provenance() {
    let dir = tempfile::tempdir().unwrap();
    let run = rollout_of_three(dir.path(), 2).await;
    let recorded = records(&run);
    assert_eq!(recorded.len(), 6);
    let python = python_version();
    // The codegym that scored: its version and the commit it was built from.
    #[allow(clippy::disallowed_methods)] // asks git, not a program of a run
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("git");
    let built_from = format!(
        "{}+{}",
        env!("CARGO_PKG_VERSION"),
        String::from_utf8_lossy(&commit.stdout).trim()
    );
    for r in &recorded {
        for s in r.turns.iter().flat_map(|t| &t.env_steps) {
            let p = s
                .provenance
                .as_ref()
                .expect("every scored step carries provenance");
            assert!(
                p.task_hash.starts_with("sha256:") && p.task_hash.len() == 71,
                "{p:?}"
            );
            assert!(p.reward_spec_hash.starts_with("sha256:") && p.reward_spec_hash != p.task_hash);
            assert_eq!(p.reward_spec_version, 1);
            assert_eq!(p.language, "python");
            assert_eq!(p.toolchain, python);
            assert_eq!(p.codegym_version, built_from);
            assert!(
                ["warm fork", "fresh"].contains(&p.sandbox_backend.as_str()),
                "{p:?}"
            );
            assert!(
                !p.isolation_level.is_empty() && p.limits.cpu_ms > 0 && p.limits.memory_bytes > 0
            );
            assert_eq!(s.info["provenance"], serde_json::to_value(p).unwrap());
        }
    }
    // The same task in another sample has the same provenance.
    let first = |id: &str| {
        recorded
            .iter()
            .filter(|r| r.task_id == id)
            .map(|r| r.turns[0].env_steps[0].provenance.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(first("hello")[0], first("hello")[1]);
    assert_ne!(
        first("hello")[0].as_ref().unwrap().task_hash,
        first("squares")[0].as_ref().unwrap().task_hash
    );

    // The task file is the rollout's (recorded in its env kwargs): no --tasks needed.
    let out = dir.path().join("rescored.jsonl");
    let (code, new, summary, stdout) = rescore(&run, &out, &["--turns", "all"]).await;
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(summary["changed"], 0, "{summary}");
    assert_eq!(summary["errors"], 0, "{summary}");
    assert_eq!(
        summary["unchanged"].as_u64().unwrap() as usize,
        rescored(&new).len()
    );
    assert_eq!(summary["unchanged_drift"], json!({}), "{summary}");
    assert!(stdout.contains("0 changed"), "{stdout}");
    assert_eq!(new.len(), recorded.len());
    for (old, r) in recorded.iter().zip(&new) {
        assert_eq!(old.episode_id, r.episode_id);
        assert_eq!(old.final_reward, r.final_reward);
        assert_eq!(old.total_reward, r.total_reward);
        assert_eq!(old.solved, r.solved);
        let back = r.rescore.expect("the record keeps what was recorded");
        assert_eq!(back.recorded_final_reward, old.final_reward);
    }
    let steps = rescored(&new);
    assert_eq!(
        steps.len(),
        recorded
            .iter()
            .map(|r| r.turns.iter().map(|t| t.env_steps.len()).sum::<usize>())
            .sum::<usize>()
    );
    for (_, s) in steps {
        let rs = s.rescore.as_ref().unwrap();
        assert_eq!(rs.recorded_reward, s.reward);
        assert!(
            !rs.changed && rs.reasons.is_empty() && rs.error.is_none(),
            "{rs:?}"
        );
        assert_eq!(rs.recorded_provenance, s.provenance);
    }
    // The rescored file is a dataset like any other: `export` reads it and carries provenance.
    let rl = dir.path().join("rl.jsonl");
    let (code, _, stderr) = codegym(&[
        "export",
        "--in",
        out.to_str().unwrap(),
        "--format",
        "rl",
        "--out",
        rl.to_str().unwrap(),
    ])
    .await;
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<Value> = std::fs::read_to_string(&rl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!rows.is_empty());
    for row in rows {
        let p: Value =
            serde_json::from_str(row["provenance_json"].as_str().expect("provenance")).unwrap();
        assert_eq!(p["toolchain"], json!(python));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_reward_spec_and_a_changed_prompt_are_each_explained() {
    let dir = tempfile::tempdir().unwrap();
    let run = rollout_of_three(dir.path(), 1).await;
    // Now: `squares` checks another number (its reward spec), `hello` asks in other words (the
    // task, not its spec), `twice` is as it was.
    let changed = dir.path().join("tasks-now.jsonl");
    write_tasks(
        &changed,
        &[
            task("squares", SQUARES, "Result: 386", true),
            task("hello", "Print `Hello`, nothing else.", "Hello", true),
            task("twice", TWICE, "42", true),
        ],
    );
    let out = dir.path().join("rescored.jsonl");
    let (code, new, summary, stdout) =
        rescore(&run, &out, &["--tasks", changed.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{stdout}");
    let step = |id: &str| {
        let r = new.iter().find(|r| r.task_id == id).unwrap();
        (
            r,
            rescored(std::slice::from_ref(r))[0]
                .1
                .rescore
                .clone()
                .unwrap(),
        )
    };
    let (squares, rs) = step("squares");
    assert!(rs.changed && rs.recorded_reward == 1.0, "{rs:?}");
    assert_eq!(rs.reasons, vec![DriftReason::RewardSpecChanged]);
    assert_eq!((squares.final_reward, squares.solved), (0.0, false));
    assert_eq!(squares.rescore.unwrap().recorded_final_reward, 1.0);
    let (_, rs) = step("hello");
    assert!(!rs.changed, "{rs:?}");
    assert_eq!(rs.reasons, vec![DriftReason::TaskChanged]);
    let (_, rs) = step("twice");
    assert!(!rs.changed && rs.reasons.is_empty(), "{rs:?}");
    assert_eq!(summary["changed"], 1, "{summary}");
    assert_eq!(summary["reasons"], json!({"reward_spec_changed": 1}));
    assert_eq!(summary["unchanged_drift"], json!({"task_changed": 1}));
    assert_eq!(summary["changes"][0]["task_id"], "squares");
    assert!(stdout.contains("reward_spec_changed"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeat_finds_a_flaky_task_and_spares_a_deterministic_one() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.jsonl");
    let coin = "Print `even` if a random byte is even.";
    write_tasks(
        &tasks,
        &[
            task("coin", coin, "even", false),
            task("hello", HELLO, "Hello", true),
        ],
    );
    let flaky = "import os\nprint('even' if os.urandom(1)[0] % 2 == 0 else 'odd')";
    let script = model(&[(coin, flaky), (HELLO, "print('Hello')")]);
    let run = rollout(dir.path(), &tasks, &["coin", "hello"], 4, script).await;
    let out = dir.path().join("rescored.jsonl");
    let (code, new, summary, stdout) = rescore(&run, &out, &["--repeat", "5"]).await;
    // Four samples of five runs each: all twenty the same has odds 2^-16.
    assert_eq!(code, 1, "flaky programs fail the command: {stdout}");
    let flaky_tasks: Vec<&str> = summary["flaky"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["task_id"].as_str().unwrap())
        .collect();
    assert!(flaky_tasks.contains(&"coin"), "{summary}");
    assert!(!flaky_tasks.contains(&"hello"), "{summary}");
    for f in summary["flaky"].as_array().unwrap() {
        assert_eq!(f["rewards"].as_array().unwrap().len(), 5);
    }
    for (r, s) in rescored(&new) {
        let rs = s.rescore.as_ref().unwrap();
        assert_eq!(rs.repeat_rewards.len(), 5, "{rs:?}");
        // Nothing in its provenance changed: a new reward is a verdict on the same inputs.
        if rs.changed {
            assert_eq!(rs.reasons, [DriftReason::SameInputs], "{rs:?}");
        }
        if r.task_id == "hello" {
            assert_eq!(rs.repeat_rewards, vec![1.0; 5]);
        }
    }
    assert!(stdout.contains("flaky"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_file_without_provenance_is_rescored_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.jsonl");
    write_tasks(
        &tasks,
        &[
            task("add", "Print 2 + 3.", "5", true),
            task("mul", "Print 2 * 3.", "6", true),
        ],
    );
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("trajectory/tests/fixtures/v1.jsonl");
    let out = dir.path().join("rescored.jsonl");
    let (_, new, summary, stdout) =
        rescore(&fixture, &out, &["--tasks", tasks.to_str().unwrap()]).await;
    let steps = rescored(&new);
    assert!(!steps.is_empty());
    for (_, s) in &steps {
        let rs = s.rescore.as_ref().unwrap();
        if rs.error.is_none() {
            assert!(
                rs.reasons.contains(&DriftReason::NoProvenanceRecorded),
                "{rs:?}"
            );
            assert!(rs.recorded_provenance.is_none() && s.provenance.is_some());
        }
    }
    assert!(
        summary["unchanged"].as_u64().unwrap() + summary["changed"].as_u64().unwrap() > 0,
        "{summary}"
    );
    assert!(stdout.contains("no_provenance_recorded"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_clear_error_or_an_error_row_never_a_half_written_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rescored.jsonl");
    // A missing dataset: the command fails naming it, and writes nothing.
    let missing = dir.path().join("missing.jsonl");
    let (code, _, stderr) = codegym(&[
        "rescore",
        missing.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert_ne!(code, 0);
    assert!(stderr.contains("missing.jsonl"), "{stderr}");
    assert!(!out.exists());
    // A corrupt line: FILE:LINE.
    let corrupt = dir.path().join("corrupt.jsonl");
    let good = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("trajectory/tests/fixtures/v1.jsonl"),
    )
    .unwrap();
    let first = good.lines().next().unwrap();
    std::fs::write(&corrupt, format!("{first}\nnot json\n{first}\n")).unwrap();
    let (code, _, stderr) = codegym(&[
        "rescore",
        corrupt.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert_ne!(code, 0);
    assert!(stderr.contains("corrupt.jsonl:2"), "{stderr}");
    assert!(!out.exists());
    // A task that left the set (`mul`), and one this deployment cannot run (`add` needs a
    // package; packages are off): error rows, and the recorded rewards stay (never a zero).
    let tasks = dir.path().join("tasks.jsonl");
    let mut add = task("add", "Print 2 + 3.", "5", true);
    add["requirements"] = json!(["no-such-package-for-rescore"]);
    write_tasks(&tasks, &[add]);
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("trajectory/tests/fixtures/v1.jsonl");
    let (code, new, summary, stdout) =
        rescore(&fixture, &out, &["--tasks", tasks.to_str().unwrap()]).await;
    assert_eq!(code, 1, "{stdout}");
    let recorded = trajectory::read::read_latest(&fixture).unwrap();
    assert!(
        recorded
            .iter()
            .any(|r| r.task_id == "add" && r.final_reward == 1.0)
    );
    for (old, r) in recorded.iter().zip(&new) {
        assert_eq!(old.final_reward, r.final_reward);
        assert_eq!(old.solved, r.solved);
        for (_, s) in rescored(std::slice::from_ref(r)) {
            let rs = s.rescore.as_ref().unwrap();
            let error = rs.error.as_deref().unwrap();
            let want = match r.task_id.as_str() {
                "mul" => "\"mul\" is not in the current task set",
                _ => "requirements are not allowed",
            };
            assert!(error.contains(want), "{rs:?}");
            let reason = match r.task_id.as_str() {
                "mul" => DriftReason::TaskMissing,
                _ => DriftReason::ReplayFailed,
            };
            assert_eq!(rs.reasons, [reason]);
            assert_eq!(s.reward, rs.recorded_reward);
            assert_eq!(s.provenance, None, "nothing was scored");
        }
    }
    assert!(summary["errors"].as_u64().unwrap() >= 1, "{summary}");
    assert!(stdout.contains("not rescored"), "{stdout}");
    assert_eq!(
        summary["not_rescored_reasons"]["task_missing"], 2,
        "{summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_episode_is_replayed_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.jsonl");
    let prompt = "Define x = 41, then print x + 1.";
    write_tasks(&tasks, &[task("counter", prompt, "42", true)]);
    // The second cell uses the first's variable: replayed alone, it would fail.
    let script = FakeScript {
        rules: vec![
            Rule {
                prompt_contains: Some(prompt.into()),
                turn: Some(0),
                reply: Reply::code("x = 41"),
            },
            Rule {
                prompt_contains: Some(prompt.into()),
                turn: Some(1),
                reply: Reply::code("print(x + 1)"),
            },
        ],
        ..FakeScript::default()
    };
    let server = FakeLlm::start(script).await.unwrap();
    let run = dir.path().join("run.jsonl");
    let mut args = rollout_args(&server.base_url(), &["counter".into()], 1, &run);
    args.extend(["--tasks", tasks.to_str().unwrap(), "--env-mode", "session"].map(String::from));
    let (code, _, stderr) = codegym_bin::finish(codegym_bin::spawn(&args)).await;
    assert_eq!(code, 0, "{stderr}");
    let recorded = records(&run);
    let rewards: Vec<f64> = recorded[0]
        .turns
        .iter()
        .flat_map(|t| &t.env_steps)
        .map(|s| s.reward)
        .collect();
    assert_eq!(rewards, [0.0, 1.0]);
    for turns in ["final", "all"] {
        let out = dir.path().join(format!("rescored-{turns}.jsonl"));
        let (code, new, summary, stdout) = rescore(&run, &out, &["--turns", turns]).await;
        assert_eq!(code, 0, "{stdout}");
        assert_eq!(summary["changed"], 0, "{summary}");
        assert_eq!(
            summary["unchanged"],
            if turns == "all" { 2 } else { 1 },
            "{summary}"
        );
        assert_eq!(new[0].final_reward, 1.0);
    }
}
