//! One scoring engine: the same tasks x programs scored through every surface give identical
//! rewards and breakdowns. The surfaces: an env episode (`Make`/`Reset`/`Step`), `Evaluate`,
//! `EvaluateStream` and SandboxFusion's `/submit`, all on one real `codegym serve --http` process
//! over TCP, and the `codegym evaluate` and `codegym tasks check` commands (the program as the
//! task's reference solution), all given the same `--config` file.
//!
//! The tasks cover typed outputs over an input file, a stdin/stdout judge (in Python and in C++),
//! differential testing, unit-test asserts and a task requirement installed offline from a
//! wheelhouse (a wheel built here); each gets a right and a wrong program. Verdict sharing is off
//! in the config, so every surface runs every program itself.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use env_core::Value;
use proto::convert::value_to_proto;
use proto::v1;
use proto::v1::env_service_client::EnvServiceClient;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tonic::transport::Channel;

const SALES: &str = "date,region,product,units,price\n2024-01-01,west,widget,3,9.50\n\
                     2024-01-01,east,gadget,2,20.00\n2024-01-02,west,gadget,1,20.00\n";

const OUTPUTS_RIGHT: &str = r#"import csv, os
rows = [r for r in csv.DictReader(open("sales.csv")) if r["region"] == "west"]
out = os.environ["CODEGYM_OUTPUTS"]
open(f"{out}/rows", "w").write(str(len(rows)))
open(f"{out}/revenue", "w").write(str(sum(int(r["units"]) * float(r["price"]) for r in rows)))
"#;
const OUTPUTS_WRONG: &str = r#"import os
out = os.environ["CODEGYM_OUTPUTS"]
open(f"{out}/rows", "w").write("3")
"#;
const SUM_PY: &str = "a, b = map(int, input().split())\nprint(a + b)\n";
const SUM_PY_WRONG: &str = "a, b = map(int, input().split())\nprint(a - b)\n";
const SUM_CPP: &str =
    "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n";
const SUM_CPP_WRONG: &str =
    "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a*b<<std::endl;}\n";
const ADD: &str = "def add(a, b):\n    return a + b\n";
const ADD_WRONG: &str = "def add(a, b):\n    return a + b if a >= 0 else 0\n";
const PKG: &str = "import cgscore\nprint('answer', cgscore.ANSWER)\n";
const PKG_WRONG: &str = "print('answer', 41)\n";

/// `(task, right program, wrong program)`; a task line gets its reference solution per check file.
fn tasks() -> Vec<(serde_json::Value, &'static str, &'static str)> {
    let judge = |id: &str, language: &str| {
        json!({"schema_version": 1, "id": id, "prompt": "Read two integers, print their sum.", "language": language,
            "reward": {"version": 1, "components": [{"type": "judge", "partial": true, "tests": [
                {"input": "1 2\n", "output": "3\n"}, {"input": "-7 7\n", "output": "0\n"},
                {"input": "2 2\n", "output": "4\n"}]}]}})
    };
    vec![
        (
            json!({"schema_version": 1, "id": "typed-outputs", "prompt": "Count the west rows of sales.csv and their revenue.",
                "files": {"sales.csv": {"path": "data/sales.csv"}},
                "outputs": {"rows": "int", "revenue": "float"},
                "reward": {"version": 1, "components": [
                    {"type": "output", "name": "rows", "expected": 2},
                    {"type": "output", "name": "revenue", "expected": 48.5, "tolerance": 1e-9}]}}),
            OUTPUTS_RIGHT,
            OUTPUTS_WRONG,
        ),
        (judge("judge-python", "python"), SUM_PY, SUM_PY_WRONG),
        (judge("judge-cpp", "cpp"), SUM_CPP, SUM_CPP_WRONG),
        (
            json!({"schema_version": 1, "id": "differential", "prompt": "Write add(a, b).",
                "reward": {"version": 1, "components": [{"type": "differential", "entry_point": "add",
                    "reference": ADD, "base_inputs": [[1, 2], [3, 4]], "plus_inputs": [[-1, 5], [-3, -3]],
                    "partial": true}]}}),
            ADD,
            ADD_WRONG,
        ),
        (
            json!({"schema_version": 1, "id": "asserts", "prompt": "Write add(a, b).",
                "reward": {"version": 1, "components": [
                    {"type": "asserts", "asserts": ["assert add(1, 2) == 3", "assert add(-2, 1) == -1"]},
                    {"type": "exit_code"}]}}),
            ADD,
            ADD_WRONG,
        ),
        (
            json!({"schema_version": 1, "id": "package", "prompt": "Print the answer cgscore knows.",
                "requirements": ["cgscore==1.0"],
                "reward": {"version": 1, "components": [{"type": "contains", "text": "answer 42"}]}}),
            PKG,
            PKG_WRONG,
        ),
    ]
}

