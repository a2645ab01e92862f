//! The remote backend's pool against real `codegym serve` processes over TCP: a server killed
//! mid-rollout, a full server, a draining server, and a name with several addresses. Each test runs
//! the real `codegym rollout` binary with the fake model (and `unshare`), through
//! `support/codegym_bin.rs`.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;
#[path = "support/rollout_util.rs"]
mod rollout_util;

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::time::Duration;

use codegym_bin::{BIN, LIMIT, Serve, finish, spawn, spawn_program};
use fake_llm::FakeLlm;
use rollout::dataset::record::{StopReason, TrajectoryRecord};
use rollout::dataset::sidecar;
use rollout_util::{per_episode, records, records_so_far, rollout_args, script, task_ids};

/// The rollout's arguments over `servers`, each an `--env-server`.
fn pool_args(
    model: &str,
    tasks: &[String],
    samples: u32,
    out: &Path,
    servers: &[String],
) -> Vec<String> {
    let mut args = rollout_args(model, tasks, samples, out);
    for s in servers {
        args.extend(["--env-server".to_string(), s.clone()]);
    }
    args
}

/// `unshare` arguments that run `codegym ...` (the arguments appended to these) in a mount
/// namespace of its own whose /etc/hosts is `hosts`.
fn with_hosts_file(hosts: &Path) -> Vec<String> {
    [
        "--mount",
        "sh",
        "-c",
        "mount --bind \"$0\" /etc/hosts && exec \"$@\"",
        &hosts.display().to_string(),
        BIN,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Every episode exactly once, none an error, and the summary agrees.
fn assert_complete(out: &Path, expected: usize) -> Vec<TrajectoryRecord> {
    let all = records(out);
    let counts = per_episode(&all);
    assert_eq!(counts.len(), expected, "{counts:?}");
    assert!(counts.values().all(|&n| n == 1), "duplicates: {counts:?}");
    for r in &all {
        assert_ne!(
            r.stop_reason,
            StopReason::Error,
            "{}: {:?}",
            r.episode_id,
            r.error
        );
        assert!(r.env_server.is_some(), "{} has no env server", r.episode_id);
    }
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sidecar(out, ".summary.json")).unwrap())
            .unwrap();
    assert_eq!(
        summary["errors_by_kind"],
        serde_json::json!({}),
        "{summary}"
    );
    assert_eq!(
        summary["episodes"],
        serde_json::json!(expected),
        "{summary}"
    );
    all
}

/// `codegym_sessions_open` as the server at `metrics` (`HOST:PORT`) exports it now.
async fn open_sessions(metrics: &str) -> f64 {
    let text = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .and_then(|r| r.error_for_status())
        .expect("scrape /metrics")
        .text()
        .await
        .expect("read /metrics");
    text.lines()
        .find_map(|l| l.strip_prefix("codegym_sessions_open "))
        .map_or(0.0, |v| v.trim().parse().expect("a gauge's value"))
}

