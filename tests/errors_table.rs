//! The one error table, end to end: a real `codegym serve --http` over TCP, every failure provoked
//! through every door where it can arise (gRPC unary, the `Session` stream, OpenEnv HTTP, OpenEnv
//! WebSocket, SandboxFusion `/run_code` and `/submit`), and every answer checked against the row the
//! table (`codegym::server::status::TABLE`) gives that failure: the gRPC code, the HTTP status and
//! FastAPI's `{"detail": ...}` shape, the WebSocket error code.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;

use std::ffi::OsStr;
use std::time::Duration;

use codegym::server::status::{Row, ServerError};
use env_core::EnvError;
use futures::{SinkExt, StreamExt};
use proto::v1::env_service_client::EnvServiceClient;
use proto::v1::{self, session_request::Kind as Req, session_response::Kind as Resp};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio_tungstenite::tungstenite::{self, Message};
use tonic::Code;

/// A `codegym serve --http 127.0.0.1:0` process, killed on drop.
struct Serve {
    child: Child,
    grpc: String,
    http: String,
    _dir: tempfile::TempDir,
}

const HUMANEVAL: &str = r#"{"task_id": "HumanEval/0", "prompt": "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n", "canonical_solution": "    return a + b\n", "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n", "entry_point": "add"}
"#;

impl Serve {
    /// Starts the server with `args` and the `config` file, serving one HumanEval dataset (`he`).
    async fn start(args: &[&str], config: Value) -> Serve {
        Serve::start_with_env(args, config, &[]).await
    }

