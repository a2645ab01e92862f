//! `codegym rollout` end to end: the real binary, the real coding env, the fake model server.
//! These tests spawn the `codegym` binary itself (through `support/codegym_bin.rs`, and once
//! directly with the caller's environment), hence the local `disallowed_methods` allowance.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;
#[path = "support/rollout_util.rs"]
mod rollout_util;

use std::process::Stdio;
use std::time::Duration;

use codegym_bin::{BIN, LIMIT, Serve, finish, spawn};
use fake_llm::FakeLlm;
use rollout::dataset::record::StopReason;
use rollout::dataset::{read_latest, sidecar};
use rollout_util::{per_episode, records, records_so_far, rollout_args, script, task_ids};
use tokio::process::Command;

async fn wait_for(mut cond: impl FnMut() -> bool, what: &str) {
    let ok = tokio::time::timeout(LIMIT, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(ok.is_ok(), "timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_run_writes_every_episode_and_a_summary() {
    let server = FakeLlm::start(script(0)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("full.jsonl");
    let tasks = task_ids(4);
    let (code, stdout, stderr) =
        finish(spawn(rollout_args(&server.base_url(), &tasks, 2, &out))).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("episodes: 8 of 8"), "{stdout}");
    assert!(stdout.contains("pass@1: 0.5000"), "{stdout}");
    let all = records(&out);
    assert_eq!(all.len(), 8);
    assert!(per_episode(&all).values().all(|&n| n == 1));
    assert_eq!(
        all.iter()
            .filter(|r| r.stop_reason == StopReason::Solved)
            .count(),
        4
    );
    let manifest = std::fs::read_to_string(sidecar(&out, ".manifest.json")).unwrap();
    let version = format!(
        "\"schema_version\": {}",
        rollout::dataset::record::SCHEMA_VERSION
    );
    assert!(manifest.contains(&version), "{manifest}");
    assert!(manifest.contains("\"complete\": true"));
    assert!(sidecar(&out, ".summary.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_after_kill_9_leaves_each_episode_exactly_once() {
    // Slow model answers so the kill lands mid-run.
    let server = FakeLlm::start(script(300)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("killed.jsonl");
    let tasks = task_ids(4);
    let mut args = rollout_args(&server.base_url(), &tasks, 3, &out);
    args.extend(["--concurrency".to_string(), "3".to_string()]);
    let mut child = spawn(&args);
    let out_path = out.clone();
    wait_for(|| records_so_far(&out_path) >= 3, "some records").await;
    child.start_kill().expect("SIGKILL");
    let _ = child.wait().await;
    let before = read_latest(&out).unwrap().len();
    assert!(
        before < 12,
        "the kill came too late to test anything ({before} episodes)"
    );

    args.push("--resume".into());
    let (code, stdout, stderr) = finish(spawn(&args)).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let all = records(&out);
    let counts = per_episode(&all);
    assert_eq!(counts.len(), 12);
    assert!(counts.values().all(|&n| n == 1), "duplicates: {counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_cancels_in_flight_episodes_and_exits_cleanly() {
    let server = FakeLlm::start(script(2_000)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("term.jsonl");
    let tasks = task_ids(2);
    let mut args = rollout_args(&server.base_url(), &tasks, 4, &out);
    args.extend(["--concurrency".to_string(), "2".to_string()]);
    let child = spawn(&args);
    wait_for(|| server.request_count() >= 2, "requests in flight").await;
    let pid = nix::unistd::Pid::from_raw(child.id().expect("running") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let (code, stdout, _) = finish(child).await;
    assert_eq!(code, 130, "{stdout}");
    let all = records(&out);
    assert!(all.iter().any(|r| r.stop_reason == StopReason::Cancelled));
    assert!(all.len() < 8);
    let summary = std::fs::read_to_string(sidecar(&out, ".summary.json")).unwrap();
    assert!(summary.contains("\"interrupted\": true"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_remote_backend_gives_the_same_trajectories() {
    let model = FakeLlm::start(script(0)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tasks = task_ids(4);

    let mut serve = Serve::start(["--addr", "127.0.0.1:0"]).await;

    let local_out = dir.path().join("local.jsonl");
    let remote_out = dir.path().join("remote.jsonl");
    let (code, o, e) = finish(spawn(rollout_args(
        &model.base_url(),
        &tasks,
        2,
        &local_out,
    )))
    .await;
    assert_eq!(code, 0, "{o}\n{e}");
    let mut args = rollout_args(&model.base_url(), &tasks, 2, &remote_out);
    args.extend(["--env-server".to_string(), serve.url()]);
    let (code, o, e) = finish(spawn(&args)).await;
    assert_eq!(code, 0, "{o}\n{e}");

    let key = |r: &rollout::dataset::record::TrajectoryRecord| {
        (
            r.episode_id.clone(),
            r.seed,
            r.stop_reason,
            r.solved,
            r.total_reward,
            r.messages.len(),
        )
    };
    let mut local: Vec<_> = read_latest(&local_out).unwrap().iter().map(key).collect();
    let mut remote: Vec<_> = read_latest(&remote_out).unwrap().iter().map(key).collect();
    local.sort_by(|a, b| a.0.cmp(&b.0));
    remote.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(local.len(), 8);
    assert_eq!(local, remote);
    serve.child.start_kill().expect("stop the server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_reaches_the_endpoint_but_never_the_sandbox_or_the_dataset() {
    const SECRET: &str = "hf_codegym_test_secret_value";
    let mut script = script(0);
    // A model that dumps the sandbox's whole environment.
    script.rules.clear();
    script.default_reply =
        fake_llm::Reply::code("import os\nprint('ENV', sorted(os.environ.items()))\n");
    let server = FakeLlm::start(script).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("secret.jsonl");
    let mut args = rollout_args(&server.base_url(), &task_ids(1), 1, &out);
    let at = args
        .iter()
        .position(|a| a == "CODEGYM_TEST_UNSET_KEY")
        .unwrap();
    args[at] = "CODEGYM_TEST_KEY".into();
    #[allow(clippy::disallowed_methods)] // the test runs the binary under test
    let child = Command::new(BIN)
        .args(&args)
        .env("CODEGYM_TEST_KEY", SECRET)
        .env("HF_TOKEN", SECRET)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn codegym");
    let (code, stdout, stderr) = finish(child).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert_eq!(
        server.last_authorization(),
        Some(format!("Bearer {SECRET}"))
    );
    let record = &records(&out)[0];
    let stdout_in_sandbox = &record.turns[0].env_steps[0]
        .execution
        .as_ref()
        .unwrap()
        .stdout;
    assert!(
        stdout_in_sandbox.contains("ENV"),
        "the program ran: {stdout_in_sandbox}"
    );
    for path in [
        out.clone(),
        sidecar(&out, ".manifest.json"),
        sidecar(&out, ".summary.json"),
    ] {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(SECRET), "{} leaks the key", path.display());
    }
    assert!(!stdout.contains(SECRET) && !stderr.contains(SECRET));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_file_errors_name_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rollout.json");
    std::fs::write(&config, "{\n  \"samples\": 2,\n  \"sampels\": 3\n}\n").unwrap();
    let out = dir.path().join("never.jsonl");
    let args: Vec<String> = ["rollout", "--config"]
        .iter()
        .map(|s| s.to_string())
        .chain([config.display().to_string()])
        .chain(["--out".into(), out.display().to_string()])
        .collect();
    let (code, _, stderr) = finish(spawn(&args)).await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains(&format!("{}:3:", config.display())),
        "{stderr}"
    );
    assert!(stderr.contains("sampels"), "{stderr}");
    assert!(!out.exists());
}

// --- Issue 14: a C++ task through `codegym rollout --env-server` (inline task with its language).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpp_task_is_solved_through_a_remote_env_server() {
    use fake_llm::{FakeScript, Reply, Rule};
    const CPP: &str =
        "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n";
    let dir = tempfile::tempdir().unwrap();
    let tasks_file = dir.path().join("cpp.jsonl");
    let task = serde_json::json!({
        "schema_version": 1, "id": "sum-cpp", "prompt": "Add two integers.", "language": "cpp",
        "reward": {"version": 1, "components": [{"type": "judge", "tests": [
            {"input": "1 2\n", "output": "3\n"}, {"input": "-7 7\n", "output": "0\n"}]}]}
    });
    std::fs::write(&tasks_file, format!("{task}\n")).unwrap();
    let model = FakeLlm::start(FakeScript {
        rules: vec![Rule {
            prompt_contains: Some("Add two integers.".into()),
            turn: None,
            reply: Reply::Text(format!("```cpp\n{CPP}```\n")),
        }],
        ..FakeScript::default()
    })
    .await
    .unwrap();
    let mut serve = Serve::start(["--addr", "127.0.0.1:0"]).await;
    let out = dir.path().join("remote.jsonl");
    let mut args = rollout_args(&model.base_url(), &["sum-cpp".to_string()], 1, &out);
    args.extend([
        "--tasks".to_string(),
        tasks_file.display().to_string(),
        "--env-server".to_string(),
        serve.url(),
    ]);
    let (code, o, e) = finish(spawn(&args)).await;
    assert_eq!(code, 0, "{o}\n{e}");
    let records = read_latest(&out).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0].stop_reason,
        StopReason::Solved,
        "{:?}",
        records[0]
    );
    serve.child.start_kill().expect("stop the server");
}
