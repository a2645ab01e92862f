//! `codegym rollout` over repository tasks (`codegym/Repo-v0`) in tools mode, end to end: the real
//! binary, the real sandbox and the shipped repository set, the fake model scripting an agent. One
//! agent views the buggy file (after a malformed call, recorded as invalid), fixes it with
//! `str_replace` (the reference fix), runs the tests with `bash` and submits: reward 1, the verdict
//! `codegym tasks check` gives the reference patch. Another submits at once: reward 0, the empty
//! patch's verdict. The same through `codegym serve --tasks-dir` over TCP, a server without the
//! file refused by name, `--resume` completing each episode once, and the modes that make no sense
//! for the repository env refused. And over a task `codegym tasks synth` made from a real project
//! (six): an agent applying the reference fix with `str_replace` and one submitting at once get the
//! verdicts `tasks check` gives the reference and the empty patch.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use codegym_bin::{Serve, finish, spawn};
use fake_llm::{FakeLlm, FakeScript, Fault, FaultRule, Reply, Rule};
use rollout::dataset::record::SCHEMA_VERSION;
use serde_json::json;

const FIXED: &str = "inflection/ordinal-teens";
const IDLE: &str = "inflection/humanize-inner-id";
const FILE: &str = "inflection/__init__.py";

fn repo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("env-coding/tasks/repository")
}

fn task_file() -> String {
    repo_dir().join("tasks.jsonl").display().to_string()
}

fn call(name: &str, arguments: serde_json::Value) -> Reply {
    Reply::ToolCall {
        name: name.into(),
        arguments,
    }
}

fn at(prompt: &str, turn: usize, reply: Reply) -> Rule {
    Rule {
        prompt_contains: Some(prompt.into()),
        turn: Some(turn),
        reply,
    }
}

/// The fixing agent on `FIXED` (a malformed call and a `view`, then `str_replace` with the
/// reference fix, `bash` running the repository's tests, `submit`); the idle one on `IDLE`.
fn agent() -> FakeScript {
    let fixed = "ordinalize(111)";
    let idle = "user_identity_card";
    let rules = vec![
        at(
            fixed,
            0,
            Reply::RawToolCalls(vec![
                (
                    "view".into(),
                    r#"{"path": "inflection/__init__.py", "start": "#.into(),
                ),
                (
                    "view".into(),
                    json!({"path": FILE, "start": 224, "end": 227}).to_string(),
                ),
            ]),
        ),
        at(
            fixed,
            1,
            call(
                "str_replace",
                json!({"path": FILE, "old": "if number in (11, 12, 13):",
                       "new": "if number % 100 in (11, 12, 13):"}),
            ),
        ),
        at(
            fixed,
            2,
            call(
                "bash",
                json!({"command": "python -m pytest -q -p no:cacheprovider test_inflection.py"}),
            ),
        ),
        at(fixed, 3, call("submit", json!({}))),
        at(idle, 0, call("submit", json!({}))),
    ];
    FakeScript {
        rules,
        ..FakeScript::default()
    }
}

fn args(base_url: &str, out: &Path) -> Vec<String> {
    args_for(base_url, out, &task_file(), &[FIXED, IDLE])
}

/// A tools-mode rollout of `ids` of the repository task file `file`.
fn args_for(base_url: &str, out: &Path, file: &str, ids: &[&str]) -> Vec<String> {
    [
        "rollout",
        "--model",
        "test-org/test-model:fastest",
        "--base-url",
        base_url,
        "--api-key-env",
        "CODEGYM_TEST_UNSET_KEY",
        "--env-id",
        "codegym/Repo-v0",
        "--tasks",
        file,
        "--task-ids",
        &ids.join(","),
        "--mode",
        "tools",
        "--max-turns",
        "6",
        "--concurrency",
        "1",
        "--progress",
        "off",
        "--out",
        &out.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

type Checked = HashMap<String, (serde_json::Value, serde_json::Value)>;

/// `codegym tasks check --json` on the shipped set (once per test binary): each task's
/// (reference, empty) verdicts.
async fn checked() -> &'static Checked {
    static CHECKED: tokio::sync::OnceCell<Checked> = tokio::sync::OnceCell::const_new();
    CHECKED.get_or_init(check).await
}

async fn check() -> Checked {
    check_file(&task_file()).await
}

/// `codegym tasks check --json` on a repository task file: each task's (reference, empty) verdicts.
async fn check_file(file: &str) -> Checked {
    let (code, stdout, stderr) =
        finish(spawn(["tasks", "check", "--json", "--packages", file])).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("task_id").is_some())
        .map(|v| {
            let id = v["task_id"].as_str().expect("task id").to_string();
            (id, (v["reference"].clone(), v["empty"].clone()))
        })
        .collect()
}