    /// [`Serve::start`] with `env` set for the server.
    #[allow(clippy::disallowed_methods)] // the test runs the server binary under test
    async fn start_with_env(args: &[&str], config: Value, env: &[(&str, &str)]) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let he = dir.path().join("he.jsonl");
        std::fs::write(&he, HUMANEVAL).unwrap();
        let config_path = dir.path().join("config.json");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let mut all: Vec<&OsStr> = vec![OsStr::new("serve")];
        let fixed = ["--addr", "127.0.0.1:0", "--http", "127.0.0.1:0"];
        all.extend(fixed.iter().map(OsStr::new));
        all.extend(args.iter().map(OsStr::new));
        let dataset = format!("he={}", he.display());
        all.extend([OsStr::new("--http-dataset"), OsStr::new(&dataset)]);
        all.extend([OsStr::new("--config"), config_path.as_os_str()]);
        let mut child = codegym_bin::command(codegym_bin::BIN, all)
            .stderr(std::process::Stdio::inherit())
            .envs(env.iter().copied())
            .spawn()
            .expect("spawn codegym serve");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut next = async || {
            tokio::time::timeout(codegym_bin::LIMIT, lines.next_line())
                .await
                .expect("the server prints its addresses")
                .unwrap()
                .expect("a line")
        };
        let grpc = next().await;
        let http = next().await;
        Serve {
            child,
            grpc: grpc.strip_prefix("listening on ").unwrap().to_string(),
            http: http.strip_prefix("http listening on ").unwrap().to_string(),
            _dir: dir,
        }
    }

    async fn client(&self) -> EnvServiceClient<tonic::transport::Channel> {
        EnvServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .unwrap()
    }

    /// A unary session of `env`, made and reset.
    async fn unary_session(&self, env: &str) -> String {
        let mut c = self.client().await;
        let id = c.make(make(env)).await.unwrap().into_inner().session_id;
        let reset = v1::ResetRequest {
            session_id: id.clone(),
            ..Default::default()
        };
        c.reset(reset).await.unwrap();
        id
    }

    /// The code a unary `make` of `env` fails with.
    async fn unary_make_fails(&self, env: &str) -> Code {
        self.client()
            .await
            .make(make(env))
            .await
            .unwrap_err()
            .code()
    }

    /// The answers of a `Session` stream to `requests`, in order.
    async fn stream(&self, requests: Vec<Req>) -> Vec<Resp> {
        self.stream_kinds(requests.into_iter().map(Some).collect())
            .await
    }

    /// [`Serve::stream`], where a request may have no operation.
    async fn stream_kinds(&self, requests: Vec<Option<Req>>) -> Vec<Resp> {
        let n = requests.len();
        let requests = requests
            .into_iter()
            .enumerate()
            .map(|(i, kind)| v1::SessionRequest {
                request_id: i as u64,
                kind,
            });
        let mut answers = self
            .client()
            .await
            .session(futures::stream::iter(requests).chain(futures::stream::pending()))
            .await
            .unwrap()
            .into_inner();
        let mut out = Vec::new();
        while out.len() < n {
            let answer = answers.message().await.unwrap().expect("an answer");
            out.push(answer.kind.unwrap());
        }
        out
    }

    async fn post(&self, path: &str, body: &str) -> (u16, Value) {
        self.post_as(None, path, body).await.0
    }

    /// A POST with `token` as its bearer token: the status and body, and the response's headers.
    async fn post_as(
        &self,
        token: Option<&str>,
        path: &str,
        body: &str,
    ) -> ((u16, Value), reqwest::header::HeaderMap) {
        let mut request = reqwest::Client::new()
            .post(format!("http://{}{path}", self.http))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        ((status, response.json().await.unwrap()), headers)
    }

    /// An OpenEnv WebSocket: its answer to the last of `frames` (to none: the refusal frame), or
    /// the HTTP status the upgrade was refused with.
    async fn ws(&self, env: &str, frames: &[Value]) -> Result<Value, u16> {
        let url = format!("ws://{}/openenv/{env}/ws", self.http);
        let mut ws = match tokio_tungstenite::connect_async(url).await {
            Ok((ws, _)) => ws,
            Err(tungstenite::Error::Http(response)) => return Err(response.status().as_u16()),
            Err(e) => panic!("{e}"),
        };
        let mut answer = None;
        for frame in frames
            .iter()
            .map(Some)
            .chain(frames.is_empty().then_some(None))
        {
            if let Some(frame) = frame {
                let text = frame.to_string();
                ws.send(Message::Text(text.into())).await.unwrap();
            }
            answer = loop {
                match ws.next().await {
                    Some(Ok(Message::Text(text))) => break serde_json::from_str(&text).ok(),
                    Some(Ok(_)) => continue,
                    _ => panic!("the socket closed without a frame"),
                }
            };
        }
        Ok(answer.expect("a JSON frame"))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn make(env: &str) -> v1::MakeRequest {
    v1::MakeRequest {
        env_id: env.into(),
        kwargs_json: String::new(),
    }
}

fn step(action: i64) -> v1::StepRequest {
    v1::StepRequest {
        action: Some(proto::convert::value_to_proto(&env_core::Value::Discrete(
            action,
        ))),
        ..Default::default()
    }
}

fn row(e: impl Into<ServerError>) -> &'static Row {
    e.into().row()
}

/// An HTTP answer in the table's status and FastAPI's shape.
fn assert_http(row: &Row, (status, body): &(u16, Value), what: &str) {
    assert_eq!(*status, row.http, "{what}: {body}");
    assert!(body.get("detail").is_some(), "{what}: {body}");
}

/// A stream's error answer with the table's code.
fn assert_stream(row: &Row, answer: &Resp, what: &str) {
    match answer {
        Resp::Error(e) => assert_eq!(e.code, row.grpc as i32, "{what}: {e:?}"),
        other => panic!("{what}: not an error: {other:?}"),
    }
}

fn assert_ws(code: &str, frame: &Value, what: &str) {
    assert_eq!(frame["type"], "error", "{what}: {frame}");
    assert_eq!(frame["data"]["code"], code, "{what}: {frame}");
}