fn servers_used(records: &[TrajectoryRecord]) -> BTreeSet<String> {
    records
        .iter()
        .filter_map(|r| r.env_server.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_rollout_loses_no_episode_and_restarts_are_recorded() {
    // Slow answers keep every episode's session open long enough for the kill to land mid-episode.
    let model = FakeLlm::start(script(300)).await.unwrap();
    // The victim reports its open sessions, so that the kill waits until it holds one.
    let mut cmd = codegym_bin::command(BIN, ["serve"]);
    cmd.args(["--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"]);
    let (victim, found) = Serve::start_command(cmd, &["metrics listening on "]).await;
    let victim_metrics = found[0].clone();
    let mut servers = vec![victim];
    for _ in 0..2 {
        servers.push(Serve::start(["--addr", "127.0.0.1:0"]).await);
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("killed.jsonl");
    let tasks = task_ids(4);
    let urls: Vec<String> = servers.iter().map(Serve::url).collect();
    let mut args = pool_args(&model.base_url(), &tasks, 3, &out, &urls);
    args.extend(["--concurrency".to_string(), "6".to_string()]);
    let run = spawn(&args);
    // Six episodes in flight over three servers; the kill lands once the victim holds a session
    // and its episodes are past their first model turn.
    let started = tokio::time::Instant::now();
    while model.request_count() < 8 || open_sessions(&victim_metrics).await < 1.0 {
        assert!(started.elapsed() < LIMIT, "the victim never held a session");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let victim = servers.remove(0);
    victim.signal(nix::sys::signal::Signal::SIGKILL);
    let (code, stdout, stderr) = finish(run).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");

    let all = assert_complete(&out, 12);
    let restarted: Vec<&TrajectoryRecord> = all.iter().filter(|r| !r.restarts.is_empty()).collect();
    assert!(
        !restarted.is_empty(),
        "no episode was restarted: the kill landed between episodes"
    );
    for r in &restarted {
        assert!(
            r.restarts
                .iter()
                .all(|x| x.env_server == victim.addr && !x.reason.is_empty()),
            "{:?}",
            r.restarts
        );
        // The restart ran elsewhere, from the first turn, with the episode's own seed.
        assert_ne!(r.env_server.as_deref(), Some(victim.addr.as_str()));
        assert_eq!(r.turns[0].index, 0);
    }
    let restarts: usize = all.iter().map(|r| r.restarts.len()).sum();
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sidecar(&out, ".summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["env_restarts"], serde_json::json!(restarts));
    assert!(
        stdout.contains(&format!("env restarts: {restarts}")),
        "{stdout}"
    );
    // After the kill no new session went to the dead server: the ones on it are the restarted ones
    // and the episodes that had finished before.
    let survivors: HashSet<String> = servers.iter().map(|s| s.addr.clone()).collect();
    assert!(servers_used(&all).iter().any(|s| survivors.contains(s)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_sheds_load_to_the_others() {
    let model = FakeLlm::start(script(0)).await.unwrap();
    // A cap of zero: every `make` there is RESOURCE_EXHAUSTED, though its health says SERVING.
    let full = Serve::start(["--addr", "127.0.0.1:0", "--max-sessions", "0"]).await;
    let open = Serve::start(["--addr", "127.0.0.1:0"]).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("full.jsonl");
    let tasks = task_ids(4);
    let mut args = pool_args(
        &model.base_url(),
        &tasks,
        2,
        &out,
        &[full.url(), open.url()],
    );
    args.extend(["--concurrency".to_string(), "4".to_string()]);
    let (code, stdout, stderr) = finish(spawn(&args)).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let all = assert_complete(&out, 8);
    assert_eq!(servers_used(&all), BTreeSet::from([open.addr.clone()]));
    assert!(all.iter().all(|r| r.restarts.is_empty()));
    assert!(stdout.contains("pass@1: 0.5000"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_server_is_excluded_and_finishes_its_open_sessions() {
    use proto::v1::{self, session_request::Kind as Req, session_response::Kind as Resp};
    use tonic_health::pb::{
        HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
    };

    let model = FakeLlm::start(script(0)).await.unwrap();
    let draining = Serve::start(["--addr", "127.0.0.1:0", "--drain-secs", "120"]).await;
    let open = Serve::start(["--addr", "127.0.0.1:0"]).await;

    // A session opened before the signal...
    let channel = tonic::transport::Endpoint::from_shared(draining.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = v1::env_service_client::EnvServiceClient::new(channel.clone());
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut inbound = client
        .session(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut ask = async |id: u64, kind: Req| {
        tx.send(v1::SessionRequest {
            request_id: id,
            kind: Some(kind),
        })
        .await
        .unwrap();
        inbound.message().await.unwrap().unwrap().kind.unwrap()
    };
    let make = Req::Make(v1::MakeRequest {
        env_id: "classic/CartPole-v1".into(),
        kwargs_json: String::new(),
    });
    assert!(matches!(ask(0, make).await, Resp::Make(_)));
    let reset = Req::Reset(v1::ResetRequest {
        session_id: String::new(),
        seed: Some(1),
        options_json: String::new(),
    });
    assert!(matches!(ask(1, reset).await, Resp::Reset(_)));

    draining.signal(nix::sys::signal::Signal::SIGTERM);
    let mut health = HealthClient::new(channel.clone());
    let started = tokio::time::Instant::now();
    for service in ["codegym.v1.EnvService", ""] {
        loop {
            let status = health
                .check(HealthCheckRequest {
                    service: service.into(),
                })
                .await
                .expect("a draining server still answers health checks")
                .into_inner()
                .status();
            if status == ServingStatus::NotServing {
                break;
            }
            assert_eq!(status, ServingStatus::Serving);
            assert!(started.elapsed() < LIMIT, "never NOT_SERVING");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // ...goes on while the server drains; new sessions are refused as UNAVAILABLE.
    let action = v1::Value {
        kind: Some(v1::value::Kind::Discrete(1)),
    };
    let step = Req::Step(v1::StepRequest {
        session_id: String::new(),
        action: Some(action),
    });
    assert!(matches!(ask(2, step).await, Resp::Step(_)));
    let refused = client
        .make(v1::MakeRequest {
            env_id: "classic/CartPole-v1".into(),
            kwargs_json: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");

    // A rollout over both servers places nothing on the draining one.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("drain.jsonl");
    let tasks = task_ids(3);
    let args = pool_args(
        &model.base_url(),
        &tasks,
        2,
        &out,
        &[draining.url(), open.url()],
    );
    let (code, stdout, stderr) = finish(spawn(&args)).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let all = assert_complete(&out, 6);
    assert_eq!(servers_used(&all), BTreeSet::from([open.addr.clone()]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_with_several_addresses_is_several_servers() {
    // Two servers on one port of two loopback addresses, and a name that resolves to both. The
    // rollout runs in a mount namespace of its own whose /etc/hosts says so (root, `unshare`), so
    // the real system resolver answers, as it would for a Kubernetes headless Service.
    let model = FakeLlm::start(script(0)).await.unwrap();
    let first = Serve::start(["--addr", "127.0.0.2:0"]).await;
    let port = first.addr.rsplit(':').next().unwrap().to_string();
    let second = Serve::start(["--addr", &format!("127.0.0.3:{port}")]).await;
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(
        &hosts,
        "127.0.0.1 localhost\n127.0.0.2 envs.codegym.test\n127.0.0.3 envs.codegym.test\n",
    )
    .unwrap();
    let out = dir.path().join("dns.jsonl");
    let tasks = task_ids(4);
    let name = format!("http://envs.codegym.test:{port}");
    let mut args = with_hosts_file(&hosts);
    args.extend(pool_args(&model.base_url(), &tasks, 2, &out, &[name]));
    args.extend(["--concurrency".to_string(), "4".to_string()]);
    let (code, stdout, stderr) = finish(spawn_program("unshare", &args)).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let all = assert_complete(&out, 8);
    assert_eq!(
        servers_used(&all),
        BTreeSet::from([first.addr.clone(), second.addr.clone()])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_env_servers_and_pool_settings_are_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never.jsonl");
    let tasks = task_ids(1);
    let config = dir.path().join("pool.json");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["https://127.0.0.1:1".into()], "not supported"),
        (vec!["127.0.0.1:1".into()], "expected http://host:port"),
        (
            vec!["http://no-such-host.invalid:1".into()],
            "cannot resolve no-such-host.invalid",
        ),
    ];
    for (servers, why) in cases {
        let args = pool_args("http://127.0.0.1:1/v1", &tasks, 1, &out, &servers);
        let (code, _, stderr) = finish(spawn(&args)).await;
        assert_ne!(code, 0, "{servers:?}");
        assert!(stderr.contains(why), "{servers:?}: {stderr}");
        assert!(!out.exists());
    }
    for (json, why) in [
        (
            r#"{"env_pool": {"call_timeout_secs": -1}}"#,
            "env_pool.call_timeout_secs must be a positive number",
        ),
        (r#"{"env_pool": {"max_restart": 1}}"#, "max_restart"),
    ] {
        std::fs::write(&config, json).unwrap();
        let mut args = pool_args(
            "http://127.0.0.1:1/v1",
            &tasks,
            1,
            &out,
            &["http://127.0.0.1:1".into()],
        );
        args.extend(["--config".to_string(), config.display().to_string()]);
        let (code, _, stderr) = finish(spawn(&args)).await;
        assert_ne!(code, 0, "{json}");
        assert!(stderr.contains(why), "{json}: {stderr}");
        assert!(!out.exists());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_appears_behind_the_name_joins_the_pool() {
    // The name first resolves to one server; mid-run /etc/hosts (in the rollout's own mount
    // namespace, rewritten in place) adds a second, which the periodic re-resolution picks up.
    let model = FakeLlm::start(script(200)).await.unwrap();
    let first = Serve::start(["--addr", "127.0.0.4:0"]).await;
    let port = first.addr.rsplit(':').next().unwrap().to_string();
    let second = Serve::start(["--addr", &format!("127.0.0.5:{port}")]).await;
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n127.0.0.4 grow.codegym.test\n").unwrap();
    let config = dir.path().join("pool.json");
    std::fs::write(&config, r#"{"env_pool": {"resolve_interval_secs": 0.1}}"#).unwrap();
    let out = dir.path().join("grow.jsonl");
    let tasks = task_ids(4);
    let name = format!("http://grow.codegym.test:{port}");
    let mut args = with_hosts_file(&hosts);
    args.extend(pool_args(&model.base_url(), &tasks, 4, &out, &[name]));
    args.extend([
        "--concurrency".to_string(),
        "2".to_string(),
        "--config".to_string(),
        config.display().to_string(),
    ]);
    let run = spawn_program("unshare", &args);
    let started = tokio::time::Instant::now();
    while records_so_far(&out) < 2 {
        assert!(started.elapsed() < LIMIT, "no records");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::write(
        &hosts,
        "127.0.0.1 localhost\n127.0.0.4 grow.codegym.test\n127.0.0.5 grow.codegym.test\n",
    )
    .unwrap();
    let (code, stdout, stderr) = finish(run).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let all = assert_complete(&out, 16);
    assert!(
        all.iter()
            .take(2)
            .all(|r| r.env_server.as_deref() == Some(first.addr.as_str())),
        "the first episodes ran before the second server was listed"
    );
    assert_eq!(
        servers_used(&all),
        BTreeSet::from([first.addr.clone(), second.addr.clone()]),
        "the server that appeared got no session"
    );
}
