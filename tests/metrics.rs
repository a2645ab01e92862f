//! Prometheus metrics end to end: the real `codegym serve` and `codegym rollout` binaries with
//! `--metrics-addr`, scraped over HTTP and parsed as the Prometheus text format by a real parser
//! (`prometheus-parse`); the counters must move with real sandboxed steps, errors and model calls.
//! The binaries run through `support/codegym_bin.rs`.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;
#[path = "support/rollout_util.rs"]
mod rollout_util;

use std::time::Duration;

use codegym_bin::{LIMIT, finish, spawn};
use env_core::Value;
use fake_llm::{FakeLlm, Fault, FaultRule};
use proto::convert::value_to_proto;
use proto::v1;
use proto::v1::env_service_client::EnvServiceClient;
use rollout_util::{rollout_args, script, task_ids};
use tokio::io::{AsyncBufReadExt, BufReader};

/// One scrape, parsed.
async fn scrape(addr: &str) -> prometheus_parse::Scrape {
    let resp = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("scrape /metrics");
    assert!(resp.status().is_success(), "{}", resp.status());
    let ctype = resp.headers()[reqwest::header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_string();
    assert!(ctype.starts_with("text/plain"), "{ctype}");
    let body = resp.text().await.unwrap();
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .unwrap_or_else(|e| panic!("not the Prometheus text format ({e}):\n{body}"))
}

/// The value of the sample `name` whose labels include `labels` (0 when absent: a counter not yet
/// incremented is not exported). Histograms are read through their `_count` / `_sum` samples.
fn value(s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    use prometheus_parse::Value as V;
    s.samples
        .iter()
        .filter(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match &x.value {
            V::Counter(v) | V::Gauge(v) | V::Untyped(v) => *v,
            V::Histogram(h) => h.last().map_or(0.0, |b| b.count),
            V::Summary(_) => f64::NAN,
        })
        .sum()
}

fn has_type(s: &prometheus_parse::Scrape, name: &str) -> bool {
    s.samples.iter().any(|x| x.metric == name)
}

/// Reads stdout lines until one starts with `prefix`; returns the rest.
async fn line_with(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    prefix: &str,
) -> String {
    let found = tokio::time::timeout(LIMIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.trim().to_string();
            }
        }
        panic!("no line starting with {prefix:?}")
    })
    .await;
    found.expect("the server prints its addresses")
}

/// Pids of the warm fork servers whose parent is `parent` (the server process).
fn fork_servers(parent: u32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        let ppid = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .and_then(|v| v.trim().parse::<u32>().ok());
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if ppid == Some(parent)
            && String::from_utf8_lossy(&cmdline).contains("The fork server of the warm-fork")
        {
            out.push(pid);
        }
    }
    out
}