/// What a verdict says, without its timing.
fn outcome(verdict: &serde_json::Value) -> serde_json::Value {
    json!({
        "resolved": verdict["resolved"],
        "reward": verdict["reward"],
        "fail_to_pass": verdict["fail_to_pass"],
        "pass_to_pass": verdict["pass_to_pass"],
    })
}

/// The dataset's lines as JSON (read as written, so that what is asserted is the file format).
fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The latest record of each task.
fn by_task(records: Vec<serde_json::Value>) -> HashMap<String, serde_json::Value> {
    records
        .into_iter()
        .map(|r| (r["task_id"].as_str().expect("task id").to_string(), r))
        .collect()
}

/// The two episodes' records say what the agents did and what the hidden tests found, and equal
/// `tasks check`'s verdicts of the reference and the empty patch.
async fn assert_episodes(records: Vec<serde_json::Value>) {
    let records = by_task(records);
    assert_eq!(records.len(), 2);
    let fixed = &records[FIXED];
    assert_eq!(fixed["env_id"], "codegym/Repo-v0");
    assert_eq!(fixed["schema_version"], SCHEMA_VERSION);
    assert_eq!(
        (
            &fixed["final_reward"],
            &fixed["solved"],
            &fixed["stop_reason"]
        ),
        (&json!(1.0), &json!(true), &json!("solved")),
        "{fixed:#}"
    );
    let steps: Vec<&serde_json::Value> = fixed["turns"]
        .as_array()
        .expect("turns")
        .iter()
        .flat_map(|t| t["env_steps"].as_array().expect("steps"))
        .collect();
    let names: Vec<String> = steps
        .iter()
        .map(|s| match s["action"]["kind"].as_str() {
            Some("repo_tool") => s["action"]["tool"].as_str().expect("tool").to_string(),
            Some("invalid") => format!("invalid {}", s["action"]["name"]),
            _ => panic!("not a repository tool call: {s:#}"),
        })
        .collect();
    assert_eq!(
        names,
        ["invalid \"view\"", "view", "str_replace", "bash", "submit"]
    );
    // The malformed call is recorded as given, with why, and the episode went on.
    assert!(steps[0]["error"]["message"].is_string(), "{:#}", steps[0]);
    assert_eq!(
        steps[2]["action"]["arguments"]["new"],
        "if number % 100 in (11, 12, 13):"
    );
    let shown = |i: usize| steps[i]["observation"].as_str().unwrap_or("").to_string();
    assert!(
        shown(1).contains("226\t    if number in (11, 12, 13):"),
        "{}",
        shown(1)
    );
    assert!(shown(3).contains("passed"), "{}", shown(3));
    let repo = &fixed["repository"];
    assert!(
        repo["patch"]
            .as_str()
            .is_some_and(|p| p.contains("+    if number % 100 in (11, 12, 13):")),
        "{fixed:#}"
    );

    let idle = &records[IDLE];
    assert_eq!(
        (&idle["final_reward"], &idle["solved"], &idle["stop_reason"]),
        (&json!(0.0), &json!(false), &json!("env_done")),
        "{idle:#}"
    );

    let checks = checked().await;
    assert_eq!(outcome(&repo["verdict"]), outcome(&checks[FIXED].0));
    assert_eq!(
        outcome(&idle["repository"]["verdict"]),
        outcome(&checks[IDLE].1)
    );
}

/// The readers of rollout datasets on repository episodes: `export` (RL rows with the episodes'
/// rewards, SFT rows of the solved one), `report` and `rescore` handle them.
async fn exports_report_and_rescore(run: &Path, dir: &Path) {
    let run = run.display().to_string();
    for (format, rows) in [("rl", 2), ("sft", 1)] {
        let file = dir.join(format!("{format}.jsonl"));
        let (code, stdout, stderr) = finish(spawn([
            "export",
            "--in",
            &run,
            "--format",
            format,
            "--out",
            &file.display().to_string(),
        ]))
        .await;
        assert_eq!(code, 0, "{format}: {stdout}\n{stderr}");
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.lines().count(), rows, "{format}: {text}");
        assert!(text.contains("str_replace"), "{format}: {text}");
    }
    let html = dir.join("report.html");
    let (code, stdout, stderr) =
        finish(spawn(["report", &run, "-o", &html.display().to_string()])).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(std::fs::read_to_string(&html).unwrap().contains(FIXED));
    rescores_repository_episodes(&run, dir).await;
}