const CARTPOLE: &str = "classic/CartPole-v1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_requests_fail_alike_on_every_door() {
    let serve = Serve::start(&[], json!({})).await;

    // An unknown env.
    let unknown = row(EnvError::NameNotFound {
        name: "nope/Nope".into(),
        suggestion: None,
    });
    assert_eq!(serve.unary_make_fails("nope/Nope-v0").await, unknown.grpc);
    let answers = serve.stream(vec![Req::Make(make("nope/Nope-v0"))]).await;
    assert_stream(unknown, &answers[0], "stream make");
    let reset = serve.post("/openenv/nope/Nope/reset", "{}").await;
    assert_http(unknown, &reset, "OpenEnv reset");
    assert_eq!(serve.ws("nope/Nope", &[]).await, Err(unknown.http));

    // An action outside the action space.
    let bad = row(EnvError::InvalidAction("7".into()));
    let id = serve.unary_session(CARTPOLE).await;
    let status = serve
        .client()
        .await
        .step(v1::StepRequest {
            session_id: id,
            ..step(7)
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), bad.grpc, "{status}");
    let reset = Req::Reset(v1::ResetRequest::default());
    let answers = serve
        .stream(vec![Req::Make(make(CARTPOLE)), reset, Req::Step(step(7))])
        .await;
    assert_stream(bad, &answers[2], "stream step");
    let http = serve
        .post(
            "/openenv/classic/CartPole-v1/step",
            r#"{"action": {"action": 7}}"#,
        )
        .await;
    assert_http(bad, &http, "OpenEnv step");
    assert_eq!(
        http.1["detail"].as_str().map(|d| d.contains("7")),
        Some(true)
    );
    let frame = serve
        .ws(
            "classic/CartPole-v1",
            &[
                json!({"type": "reset"}),
                json!({"type": "step", "data": {"action": 7}}),
            ],
        )
        .await
        .unwrap();
    assert_ws(bad.ws, &frame, "OpenEnv ws step");

    // A step before any reset.
    let early = row(EnvError::ResetNeeded);
    let answers = serve
        .stream(vec![Req::Make(make(CARTPOLE)), Req::Step(step(0))])
        .await;
    assert_stream(early, &answers[1], "stream step before reset");
    let frame = serve
        .ws(
            "classic/CartPole-v1",
            &[json!({"type": "step", "data": {"action": 0}})],
        )
        .await
        .unwrap();
    assert_ws(early.ws, &frame, "OpenEnv ws step before reset");

    // A session that is not there.
    let gone = row(ServerError::SessionNotFound(String::new()));
    let status = serve
        .client()
        .await
        .step(v1::StepRequest {
            session_id: "nope".into(),
            ..step(0)
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), gone.grpc);
    let none = row(ServerError::NoSession);
    let answers = serve.stream(vec![Req::Step(step(0))]).await;
    assert_stream(none, &answers[0], "stream step without make");

    // Bodies and arguments that are not JSON.
    let malformed = row(ServerError::InvalidBody(Value::Null));
    for path in ["/run_code", "/submit", "/openenv/classic/CartPole-v1/reset"] {
        assert_http(malformed, &serve.post(path, "{not json").await, path);
    }
    let convert = row(proto::convert::ConvertError::Missing("kwargs_json"));
    let mut c = serve.client().await;
    let request = v1::MakeRequest {
        env_id: CARTPOLE.into(),
        kwargs_json: "{not json".into(),
    };
    assert_eq!(c.make(request).await.unwrap_err().code(), convert.grpc);

    // SandboxFusion's own cases: an unknown dataset, an unknown prompt, an unknown route.
    let body = r#"{"dataset": "nope", "id": 0, "completion": ""}"#;
    let unknown_set = row(ServerError::UnknownDataset(String::new()));
    assert_http(unknown_set, &serve.post("/submit", body).await, "submit");
    let body = r#"{"dataset": "he", "id": "HumanEval/9", "completion": ""}"#;
    let unknown_prompt = row(ServerError::UnknownPrompt {
        dataset: String::new(),
        id: String::new(),
    });
    assert_http(unknown_prompt, &serve.post("/submit", body).await, "submit");
    let no_route = row(ServerError::NoRoute);
    assert_http(no_route, &serve.post("/nope", "{}").await, "no route");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_servers_and_greedy_clients_are_resource_exhausted_on_every_door() {
    // The server-wide cap: one session, held over gRPC.
    let serve = Serve::start(&["--max-sessions", "1"], json!({})).await;
    let _held = serve.unary_session(CARTPOLE).await;
    let frame = serve
        .refused_on_every_door(row(ServerError::TooManySessions(1)))
        .await;
    assert_eq!(frame["data"]["max_sessions"], 1);
    drop(serve);

    // The per-client cap: one session per client, counted over every door.
    let config = json!({"http": {"max_sessions_per_client": 1}});
    let serve = Serve::start(&[], config).await;
    let _held = serve.unary_session(CARTPOLE).await;
    let frame = serve
        .refused_on_every_door(row(ServerError::ClientCapReached(1)))
        .await;
    assert_eq!(frame["data"]["max_sessions_per_client"], 1);
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_server_is_unavailable_on_every_door() {
    let serve = Serve::start(&["--drain-secs", "60"], json!({})).await;
    let _open = serve.unary_session(CARTPOLE).await;
    let pid = nix::unistd::Pid::from_raw(serve.child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let draining = row(ServerError::ShuttingDown);
    // The signal is handled asynchronously: wait until the server says it drains.
    let mut code = Code::Ok;
    for _ in 0..100 {
        code = serve.unary_make_fails_or_ok(CARTPOLE).await;
        if code != Code::Ok {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(code, draining.grpc);
    serve.refused_on_every_door(draining).await;
    let run = serve.post("/run_code", r#"{"code": "print(1)"}"#).await;
    assert_http(draining, &run, "run_code");
    let body = r#"{"dataset": "he", "id": "HumanEval/0", "completion": ""}"#;
    assert_http(draining, &serve.post("/submit", body).await, "submit");
}

impl Serve {
    /// A new session of CartPole is refused with `row` on all four doors (gRPC unary and stream,
    /// OpenEnv HTTP and WebSocket); returns the WebSocket's refusal frame.
    async fn refused_on_every_door(&self, row: &Row) -> Value {
        assert_eq!(self.unary_make_fails(CARTPOLE).await, row.grpc);
        let answers = self.stream(vec![Req::Make(make(CARTPOLE))]).await;
        assert_stream(row, &answers[0], "stream make");
        let reset = self.post("/openenv/classic/CartPole-v1/reset", "{}").await;
        assert_http(row, &reset, "OpenEnv reset");
        let frame = self.ws("classic/CartPole-v1", &[]).await.unwrap();
        assert_ws(row.ws_refused, &frame, "OpenEnv ws");
        frame
    }

    /// `Code::Ok` when a unary `make` succeeds (the session is closed again), else its code.
    async fn unary_make_fails_or_ok(&self, env: &str) -> Code {
        let mut c = self.client().await;
        match c.make(make(env)).await {
            Ok(r) => {
                let session_id = r.into_inner().session_id;
                c.close(v1::CloseRequest { session_id }).await.unwrap();
                Code::Ok
            }
            Err(status) => status.code(),
        }
    }
}

/// The machinery behind the coding env fails (its sandbox's work directory is gone): every door
/// answers "unavailable, retry", and `/submit` no longer answers 500; `/run_code` reports it in
/// SandboxFusion's own way (HTTP 200, `SandboxError`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_sandbox_is_unavailable_not_an_internal_error() {
    let work = tempfile::tempdir().unwrap();
    let config = json!({"coding": {"sandbox": {"work_root": work.path()}}});
    let serve = Serve::start(&[], config).await;
    let python = "codegym/Python-v0";
    let id = serve.unary_session(python).await;
    // Every run needs a fresh work dir below the root: without the root, none can be made.
    std::fs::remove_dir_all(work.path()).unwrap();
    let broken = row(EnvError::Infrastructure(String::new()));

    let body = r#"{"dataset": "he", "id": "HumanEval/0", "completion": "def add(a, b):\n    return a + b\n"}"#;
    assert_http(broken, &serve.post("/submit", body).await, "submit");
    let (status, run) = serve.post("/run_code", r#"{"code": "print(1)"}"#).await;
    assert_eq!(
        (status, &run["status"]),
        (200, &json!("SandboxError")),
        "{run}"
    );

    let code = env_core::Value::Text("```python\nprint(1)\n```".into());
    let action = Some(proto::convert::value_to_proto(&code));
    let status = serve
        .client()
        .await
        .step(v1::StepRequest {
            session_id: id,
            action: action.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), broken.grpc, "{status}");
    let reset = Req::Reset(v1::ResetRequest::default());
    let answers = serve
        .stream(vec![
            Req::Make(make(python)),
            reset,
            Req::Step(v1::StepRequest {
                action,
                ..Default::default()
            }),
        ])
        .await;
    assert_stream(broken, &answers[2], "stream step");
    let http = serve
        .post(
            "/openenv/codegym/Python-v0/step",
            r#"{"action": {"code": "print(1)"}}"#,
        )
        .await;
    assert_http(broken, &http, "OpenEnv step");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_protocol_mistakes_fail_alike_on_every_door() {
    let config = json!({"server": {"max_evaluate_items": 1}});
    let args = [
        "--max-request-bytes",
        "4096",
        "--http-auth-token-env",
        "ERRORS_TOKEN",
    ];
    let serve = Serve::start_with_env(&args, config, &[("ERRORS_TOKEN", "s3cret")]).await;
    let token = Some("s3cret");

    // Without the token the HTTP facades answer 401 with a challenge.
    let (refused, headers) = serve.post_as(None, "/run_code", "{}").await;
    assert_http(row(ServerError::Unauthenticated), &refused, "no token");
    assert_eq!(headers["www-authenticate"], "Bearer");

    // A body over the request cap: 413 on HTTP, gRPC's own limit on gRPC.
    let too_large = row(ServerError::BodyTooLarge(String::new()));
    let big = format!(r#"{{"code": "{}"}}"#, "x".repeat(8192));
    let (answer, _) = serve.post_as(token, "/run_code", &big).await;
    assert_http(too_large, &answer, "run_code over the cap");
    let (answer, _) = serve
        .post_as(token, "/openenv/classic/CartPole-v1/reset", &big)
        .await;
    assert_http(too_large, &answer, "OpenEnv reset over the cap");
    let request = v1::MakeRequest {
        env_id: CARTPOLE.into(),
        kwargs_json: big.clone(),
    };
    let status = serve.client().await.make(request).await.unwrap_err();
    assert_eq!(status.code(), too_large.grpc, "{status}");

    // An `Evaluate` batch over its cap.
    let item = v1::EvaluateItem::default();
    let request = v1::EvaluateRequest {
        env_id: "codegym/Python-v0".into(),
        items: vec![item.clone(), item],
        ..Default::default()
    };
    let status = serve.client().await.evaluate(request).await.unwrap_err();
    let over = row(ServerError::TooLarge {
        what: "Evaluate",
        got: 2,
        limit: 1,
    });
    assert_eq!(status.code(), over.grpc, "{status}");

    // A page token that no page handed out.
    let request = v1::ListTasksRequest {
        env_id: "codegym/Python-v0".into(),
        page_token: "x".into(),
        ..Default::default()
    };
    let status = serve.client().await.list_tasks(request).await.unwrap_err();
    let token_row = row(ServerError::BadPageToken(String::new()));
    assert_eq!(status.code(), token_row.grpc, "{status}");

    // Host tools need the stream; a stream has one session; a request needs an operation.
    let request = v1::MakeRequest {
        env_id: "codegym/Python-v0".into(),
        kwargs_json: r#"{"tools": [{"name": "lookup"}]}"#.into(),
    };
    let status = serve.client().await.make(request).await.unwrap_err();
    let tools = row(ServerError::ToolsNeedStream);
    assert_eq!(status.code(), tools.grpc, "{status}");
    let answers = serve
        .stream_kinds(vec![
            None,
            Some(Req::Make(make(CARTPOLE))),
            Some(Req::Make(make(CARTPOLE))),
        ])
        .await;
    assert_stream(row(ServerError::EmptyRequest), &answers[0], "no operation");
    assert!(matches!(answers[1], Resp::Make(_)), "{:?}", answers[1]);
    assert_stream(row(ServerError::SessionExists), &answers[2], "second make");
}