fn code(text: &str) -> Option<v1::Value> {
    Some(value_to_proto(&Value::Text(text.into())))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_metrics_follow_sessions_steps_executions_and_errors() {
    let mut child = spawn([
        "serve",
        "--addr",
        "127.0.0.1:0",
        "--metrics-addr",
        "127.0.0.1:0",
    ]);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let grpc = line_with(&mut lines, "listening on ").await;
    let metrics = line_with(&mut lines, "metrics listening on ").await;

    let before = scrape(&metrics).await;
    assert_eq!(value(&before, "codegym_sessions_open", &[]), 0.0);
    assert_eq!(value(&before, "codegym_steps_total", &[]), 0.0);

    let mut c = EnvServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    let make = |env: &str| v1::MakeRequest {
        env_id: env.into(),
        kwargs_json: String::new(),
    };
    let id = c
        .make(make("codegym/Code-v0"))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let open = scrape(&metrics).await;
    assert_eq!(value(&open, "codegym_sessions_open", &[]), 1.0);

    c.reset(v1::ResetRequest {
        session_id: id.clone(),
        seed: None,
        options_json: r#"{"task_id": "sum-of-squares"}"#.into(),
    })
    .await
    .unwrap();
    // A crashing program: an outcome (a running step, an `exit_nonzero` execution), not an error.
    c.step(v1::StepRequest {
        session_id: id.clone(),
        action: code("raise ValueError('x')"),
    })
    .await
    .unwrap();
    let solution = "print(f\"Result: {sum(i * i for i in range(1, 101))}\")";
    let solved = c
        .step(v1::StepRequest {
            session_id: id.clone(),
            action: code(solution),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(solved.terminated);
    // Three kinds of failure, each counted under its own gRPC code.
    let e = c.make(make("nope/Missing-v0")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    let e = c
        .step(v1::StepRequest {
            session_id: id.clone(),
            action: code(solution),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    let e = c
        .step(v1::StepRequest {
            session_id: id.clone(),
            action: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);

    let after = scrape(&metrics).await;
    assert_eq!(
        value(&after, "codegym_steps_total", &[("outcome", "running")]),
        1.0
    );
    assert_eq!(
        value(&after, "codegym_steps_total", &[("outcome", "terminated")]),
        1.0
    );
    let ok = value(
        &after,
        "codegym_sandbox_executions_total",
        &[("outcome", "success")],
    );
    let failed = value(
        &after,
        "codegym_sandbox_executions_total",
        &[("outcome", "exit_nonzero")],
    );
    assert!(
        ok >= 1.0 && failed >= 1.0,
        "success {ok}, exit_nonzero {failed}"
    );
    assert_eq!(
        value(
            &after,
            "codegym_sandbox_executions_total",
            &[("outcome", "error")]
        ),
        0.0
    );
    // Every finished run has a latency sample; no run is queued or in flight any more.
    assert_eq!(
        value(&after, "codegym_sandbox_run_seconds", &[]),
        ok + failed
    );
    assert!(has_type(&after, "codegym_sandbox_run_seconds"));
    assert_eq!(value(&after, "codegym_sandbox_runs_in_flight", &[]), 0.0);
    assert_eq!(value(&after, "codegym_sandbox_queue_depth", &[]), 0.0);
    for code in ["NOT_FOUND", "FAILED_PRECONDITION", "INVALID_ARGUMENT"] {
        assert_eq!(
            value(&after, "codegym_grpc_errors_total", &[("code", code)]),
            1.0,
            "{code}"
        );
    }

    c.close(v1::CloseRequest { session_id: id }).await.unwrap();
    let closed = scrape(&metrics).await;
    assert_eq!(value(&closed, "codegym_sessions_open", &[]), 0.0);

    // A dead fork server is replaced on the next run, and counted.
    let servers = fork_servers(child.id().expect("serve runs"));
    assert_eq!(servers.len(), 1, "one warm fork server: {servers:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(servers[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let id = c
        .make(make("codegym/Code-v0"))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    c.reset(v1::ResetRequest {
        session_id: id.clone(),
        seed: None,
        options_json: r#"{"task_id": "sum-of-squares"}"#.into(),
    })
    .await
    .unwrap();
    // Another program than before: the same one would be a verdict-cache hit and run nothing.
    let step = c
        .step(v1::StepRequest {
            session_id: id,
            action: code(&format!("{solution}  # after the restart")),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(step.terminated, "the run after the restart succeeds");
    let restarted = scrape(&metrics).await;
    assert_eq!(
        value(
            &restarted,
            "codegym_sandbox_fork_server_restarts_total",
            &[]
        ),
        1.0
    );
    assert_eq!(
        value(
            &restarted,
            "codegym_sandbox_executions_total",
            &[("outcome", "error")]
        ),
        0.0
    );

    // Only /metrics is served.
    let other = reqwest::get(format!("http://{metrics}/admin"))
        .await
        .unwrap();
    assert_eq!(other.status(), reqwest::StatusCode::NOT_FOUND);
}

/// Every kind of run is admitted and counted the same way: a C++ program (its compile and
/// its run each hold a slot; the execution is counted once), one that does not compile, and a
/// Python script, all through `/run_code`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_in_every_language_are_counted() {
    let mut child = spawn([
        "serve",
        "--addr",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--metrics-addr",
        "127.0.0.1:0",
    ]);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let http = line_with(&mut lines, "http listening on ").await;
    let metrics = line_with(&mut lines, "metrics listening on ").await;
    let run = |body: serde_json::Value| {
        let http = http.clone();
        async move {
            let r: serde_json::Value = reqwest::Client::new()
                .post(format!("http://{http}/run_code"))
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            r
        }
    };
    let c = run(serde_json::json!({"language": "cpp",
        "code": "#include <cstdio>\nint main() { std::puts(\"hi\"); return 0; }\n"}))
    .await;
    assert_eq!(c["status"], "Success", "{c}");
    let broken = run(serde_json::json!({"language": "cpp", "code": "int main( {"})).await;
    assert_eq!(broken["compile_result"]["status"], "Finished", "{broken}");
    assert_ne!(broken["compile_result"]["return_code"], 0, "{broken}");
    let py = run(serde_json::json!({"language": "python", "code": "raise SystemExit(3)"})).await;
    assert_eq!(py["run_result"]["return_code"], 3, "{py}");

    let after = scrape(&metrics).await;
    let outcome = |o: &str| {
        value(
            &after,
            "codegym_sandbox_executions_total",
            &[("outcome", o)],
        )
    };
    assert_eq!(outcome("success"), 1.0, "the C++ program");
    assert_eq!(
        outcome("exit_nonzero"),
        2.0,
        "the C++ that does not compile, the Python"
    );
    assert_eq!(value(&after, "codegym_sandbox_run_seconds", &[]), 3.0);
    assert_eq!(value(&after, "codegym_sandbox_runs_in_flight", &[]), 0.0);
    assert_eq!(value(&after, "codegym_sandbox_queue_depth", &[]), 0.0);
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_metrics_port_stops_serve_with_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let child = spawn(["serve", "--addr", "127.0.0.1:0", "--metrics-addr", &addr]);
    let (code, _, stderr) = finish(child).await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains(&format!("cannot listen on {addr} (metrics)")),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_metrics_count_episodes_model_calls_retries_tokens_and_env_calls() {
    // Slow answers keep the run alive long enough to scrape it between episodes; the first
    // request is rate-limited once (a retry of class `rate_limited`).
    let mut fake = script(400);
    fake.faults = vec![FaultRule::at(
        Fault::RateLimited {
            retry_after_secs: None,
            retry_after_ms: Some(10),
        },
        [0],
    )];
    let server = FakeLlm::start(fake).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("metrics.jsonl");
    let tasks = task_ids(4);
    let mut args = rollout_args(&server.base_url(), &tasks, 1, &out);
    args.extend(["--concurrency", "1", "--metrics-addr", "127.0.0.1:0"].map(String::from));
    let mut child = spawn(&args);
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let metrics = tokio::time::timeout(LIMIT, async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            if let Some(rest) = line.strip_prefix("metrics listening on ") {
                return rest.trim().to_string();
            }
        }
        panic!("no metrics line on stderr")
    })
    .await
    .unwrap();
    // Scrape until two episodes are done (two more are still to play, ~1 s each at least).
    let scrape = tokio::time::timeout(LIMIT, async {
        loop {
            let s = scrape(&metrics).await;
            if value(&s, "codegym_rollout_episodes_total", &[]) >= 2.0 {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("two episodes finish while the run is still serving metrics");
    let episodes = value(&scrape, "codegym_rollout_episodes_total", &[]);
    let solved = value(
        &scrape,
        "codegym_rollout_episodes_total",
        &[("solved", "true")],
    );
    let unsolved = value(
        &scrape,
        "codegym_rollout_episodes_total",
        &[("solved", "false")],
    );
    assert_eq!(solved + unsolved, episodes);
    assert_eq!(
        value(&scrape, "codegym_rollout_episode_seconds", &[]),
        episodes
    );
    assert_eq!(
        value(
            &scrape,
            "codegym_rollout_model_retries_total",
            &[("kind", "rate_limited")]
        ),
        1.0
    );
    let calls = value(
        &scrape,
        "codegym_rollout_model_calls_total",
        &[("outcome", "ok")],
    );
    assert!(
        calls >= episodes,
        "{calls} model calls for {episodes} episodes"
    );
    assert!(
        value(
            &scrape,
            "codegym_rollout_tokens_total",
            &[("type", "completion")]
        ) > 0.0
    );
    assert!(
        value(
            &scrape,
            "codegym_rollout_tokens_total",
            &[("type", "prompt")]
        ) > 0.0
    );
    let makes = value(
        &scrape,
        "codegym_rollout_env_calls_total",
        &[("op", "make"), ("outcome", "ok")],
    );
    let steps = value(
        &scrape,
        "codegym_rollout_env_calls_total",
        &[("op", "step"), ("outcome", "ok")],
    );
    assert!(
        makes >= episodes && steps >= episodes,
        "make {makes}, step {steps}"
    );
    // The in-process coding env's sandbox reports through the same recorder.
    // (Not one per step: identical submissions share a verdict from the cache.)
    assert!(value(&scrape, "codegym_sandbox_executions_total", &[]) >= 1.0);
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
}