/// A pure-Python wheel of `cgscore` 1.0 in `dir` (so the package task needs no network).
fn build_wheel(dir: &Path) {
    let script = r#"
import sys, zipfile
files = {
    "cgscore/__init__.py": "ANSWER = 42\n",
    "cgscore-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: cgscore\nVersion: 1.0\n",
    "cgscore-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = "".join(f"{name},,\n" for name in files) + "cgscore-1.0.dist-info/RECORD,,\n"
files["cgscore-1.0.dist-info/RECORD"] = record
with zipfile.ZipFile(sys.argv[1] + "/cgscore-1.0-py3-none-any.whl", "w") as z:
    for name, text in files.items():
        z.writestr(name, text)
"#;
    #[allow(clippy::disallowed_methods)] // a test fixture, built before anything runs
    let out = std::process::Command::new(python())
        .args(["-c", script])
        .arg(dir)
        .output()
        .expect("run python");
    assert!(out.status.success(), "{out:?}");
}

fn python() -> PathBuf {
    std::env::var_os("CODEGYM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// The fixture directory: data file, wheelhouse, config, the task file, and one task file per
/// program set whose reference solutions are those programs (what `tasks check` scores).
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("data")).unwrap();
        std::fs::write(root.join("data/sales.csv"), SALES).unwrap();
        std::fs::create_dir_all(root.join("wheels")).unwrap();
        build_wheel(&root.join("wheels"));
        let config = json!({"coding": {
            "task_dirs": [root],
            "verdict_cache_mib": 0,
            "per_test_timeout_ms": 5000,
            "packages": {"enabled": true, "wheelhouse": root.join("wheels"),
                "index_url": "http://127.0.0.1:9/", "cache_dir": root.join("pkg-cache")},
        }});
        std::fs::write(root.join("config.json"), config.to_string()).unwrap();
        let write = |name: &str, pick: fn(&(serde_json::Value, &str, &str)) -> Option<String>| {
            let lines: Vec<String> = tasks()
                .iter()
                .map(|t| {
                    let mut task = t.0.clone();
                    if let Some(reference) = pick(t) {
                        task["reference_solution"] = json!(reference);
                    }
                    task.to_string()
                })
                .collect();
            std::fs::write(root.join(name), lines.join("\n") + "\n").unwrap();
        };
        write("tasks.jsonl", |_| None);
        write("right.jsonl", |t| Some(t.1.to_string()));
        write("wrong.jsonl", |t| Some(t.2.to_string()));
        Fixture { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

/// One scoring of one (task, program): reward and breakdown, as a surface reported them.
type Verdict = (f64, serde_json::Value);

/// The (task id, program) pairs, right programs first.
fn pairs() -> Vec<(String, &'static str)> {
    let t = tasks();
    let id = |task: &serde_json::Value| task["id"].as_str().unwrap_or_default().to_string();
    t.iter()
        .map(|x| (id(&x.0), x.1))
        .chain(t.iter().map(|x| (id(&x.0), x.2)))
        .collect()
}

/// `codegym serve --config ... --http 127.0.0.1:0`: the gRPC and the HTTP address.
#[allow(clippy::disallowed_methods)] // the test runs the server binary under test
async fn serve(fx: &Fixture) -> (tokio::process::Child, String, String) {
    let dataset = format!("mine={}", fx.arg("tasks.jsonl"));
    let mut child = codegym_bin::command(
        codegym_bin::BIN,
        [
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--http-dataset",
            &dataset,
            "--config",
            &fx.arg("config.json"),
        ],
    )
    .stderr(Stdio::inherit())
    .spawn()
    .expect("spawn codegym serve");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut addrs = Vec::new();
    for _ in 0..2 {
        let line = tokio::time::timeout(codegym_bin::LIMIT, lines.next_line())
            .await
            .expect("the server prints its addresses")
            .expect("read stdout")
            .expect("a line");
        addrs.push(line);
    }
    let (grpc, http) = (&addrs[0], &addrs[1]);
    let grpc = grpc.strip_prefix("listening on ").expect("gRPC line");
    let http = http.strip_prefix("http listening on ").expect("HTTP line");
    (child, grpc.to_string(), http.to_string())
}

fn verdict_of(reward: f64, info_json: &str) -> Verdict {
    let info: serde_json::Value = serde_json::from_str(info_json).expect("info JSON");
    (reward, info["reward_breakdown"].clone())
}

fn kwargs(fx: &Fixture) -> String {
    json!({"tasks": fx.path("tasks.jsonl"), "extract": "raw"}).to_string()
}

fn action(program: &str) -> Option<v1::Value> {
    Some(value_to_proto(&Value::Text(program.into())))
}

/// Every pair as one env episode: make (once), reset to the task, step with the program.
async fn through_steps(c: &mut EnvServiceClient<Channel>, fx: &Fixture) -> Vec<Verdict> {
    let make = v1::MakeRequest {
        env_id: "codegym/Python-v0".into(),
        kwargs_json: kwargs(fx),
    };
    let session_id = c.make(make).await.expect("make").into_inner().session_id;
    let mut out = Vec::new();
    for (task_id, program) in pairs() {
        let reset = v1::ResetRequest {
            session_id: session_id.clone(),
            seed: None,
            options_json: json!({"task_id": task_id}).to_string(),
        };
        c.reset(reset).await.expect("reset");
        let step = v1::StepRequest {
            session_id: session_id.clone(),
            action: action(program),
        };
        let step = c.step(step).await.expect("step").into_inner();
        out.push(verdict_of(step.reward, &step.info_json));
    }
    out
}

fn evaluate_request(fx: &Fixture) -> v1::EvaluateRequest {
    v1::EvaluateRequest {
        env_id: "codegym/Python-v0".into(),
        kwargs_json: kwargs(fx),
        items: pairs()
            .into_iter()
            .map(|(task_id, program)| v1::EvaluateItem {
                seed: None,
                options_json: json!({"task_id": task_id}).to_string(),
                action: action(program),
            })
            .collect(),
    }
}

fn step_verdict(r: &v1::EvaluateResult) -> Verdict {
    let step = r
        .step
        .as_ref()
        .unwrap_or_else(|| panic!("item error: {r:?}"));
    verdict_of(step.reward, &step.info_json)
}

async fn through_evaluate(c: &mut EnvServiceClient<Channel>, fx: &Fixture) -> Vec<Verdict> {
    let results = c
        .evaluate(evaluate_request(fx))
        .await
        .expect("Evaluate")
        .into_inner()
        .results;
    results.iter().map(step_verdict).collect()
}

async fn through_stream(c: &mut EnvServiceClient<Channel>, fx: &Fixture) -> Vec<Verdict> {
    let mut stream = c
        .evaluate_stream(evaluate_request(fx))
        .await
        .expect("EvaluateStream")
        .into_inner();
    let mut by_index = std::collections::BTreeMap::new();
    while let Some(msg) = stream.message().await.expect("stream message") {
        let result = msg.result.expect("a result");
        by_index.insert(msg.index, step_verdict(&result));
    }
    by_index.into_values().collect()
}

async fn through_submit(http: &str) -> Vec<Verdict> {
    let client = reqwest::Client::new();
    let mut out = Vec::new();
    for (task_id, program) in pairs() {
        let body = json!({"dataset": "mine", "id": task_id, "completion": program, "config": {}});
        let response = client
            .post(format!("http://{http}/submit"))
            .json(&body)
            .send()
            .await
            .expect("POST /submit");
        assert_eq!(response.status().as_u16(), 200, "{task_id}");
        let v: serde_json::Value = response.json().await.expect("JSON");
        let extra = &v["extra"];
        let reward = extra["reward"].as_f64().expect("extra.reward");
        let breakdown = &extra["reward_breakdown"];
        // `accepted` is the engine's `solved`.
        assert_eq!(v["accepted"], breakdown["reward"] == json!(1.0), "{v}");
        out.push((reward, breakdown.clone()));
    }
    out
}

/// `codegym ARGS` to completion: exit code, stdout, stderr.
async fn codegym(args: &[&str]) -> (i32, String, String) {
    codegym_bin::finish(codegym_bin::spawn(args)).await
}

async fn through_cli_evaluate(fx: &Fixture) -> Vec<Verdict> {
    let samples: Vec<String> = pairs()
        .into_iter()
        .map(|(task_id, program)| json!({"task_id": task_id, "completion": program}).to_string())
        .collect();
    std::fs::write(fx.path("samples.jsonl"), samples.join("\n") + "\n").unwrap();
    let (code, _, stderr) = codegym(&[
        "evaluate",
        "--config",
        &fx.arg("config.json"),
        "--tasks",
        &fx.arg("tasks.jsonl"),
        "--samples",
        &fx.arg("samples.jsonl"),
        "-k",
        "1",
    ])
    .await;
    assert_eq!(code, 0, "{stderr}");
    let results = std::fs::read_to_string(fx.path("samples.jsonl_results.jsonl")).unwrap();
    results
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("result line");
            (
                v["reward"].as_f64().expect("reward"),
                v["reward_breakdown"].clone(),
            )
        })
        .collect()
}

/// `codegym tasks check --json` of a task file: its exit code and a verdict per task.
async fn through_tasks_check(fx: &Fixture, file: &str) -> (i32, Vec<Verdict>) {
    let (code, stdout, stderr) = codegym(&[
        "tasks",
        "check",
        "--json",
        "--config",
        &fx.arg("config.json"),
        &fx.arg(file),
    ])
    .await;
    let verdicts = stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("check line");
            (
                v["reward"].as_f64().expect("reward"),
                v["reward_breakdown"].clone(),
            )
        })
        .collect();
    assert!(stderr.contains("reference solutions pass"), "{stderr}");
    (code, verdicts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_surface_gives_the_same_rewards_and_breakdowns() {
    let fx = Fixture::new();
    let (mut server, grpc, http) = serve(&fx).await;
    let channel = Channel::from_shared(format!("http://{grpc}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut c = EnvServiceClient::new(channel);

    let steps = through_steps(&mut c, &fx).await;
    let n = tasks().len();
    // The reference surface is right before the others are compared with it: every right program
    // solves its task, every wrong one does not, and each breakdown names the task's components.
    for (i, ((task_id, _), (reward, breakdown))) in pairs().iter().zip(&steps).enumerate() {
        let right = i < n;
        assert_eq!(
            *reward == 1.0,
            right,
            "{task_id} (right: {right}): {breakdown}"
        );
        assert!(
            breakdown["components"]
                .as_array()
                .is_some_and(|c| !c.is_empty()),
            "{task_id}: {breakdown}"
        );
    }
    let surfaces = [
        ("Evaluate", through_evaluate(&mut c, &fx).await),
        ("EvaluateStream", through_stream(&mut c, &fx).await),
        ("/submit", through_submit(&http).await),
        ("codegym evaluate", through_cli_evaluate(&fx).await),
    ];
    server.kill().await.expect("stop the server");
    let (right_code, right) = through_tasks_check(&fx, "right.jsonl").await;
    let (wrong_code, wrong) = through_tasks_check(&fx, "wrong.jsonl").await;
    assert_eq!(right_code, 0, "every right reference passes: {right:?}");
    assert_eq!(wrong_code, 1, "wrong references fail: {wrong:?}");
    let checked: Vec<Verdict> = right.into_iter().chain(wrong).collect();

    let labels = pairs();
    for (name, got) in surfaces.iter().chain([&("codegym tasks check", checked)]) {
        assert_eq!(got.len(), steps.len(), "{name}");
        for (i, (want, got)) in steps.iter().zip(got).enumerate() {
            assert_eq!(
                want, got,
                "{name} disagrees with Step on {} (program {i})",
                labels[i].0
            );
        }
    }
}

#[tokio::test]
async fn tasks_check_passes_a_right_typed_output_reference_and_fails_a_wrong_one() {
    let fx = Fixture::new();
    let typed = |reference: &str| {
        let mut task = tasks()[0].0.clone();
        task["reference_solution"] = json!(reference);
        task.to_string() + "\n"
    };
    std::fs::write(fx.path("typed-right.jsonl"), typed(OUTPUTS_RIGHT)).unwrap();
    std::fs::write(fx.path("typed-wrong.jsonl"), typed(OUTPUTS_WRONG)).unwrap();
    let check = |file: &str| {
        let file = fx.arg(file);
        async move { codegym(&["tasks", "check", &file]).await }
    };

    let (code, stdout, stderr) = check("typed-right.jsonl").await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("PASS typed-outputs"), "{stdout}");
    assert!(
        stdout.contains("1 of 1 reference solutions pass"),
        "{stdout}"
    );

    let (code, stdout, stderr) = check("typed-wrong.jsonl").await;
    assert_eq!(code, 1, "{stdout}{stderr}");
    // The message names the failing outputs: `rows` is wrong, `revenue` is missing.
    let line = stdout
        .lines()
        .find(|l| l.starts_with("FAIL typed-outputs"))
        .unwrap_or_else(|| panic!("no FAIL line: {stdout}"));
    assert!(line.contains("output scored 0.000"), "{line}");
    assert!(line.contains("rows") && line.contains("revenue"), "{line}");
    assert!(
        stdout.contains("0 of 1 reference solutions pass"),
        "{stdout}"
    );
}