/// `codegym rescore` on repository episodes scores each recorded diff again in a fresh copy: the
/// rollout's rewards come back unchanged; a record whose reward was forged (the fixing episode's
/// 1 made 0, and the idle one's 0 made 1) comes back with the diffs' rewards, each change listed.
async fn rescores_repository_episodes(run: &str, dir: &Path) {
    let rescore = |input: String, out: &str| {
        let out = dir.join(out).display().to_string();
        async move {
            let (code, stdout, stderr) =
                finish(spawn(["rescore", &input, "-o", &out, "--json"])).await;
            assert_eq!(code, 0, "{stdout}\n{stderr}");
            let summary: serde_json::Value = serde_json::from_str(&stdout).expect("summary");
            (summary, by_task(lines(Path::new(&out))))
        }
    };
    // A repository episode has no reference program to cross-check against.
    let out = dir.join("refused.jsonl").display().to_string();
    let (code, _, stderr) = finish(spawn(["rescore", run, "-o", &out, "--cross-check", "1"])).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("repository episodes have none"), "{stderr}");
    assert!(!Path::new(&out).exists());
    let (summary, records) = rescore(run.to_string(), "rescored.jsonl").await;
    assert_eq!(
        (
            &summary["steps"],
            &summary["unchanged"],
            &summary["changed"],
            &summary["errors"]
        ),
        (&json!(2), &json!(2), &json!(0), &json!(0)),
        "{summary:#}"
    );
    assert_eq!(records[FIXED]["final_reward"], json!(1.0));
    assert_eq!(records[IDLE]["final_reward"], json!(0.0));
    // The submit steps recorded their provenance, and nothing of it drifted.
    assert_eq!(summary["unchanged_drift"], json!({}), "{summary:#}");
    let submit = |r: &serde_json::Value| {
        r["turns"].as_array().unwrap().last().unwrap()["env_steps"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone()
    };
    let provenance = &submit(&records[FIXED])["provenance"];
    assert_eq!(
        (&provenance["language"], &provenance["toolchain"]),
        (&json!("repository"), &json!("host")),
        "{provenance:#}"
    );
    assert!(
        provenance["task_hash"]
            .as_str()
            .is_some_and(|h| h.starts_with("sha256:")),
        "{provenance:#}"
    );
    assert_ne!(
        provenance["task_hash"],
        submit(&records[IDLE])["provenance"]["task_hash"]
    );

    let forged: Vec<serde_json::Value> = lines(Path::new(run))
        .into_iter()
        .map(|mut r| {
            let reward = if r["task_id"] == FIXED { 0.0 } else { 1.0 };
            r["final_reward"] = json!(reward);
            r["total_reward"] = json!(reward);
            r["solved"] = json!(reward == 1.0);
            let last = r["turns"].as_array_mut().unwrap().last_mut().unwrap();
            let step = last["env_steps"]
                .as_array_mut()
                .unwrap()
                .last_mut()
                .unwrap();
            step["reward"] = json!(reward);
            step["info"]["solved"] = json!(reward == 1.0);
            r["repository"]["verdict"]["reward"] = json!(reward);
            r
        })
        .collect();
    let forged_run = dir.join("forged.jsonl");
    let text: String = forged.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&forged_run, text).unwrap();
    let (summary, records) = rescore(forged_run.display().to_string(), "reforged.jsonl").await;
    assert_eq!(
        (&summary["unchanged"], &summary["changed"]),
        (&json!(0), &json!(2)),
        "{summary:#}"
    );
    // Nothing the verdicts depended on changed: the recorded rewards were not these inputs'.
    assert_eq!(summary["reasons"], json!({"same_inputs": 2}), "{summary:#}");
    let checks = checked().await;
    for (task, reward, verdict) in [(FIXED, 1.0, &checks[FIXED].0), (IDLE, 0.0, &checks[IDLE].1)] {
        let r = &records[task];
        assert_eq!(
            (
                &r["final_reward"],
                &r["solved"],
                &r["rescore"]["recorded_final_reward"]
            ),
            (&json!(reward), &json!(reward == 1.0), &json!(1.0 - reward)),
            "{r:#}"
        );
        assert_eq!(outcome(&r["repository"]["verdict"]), outcome(verdict));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_on_repository_tasks_in_process_and_resume() {
    let model = FakeLlm::start(agent()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("repo.jsonl");
    let (code, stdout, stderr) = finish(spawn(args(&model.base_url(), &out))).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert_episodes(lines(&out)).await;
    exports_report_and_rescore(&out, dir.path()).await;

    // A run whose first episode failed (the model's endpoint answered 500 and said not to retry):
    // `--resume` runs that one again, and only that one.
    let mut script = agent();
    script.faults = vec![FaultRule::at(Fault::NoRetryHeader, [0])];
    let model = FakeLlm::start(script).await.unwrap();
    let out = dir.path().join("resumed.jsonl");
    let (code, stdout, stderr) = finish(spawn(args(&model.base_url(), &out))).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let first = lines(&out);
    assert_eq!(first.len(), 2);
    let errored = |r: &&serde_json::Value| r["stop_reason"] == "error";
    assert_eq!(first.iter().filter(errored).count(), 1);
    let mut again = args(&model.base_url(), &out);
    again.push("--resume".into());
    let (code, stdout, stderr) = finish(spawn(again)).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let all = lines(&out);
    assert_eq!(all.len(), 3, "one episode re-run");
    // The re-run is the errored episode's, and each episode is complete once.
    assert_eq!(
        all[2]["episode_id"],
        first.iter().find(errored).unwrap()["episode_id"]
    );
    assert_episodes(all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_on_repository_tasks_through_env_servers() {
    let dir = repo_dir().display().to_string();
    let server = Serve::start(["--addr", "127.0.0.1:0", "--packages", "--tasks-dir", &dir]).await;
    let model = FakeLlm::start(agent()).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("remote.jsonl");
    let mut a = args(&model.base_url(), &out);
    a.extend(["--env-server".into(), server.url()]);
    let (code, stdout, stderr) = finish(spawn(a)).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let records = lines(&out);
    assert!(
        records
            .iter()
            .all(|r| r["env_server"] == server.addr.as_str()),
        "{records:?}"
    );
    assert_eq!(records[0]["env_kwargs"]["tasks"], json!(task_file()));
    assert_episodes(records).await;

    // A server that may not read the file: the run does not start, and says which file and server.
    let bare = Serve::start(["--addr", "127.0.0.1:0", "--packages"]).await;
    let out = tmp.path().join("refused.jsonl");
    let mut a = args(&model.base_url(), &out);
    a.extend(["--env-server".into(), bare.url()]);
    let (code, stdout, stderr) = finish(spawn(a)).await;
    assert_ne!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stderr.contains(&task_file()) && stderr.contains(&bare.addr),
        "{stderr}"
    );
    assert!(stderr.contains("--tasks-dir"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modes_that_make_no_sense_for_repositories_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("never.jsonl");
    for (extra, expected) in [
        (vec!["--mode", "code-block"], "tools mode"),
        (vec!["--mode", "autocoder"], "tools mode"),
        (vec!["--mode", "program-of-thought"], "tools mode"),
        (vec!["--cross-check", "0.5"], "cross-check"),
        (vec!["--env-mode", "session"], "--env-mode"),
    ] {
        let mut a = args("http://127.0.0.1:9", &out);
        match extra[0] {
            "--mode" => {
                let at = a.iter().position(|x| x == "--mode").unwrap();
                a[at + 1] = extra[1].into();
            }
            _ => a.extend(extra.iter().map(|s| s.to_string())),
        }
        let (code, stdout, stderr) = finish(spawn(a)).await;
        assert_ne!(code, 0, "{extra:?}: {stdout}");
        assert!(
            stderr.contains("codegym/Repo-v0") && stderr.contains(expected),
            "{extra:?}: {stderr}"
        );
        assert!(!out.exists(), "{extra:?}: no dataset is started");
    }
    // A repository task file with the coding env is not a coding task set.
    let mut a = args("http://127.0.0.1:9", &out);
    let at = a.iter().position(|x| x == "--env-id").unwrap();
    a[at + 1] = "codegym/Code-v0".into();
    let (code, _, stderr) = finish(spawn(a)).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("codegym/Repo-v0"), "{stderr}");
}

/// The synthesized set the synthesized-task rollout plays (six 1.17.0).
fn synthesized_file() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("env-coding/tasks/synthesized/six/tasks.jsonl")
        .display()
        .to_string()
}

/// The one hunk of a reference patch as a `str_replace` on the broken file: (path, old, new).
fn hunk_as_replace(patch: &str) -> (String, String, String) {
    let path = patch
        .lines()
        .find_map(|l| l.strip_prefix("+++ b/"))
        .expect("a +++ line")
        .to_string();
    let (mut old, mut new) = (String::new(), String::new());
    for line in patch.lines().skip_while(|l| !l.starts_with("@@")).skip(1) {
        assert!(!line.starts_with("@@"), "one hunk: {patch}");
        if line.is_empty() {
            continue;
        }
        match line.split_at(1) {
            (" ", rest) => {
                old.push_str(rest);
                old.push('\n');
                new.push_str(rest);
                new.push('\n');
            }
            ("-", rest) => {
                old.push_str(rest);
                old.push('\n');
            }
            ("+", rest) => {
                new.push_str(rest);
                new.push('\n');
            }
            _ => {}
        }
    }
    (path, old, new)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_on_a_synthesized_task_get_the_verdicts_of_tasks_check() {
    let file = synthesized_file();
    let set = env_coding::tasks::RepoTaskSet::load(Path::new(&file)).unwrap();
    // Two tasks whose statements tell them apart (by a failing test each names alone).
    let key = |t: &env_coding::tasks::RepoTask| t.fail_to_pass[0].clone();
    let fixed = &set.tasks[0];
    let idle = set
        .tasks
        .iter()
        .skip(1)
        .find(|t| {
            !fixed.problem_statement.contains(&key(t)) && !t.problem_statement.contains(&key(fixed))
        })
        .expect("two distinguishable tasks");
    let (path, old, new) = hunk_as_replace(&fixed.patch);
    let script = FakeScript {
        rules: vec![
            at(
                &key(fixed),
                0,
                call("str_replace", json!({"path": path, "old": old, "new": new})),
            ),
            at(&key(fixed), 1, call("submit", json!({}))),
            at(&key(idle), 0, call("submit", json!({}))),
        ],
        ..FakeScript::default()
    };
    let model = FakeLlm::start(script).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("synthesized.jsonl");
    let ids = [fixed.id.as_str(), idle.id.as_str()];
    let (code, stdout, stderr) =
        finish(spawn(args_for(&model.base_url(), &out, &file, &ids))).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let records = by_task(lines(&out));
    let (f, i) = (&records[&fixed.id], &records[&idle.id]);
    assert_eq!(
        (&f["final_reward"], &f["solved"]),
        (&json!(1.0), &json!(true)),
        "{f:#}"
    );
    assert_eq!(
        (&i["final_reward"], &i["solved"]),
        (&json!(0.0), &json!(false)),
        "{i:#}"
    );
    let checks = check_file(&file).await;
    assert_eq!(
        outcome(&f["repository"]["verdict"]),
        outcome(&checks[&fixed.id].0)
    );
    assert_eq!(
        outcome(&i["repository"]["verdict"]),
        outcome(&checks[&idle.id].1)
    );
}

/// A model without function calling (`--tool-calls structured`): the tools are described in the
/// task's message and each answer is one JSON call (the fake model answers bare JSON when the
/// request carries `response_format`, as an endpoint enforcing the schema does). An answer that
/// is no call is recorded as invalid and the model told; the fix resolves the task with the
/// verdict `tasks check` gives the reference patch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_without_function_calling_fixes_the_bug_with_structured_calls() {
    let fixed = "ordinalize(111)";
    let json_call = |name: &str, arguments: serde_json::Value| {
        Reply::Json(json!({"name": name, "parameters": arguments}))
    };
    let rules = vec![
        at(
            fixed,
            0,
            Reply::Text("Let me look at the code first.".into()),
        ),
        at(
            fixed,
            1,
            json_call("view", json!({"path": FILE, "start": 224, "end": 227})),
        ),
        at(
            fixed,
            2,
            json_call(
                "str_replace",
                json!({"path": FILE, "old": "if number in (11, 12, 13):",
                       "new": "if number % 100 in (11, 12, 13):"}),
            ),
        ),
        at(
            fixed,
            3,
            json_call(
                "bash",
                json!({"command": "python -m pytest -q -p no:cacheprovider test_inflection.py"}),
            ),
        ),
        at(fixed, 4, json_call("submit", json!({}))),
    ];
    let model = FakeLlm::start(FakeScript {
        rules,
        ..FakeScript::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("structured.jsonl");
    let mut a = args(&model.base_url(), &out);
    let at_ids = a.iter().position(|x| x == "--task-ids").unwrap();
    a[at_ids + 1] = FIXED.into();
    a.extend(["--tool-calls".into(), "structured".into()]);
    let (code, stdout, stderr) = finish(spawn(a)).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let records = lines(&out);
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(
        (&r["final_reward"], &r["solved"]),
        (&json!(1.0), &json!(true)),
        "{r:#}"
    );
    let steps: Vec<&serde_json::Value> = r["turns"]
        .as_array()
        .expect("turns")
        .iter()
        .flat_map(|t| t["env_steps"].as_array().expect("steps"))
        .collect();
    let kinds: Vec<String> = steps
        .iter()
        .map(|s| match s["action"]["kind"].as_str() {
            Some("repo_tool") => s["action"]["tool"].as_str().expect("tool").to_string(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        ["Some(\"invalid\")", "view", "str_replace", "bash", "submit"]
    );
    let messages = r["messages"].as_array().expect("messages");
    let task = messages
        .iter()
        .find(|m| m["role"] == "user")
        .expect("task message");
    assert!(
        task["content"]
            .as_str()
            .is_some_and(|c| c.contains("exactly one tool call") && c.contains("- str_replace: ")),
        "{task:#}"
    );
    assert!(
        messages
            .iter()
            .all(|m| m["role"] != "tool" && m.get("tool_calls").is_none()),
        "no function calling in the conversation: {messages:#?}"
    );
    let checks = checked().await;
    assert_eq!(
        outcome(&r["repository"]["verdict"]),
        outcome(&checks[FIXED].0)
    );
}

/// An agent that fixes the bug and then stops (an answer without a call) and one that runs a
/// command every turn until its turns are used up never submit: the engine submits for them, and
/// each gets its diff's verdict, the one `tasks check` gives the reference and the empty patch,
/// with the model's stop reason kept and the outcome marked as the engine's submit. With
/// `--no-auto-submit` the same episodes end unscored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn episodes_the_model_ends_without_submitting_are_scored_by_the_engine() {
    let (fixed, idle) = ("ordinalize(111)", "user_identity_card");
    let mut rules = vec![
        at(
            fixed,
            0,
            call(
                "str_replace",
                json!({"path": FILE, "old": "if number in (11, 12, 13):",
                       "new": "if number % 100 in (11, 12, 13):"}),
            ),
        ),
        at(fixed, 1, Reply::Text("I fixed it.".into())),
    ];
    rules.extend((0..6).map(|turn| at(idle, turn, call("bash", json!({"command": "ls"})))));
    let model = FakeLlm::start(FakeScript {
        rules,
        ..FakeScript::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let checks = checked().await;
    for auto in [true, false] {
        let out = dir.path().join(format!("auto-{auto}.jsonl"));
        let mut a = args(&model.base_url(), &out);
        let at_turns = a.iter().position(|x| x == "--max-turns").unwrap();
        a[at_turns + 1] = "2".into();
        if !auto {
            a.push("--no-auto-submit".into());
        }
        let (code, stdout, stderr) = finish(spawn(a)).await;
        assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
        let records = by_task(lines(&out));
        let (f, i) = (&records[FIXED], &records[IDLE]);
        assert_eq!(
            (&f["stop_reason"], &i["stop_reason"]),
            (&json!("no_code"), &json!("max_turns"))
        );
        let tools = |r: &serde_json::Value| -> Vec<String> {
            r["turns"]
                .as_array()
                .expect("turns")
                .iter()
                .flat_map(|t| t["env_steps"].as_array().expect("steps"))
                .map(|s| s["action"]["tool"].as_str().unwrap_or("?").to_string())
                .collect()
        };
        if !auto {
            for r in [f, i] {
                assert_eq!(r["final_reward"], json!(0.0), "{r:#}");
                assert!(r.get("repository").is_none(), "{r:#}");
                assert!(!tools(r).contains(&"submit".to_string()), "{r:#}");
            }
            continue;
        }
        assert_eq!(tools(f), ["str_replace", "submit"]);
        assert_eq!(tools(i), ["bash", "bash", "submit"]);
        assert_eq!(
            (&f["final_reward"], &f["solved"]),
            (&json!(1.0), &json!(true)),
            "{f:#}"
        );
        assert_eq!(
            (&i["final_reward"], &i["solved"]),
            (&json!(0.0), &json!(false)),
            "{i:#}"
        );
        for (r, verdict) in [(f, &checks[FIXED].0), (i, &checks[IDLE].1)] {
            assert_eq!(r["repository"]["auto_submitted"], json!(true), "{r:#}");
            assert_eq!(outcome(&r["repository"]["verdict"]), outcome(verdict));
        }
    }
}
