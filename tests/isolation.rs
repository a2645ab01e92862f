//! Isolation through every surface a client uses, against the real `codegym serve` over TCP, on
//! both sandbox backends: 40 isolation probes at once through gRPC `Evaluate`, through 40
//! `Session` streams (script and session mode) and through SandboxFusion's `/run_code` (Python
//! and C++). Each probe reports from inside what it can see of the others; the checks are the
//! sandbox crate's (`sandbox/tests/support/isolation.rs`).
//!
//! Also: the sandbox's isolation is visible to clients and operators (`ListEnvs` metadata,
//! `/v1/sandbox`, Prometheus, `codegym doctor --json`), and a server whose sandbox is below the
//! required level refuses to start unless asked for less.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;
#[path = "../sandbox/tests/support/isolation.rs"]
mod isolation;

use std::process::Stdio;

use codegym_bin::{BIN, LIMIT, command, finish};
use env_core::Value;
use isolation::Expect;
use proto::convert::{value_from_proto, value_to_proto};
use proto::v1;
use proto::v1::env_service_client::EnvServiceClient;
use proto::v1::session_request::Kind as Req;
use proto::v1::session_response::Kind as Resp;
use serde_json::{Value as Json, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_stream::wrappers::ReceiverStream;

/// Probes in flight at once through each surface.
const N: usize = 40;
/// How long each probe stays alive: long enough that 32 of the 40 overlap even when the two
/// backends' tests start their 40 sessions at once on two cores (at 2.5 s, session-mode runs on
/// a loaded host reached 27-31).
const HOLD_MS: u64 = 4_000;

/// A running `codegym serve` with its three listeners.
struct Server {
    child: tokio::process::Child,
    grpc: String,
    http: String,
    metrics: String,
    _dir: tempfile::TempDir,
}

/// Reads stdout lines until one starts with `prefix`; returns the rest.
async fn line_with(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    prefix: &str,
) -> String {
    tokio::time::timeout(LIMIT, async {
        while let Some(line) = lines.next_line().await.expect("server stdout") {
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.to_string();
            }
        }
        panic!("the server ended before printing {prefix:?}")
    })
    .await
    .expect("the server prints its addresses")
}

/// `codegym serve` (program `program`, e.g. a copy run as another user) with every listener and
/// room for [`N`] runs at once on `backend`.
#[allow(clippy::disallowed_methods)] // the test runs the server binary under test
async fn start(program: &str, pre: &[&str], backend: &str, extra: &[&str]) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.json");
    let sandbox = json!({"backend": backend, "max_concurrent": N,
                         "limits": {"wall_ms": 60_000}});
    std::fs::write(&config, json!({"coding": {"sandbox": sandbox}}).to_string()).unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let mut args: Vec<String> = pre.iter().map(|s| s.to_string()).collect();
    args.extend(
        [
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
            "--config",
        ]
        .map(String::from),
    );
    args.push(config.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut child = command(program, &args)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn codegym serve");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let grpc = line_with(&mut lines, "listening on ").await;
    let http = line_with(&mut lines, "http listening on ").await;
    let metrics = line_with(&mut lines, "metrics listening on ").await;
    Server {
        child,
        grpc,
        http,
        metrics,
        _dir: dir,
    }
}

impl Server {
    async fn client(&self) -> EnvServiceClient<tonic::transport::Channel> {
        EnvServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .expect("connect")
    }
}

/// Probe `i` of `n` as a whole program (its parameters on a replaced stdin: env steps take no
/// stdin).
fn python_program(i: usize, n: usize) -> String {
    let stdin = String::from_utf8(isolation::python_stdin(i, n, HOLD_MS)).unwrap();
    format!(
        "import io, sys\nsys.stdin = io.StringIO({stdin:?})\n{}",
        isolation::PYTHON_PROBE
    )
}

/// The probe's report from a step's observation (the program's execution result).
fn report_of(obs: Option<v1::Value>) -> Json {
    match value_from_proto(obs.expect("an observation")).expect("a value") {
        Value::Execution(e) => {
            assert_eq!(e.exit_code, Some(0), "probe failed: {e:?}");
            isolation::parse(e.stdout.as_str()).unwrap_or_else(|e| panic!("{e}"))
        }
        other => panic!("not an execution result: {other:?}"),
    }
}

async fn through_evaluate(server: &Server) -> Vec<Json> {
    let items = (0..N)
        .map(|i| v1::EvaluateItem {
            seed: None,
            options_json: json!({"task_id": "hello-world"}).to_string(),
            action: Some(value_to_proto(&Value::Text(python_program(i, N)))),
        })
        .collect();
    let response = server
        .client()
        .await
        .evaluate(v1::EvaluateRequest {
            env_id: "codegym/Code-v0".into(),
            kwargs_json: String::new(),
            items,
        })
        .await
        .expect("Evaluate")
        .into_inner();
    response
        .results
        .into_iter()
        .map(|r| {
            report_of(
                r.step
                    .unwrap_or_else(|| panic!("item error: {:?}", r.error))
                    .observation,
            )
        })
        .collect()
}

/// One episode over its own `Session` stream: make, reset, one step with probe `i`.
async fn one_stream(server: &Server, mode: &str, i: usize) -> Json {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut responses = server
        .client()
        .await
        .session(ReceiverStream::new(rx))
        .await
        .expect("Session")
        .into_inner();
    let requests = [
        Req::Make(v1::MakeRequest {
            env_id: "codegym/Code-v0".into(),
            kwargs_json: json!({"mode": mode}).to_string(),
        }),
        Req::Reset(v1::ResetRequest {
            session_id: String::new(),
            seed: None,
            options_json: json!({"task_id": "hello-world"}).to_string(),
        }),
        Req::Step(v1::StepRequest {
            session_id: String::new(),
            action: Some(value_to_proto(&Value::Text(python_program(i, N)))),
        }),
    ];
    let mut last = None;
    for (id, kind) in requests.into_iter().enumerate() {
        tx.send(v1::SessionRequest {
            request_id: id as u64,
            kind: Some(kind),
        })
        .await
        .expect("send");
        let r = responses
            .message()
            .await
            .expect("stream")
            .expect("a response");
        last = Some(r.kind.expect("kind"));
    }
    match last {
        Some(Resp::Step(step)) => report_of(step.observation),
        other => panic!("step: {other:?}"),
    }
}

async fn through_streams(server: &Server, mode: &str) -> Vec<Json> {
    futures::future::join_all((0..N).map(|i| one_stream(server, mode, i))).await
}

/// `/run_code` with `language` (`python`, or `cpp` for the C probe) and the probe's parameters on
/// stdin.
async fn through_run_code(server: &Server, language: &str) -> Vec<Json> {
    let http = reqwest::Client::new();
    let runs = (0..N).map(|i| {
        let (code, stdin) = match language {
            "python" => (
                isolation::PYTHON_PROBE,
                isolation::python_stdin(i, N, HOLD_MS),
            ),
            _ => (isolation::C_PROBE, isolation::c_stdin(i, N, HOLD_MS)),
        };
        let body = json!({"code": code, "language": language, "run_timeout": 60,
                          "stdin": String::from_utf8(stdin).unwrap()});
        let http = http.clone();
        let url = format!("http://{}/run_code", server.http);
        async move {
            let r: Json = http
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(r["status"], "Success", "{r}");
            isolation::parse(r["run_result"]["stdout"].as_str().unwrap_or_default())
                .unwrap_or_else(|e| panic!("{e}"))
        }
    });
    futures::future::join_all(runs).await
}

async fn every_surface(backend: &str) {
    let server = start(BIN, &[], backend, &[]).await;
    // Warm-fork script runs share one empty network namespace (Landlock scopes abstract sockets);
    // fresh runs, sessions and compiled runs each have their own.
    let scripts = Expect {
        own_net: backend == "fresh",
    };
    let own = Expect { own_net: true };
    let cases: [(&str, Vec<Json>, Expect); 5] = [
        ("Evaluate", through_evaluate(&server).await, scripts),
        (
            "Session streams",
            through_streams(&server, "script").await,
            scripts,
        ),
        (
            "Session streams, session mode",
            through_streams(&server, "session").await,
            own,
        ),
        (
            "/run_code python",
            through_run_code(&server, "python").await,
            scripts,
        ),
        ("/run_code cpp", through_run_code(&server, "cpp").await, own),
    ];
    for (surface, reports, expect) in cases {
        isolation::assert_isolated(&format!("{backend}: {surface}"), &reports, expect, 32);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_surface_isolates_concurrent_runs_on_the_warm_backend() {
    every_surface("warm_fork").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_surface_isolates_concurrent_runs_on_the_fresh_backend() {
    every_surface("fresh").await;
}

/// The sandbox as a client sees it in `ListEnvs` (the coding env's metadata), as the HTTP
/// facade's `/v1/sandbox` says, and as Prometheus exports it: each must agree on `level`, and
/// on whether the PID namespace layer is active.
async fn assert_visible(server: &Server, level: &str, pid_ns: bool) {
    let envs = server
        .client()
        .await
        .list_envs(v1::ListEnvsRequest {})
        .await
        .expect("ListEnvs")
        .into_inner()
        .envs;
    let coding = envs
        .iter()
        .find(|e| e.id == "codegym/Code-v0")
        .expect("the coding env");
    let metadata: Json = serde_json::from_str(&coding.metadata_json).expect("metadata JSON");
    let http: Json = reqwest::get(format!("http://{}/v1/sandbox", server.http))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for (surface, info) in [("ListEnvs", &metadata["sandbox"]), ("/v1/sandbox", &http)] {
        assert_eq!(info["isolation_level"], level, "{surface}: {info}");
        assert_eq!(info["required_level"], level, "{surface}: {info}");
        let layer = info["layers"]
            .as_array()
            .and_then(|l| l.iter().find(|l| l["name"] == "pid namespace"))
            .unwrap_or_else(|| panic!("{surface}: no pid namespace layer in {info}"));
        assert_eq!(layer["active"], pid_ns, "{surface}: {layer}");
        assert!(
            info["languages"]
                .as_array()
                .is_some_and(|l| l.contains(&json!("python"))),
            "{surface}: {info}"
        );
    }
    let body = reqwest::get(format!("http://{}/metrics", server.metrics))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let want_layer = format!(
        "codegym_sandbox_isolation_layer{{layer=\"pid namespace\"}} {}",
        u8::from(pid_ns)
    );
    let want_level = format!(
        "codegym_sandbox_isolation_level {}",
        match level {
            "strict" => 2,
            "basic" => 1,
            _ => 0,
        }
    );
    for want in [want_layer, want_level] {
        assert!(body.lines().any(|l| l == want), "no `{want}` in:\n{body}");
    }
}

/// `codegym doctor --json` (through `pre`, e.g. as another user): its exit code and report.
async fn doctor(program: &str, pre: &[&str], extra: &[&str]) -> (i32, Json) {
    let mut args: Vec<&str> = pre.to_vec();
    args.extend(["doctor", "--json"]);
    args.extend(extra);
    let (code, stdout, stderr) = finish(codegym_bin::spawn_program(program, &args)).await;
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("doctor --json printed no JSON ({e}): {stdout}\n{stderr}"));
    (code, report)
}

#[tokio::test]
async fn the_isolation_level_is_visible_to_clients_and_operators() {
    let mut server = start(BIN, &[], "auto", &[]).await;
    assert_visible(&server, "strict", true).await;
    let (code, report) = doctor(BIN, &[], &[]).await;
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["isolation_level"], "strict", "{report}");
    assert_eq!(report["meets_required_level"], true, "{report}");
    server.child.kill().await.unwrap();
}

/// The same server as an unprivileged user, where namespaces are refused: the sandbox reaches
/// only `basic`. `serve` and `doctor` refuse it and say which layers are missing, unless the
/// user asks for less; then every surface says `basic`.
#[tokio::test]
async fn a_degraded_sandbox_is_refused_unless_asked_for() {
    // A copy of the binary an unprivileged user can run (the build dir may be private).
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("codegym");
    std::fs::copy(BIN, &bin).unwrap();
    for path in [dir.path(), bin.as_path()] {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    let bin = bin.to_str().unwrap();
    // setpriv (util-linux) drops to nobody; Debian's python3 (a root-only pyenv install is not
    // readable by nobody).
    let nobody = [
        "--reuid",
        "65534",
        "--regid",
        "65534",
        "--clear-groups",
        "env",
        "CODEGYM_PYTHON=/usr/bin/python3",
        bin,
    ];
    let refused = finish(codegym_bin::spawn_program(
        "setpriv",
        nobody
            .iter()
            .copied()
            .chain(["serve", "--addr", "127.0.0.1:0"]),
    ))
    .await;
    assert_ne!(refused.0, 0, "a basic sandbox was served: {refused:?}");
    assert!(
        refused.2.contains("below the required strict")
            && refused.2.contains("[ ] pid namespace")
            && refused.2.contains("--isolation basic"),
        "the refusal says neither why nor how to accept less:\n{}",
        refused.2
    );
    let (code, report) = doctor("setpriv", &nobody, &[]).await;
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["isolation_level"], "basic", "{report}");
    assert_eq!(report["meets_required_level"], false, "{report}");
    let (code, _) = doctor("setpriv", &nobody, &["--isolation", "basic"]).await;
    assert_eq!(code, 0);

    let mut server = start("setpriv", &nobody, "auto", &["--isolation", "basic"]).await;
    assert_visible(&server, "basic", false).await;
    server.child.kill().await.unwrap();
}
