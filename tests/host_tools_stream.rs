//! Issue 12: host tools over a real `Session` stream (tonic client, real server, real sandbox):
//! the program's calls reach the client as `tool_call`s and its `tool_result`s come back, with
//! args and kwargs, errors, a client that never answers, pipelined requests during calls, two
//! sessions never crossing, and unary `Make` refused with FAILED_PRECONDITION.

mod support;

use env_core::{ExecutionResult, ReturnValue, Value};
use proto::convert::{value_from_proto, value_to_proto};
use proto::v1;
use proto::v1::session_request::Kind as Req;
use proto::v1::session_response::Kind as Resp;
use serde_json::json;
use support::TestServer;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

fn registry() -> env_core::Registry {
    codegym::registry(Default::default()).expect("registry with the coding env")
}

fn tools_kwargs(extra: serde_json::Value) -> String {
    let mut kw = json!({
        "max_episode_steps": 8,
        "grade": false,
        "tools": [
            {"name": "search", "description": "Search the docs", "parameters": {"type": "object"}},
            {"name": "fail", "description": "Always fails"},
            {"name": "silent", "description": "Never answers"}
        ],
    });
    kw.as_object_mut()
        .expect("object")
        .extend(extra.as_object().cloned().unwrap_or_default());
    kw.to_string()
}

/// One session over a stream whose client answers tool calls as `answer` says (`None`: never).
struct Client {
    tx: mpsc::Sender<v1::SessionRequest>,
    rx: tonic::Streaming<v1::SessionResponse>,
    next: u64,
    tag: &'static str,
    /// The tool calls seen, in order.
    calls: Vec<v1::ToolCall>,
}

impl Client {
    async fn open(server: &TestServer, kwargs: String, tag: &'static str) -> Client {
        let (tx, rx) = mpsc::channel(16);
        let rx = server
            .client()
            .await
            .session(ReceiverStream::new(rx))
            .await
            .expect("session")
            .into_inner();
        let mut c = Client {
            tx,
            rx,
            next: 0,
            tag,
            calls: Vec::new(),
        };
        let made = c
            .request(Req::Make(v1::MakeRequest {
                env_id: "codegym/Code-v0".into(),
                kwargs_json: kwargs,
            }))
            .await;
        assert!(matches!(made, Resp::Make(_)), "{made:?}");
        let reset = c
            .request(Req::Reset(v1::ResetRequest {
                session_id: String::new(),
                seed: None,
                options_json: json!({"task_id": "sum-of-squares"}).to_string(),
            }))
            .await;
        assert!(matches!(reset, Resp::Reset(_)), "{reset:?}");
        c
    }

    async fn send(&mut self, kind: Req) -> u64 {
        self.next += 1;
        let request = v1::SessionRequest {
            request_id: self.next,
            kind: Some(kind),
        };
        self.tx.send(request).await.expect("send");
        self.next
    }

    /// The response to request `id`, answering tool calls on the way.
    async fn response(&mut self, id: u64) -> Resp {
        loop {
            let r = self
                .rx
                .message()
                .await
                .expect("stream")
                .expect("a response");
            match r.kind.expect("kind") {
                Resp::ToolCall(call) => {
                    assert_eq!(r.request_id, id, "a tool call names the step in flight");
                    self.calls.push(call.clone());
                    let args: serde_json::Value =
                        serde_json::from_str(&call.args_json).expect("args");
                    let kwargs: serde_json::Value =
                        serde_json::from_str(&call.kwargs_json).expect("kwargs");
                    let (result_json, error) = match call.name.as_str() {
                        "search" => (
                            json!({"q": args, "opts": kwargs, "by": self.tag}).to_string(),
                            None,
                        ),
                        "fail" => (String::new(), Some("index offline".to_string())),
                        _ => continue, // "silent": never answered
                    };
                    let result = v1::ToolResult {
                        call_id: call.call_id,
                        result_json,
                        error,
                    };
                    self.send(Req::ToolResult(result)).await;
                    self.next -= 1; // tool results get no response: don't count them
                }
                other => {
                    assert_eq!(r.request_id, id);
                    return other;
                }
            }
        }
    }

    async fn request(&mut self, kind: Req) -> Resp {
        let id = self.send(kind).await;
        self.response(id).await
    }

    async fn run(&mut self, code: &str) -> ExecutionResult {
        let step = self.request(step(code)).await;
        execution(step)
    }
}

fn step(code: &str) -> Req {
    Req::Step(v1::StepRequest {
        session_id: String::new(),
        action: Some(value_to_proto(&Value::Text(code.into()))),
    })
}

fn execution(r: Resp) -> ExecutionResult {
    match r {
        Resp::Step(s) => match value_from_proto(s.observation.expect("obs")) {
            Ok(Value::Execution(e)) => e,
            other => panic!("{other:?}"),
        },
        other => panic!("not a step: {other:?}"),
    }
}

fn value(e: &ExecutionResult) -> serde_json::Value {
    match &e.return_value {
        Some(ReturnValue::Json { value }) => value.clone(),
        other => panic!("{other:?}: {}", e.stderr),
    }
}

#[tokio::test]
async fn calls_round_trip_with_args_kwargs_and_errors() {
    let server = TestServer::start(registry(), Default::default()).await;
    let mut c = Client::open(&server, tools_kwargs(json!({})), "a").await;
    let e = c.run("search('rust', 3, lang='en', top={'k': 1})").await;
    assert_eq!(
        value(&e),
        json!({"q": ["rust", 3], "opts": {"lang": "en", "top": {"k": 1}}, "by": "a"})
    );
    assert_eq!(c.calls.last().map(|x| x.name.as_str()), Some("search"));
    let e = c
        .run("try:\n    fail()\nexcept RuntimeError as e:\n    msg = str(e)\nmsg")
        .await;
    assert_eq!(value(&e), json!("tool fail: index offline"));
    // Threads in the program: each gets its own result.
    let e = c
        .run("import threading\nout = {}\ndef w(i):\n    out[i] = search(i)['q'][0]\nts = [threading.Thread(target=w, args=(i,)) for i in range(8)]\n[t.start() for t in ts]; [t.join() for t in ts]\n[out[i] for i in range(8)]")
        .await;
    assert_eq!(value(&e), json!([0, 1, 2, 3, 4, 5, 6, 7]));
}

#[tokio::test]
async fn a_silent_client_costs_only_its_step_and_pipelined_requests_wait() {
    let server = TestServer::start(registry(), Default::default()).await;
    let kwargs = tools_kwargs(json!({"tool_limits": {"call_timeout_ms": 300}}));
    let mut c = Client::open(&server, kwargs, "a").await;
    // The next step is pipelined while the first one's call is unanswered.
    let first = c
        .send(step(
            "try:\n    silent()\nexcept RuntimeError as e:\n    r = str(e)\nr",
        ))
        .await;
    let second = c.send(step("search('after')['q']")).await;
    let e = execution(c.response(first).await);
    assert!(
        value(&e)
            .as_str()
            .is_some_and(|m| m.contains("did not answer")),
        "{e:?}"
    );
    let e = execution(c.response(second).await);
    assert_eq!(value(&e), json!(["after"]));
}

#[tokio::test]
async fn session_mode_cells_call_tools() {
    let server = TestServer::start(registry(), Default::default()).await;
    let mut c = Client::open(&server, tools_kwargs(json!({"mode": "session"})), "s").await;
    let e = c.run("hits = search('a', k=1)['q']").await;
    assert!(e.success(), "{}", e.stderr);
    let e = c.run("import threading\nout = []\nts = [threading.Thread(target=lambda i=i: out.append(search(i)['q'][0])) for i in range(6)]\n[t.start() for t in ts]; [t.join() for t in ts]\n[hits, sorted(out)]").await;
    assert_eq!(
        value(&e),
        json!([["a"], [0, 1, 2, 3, 4, 5]]),
        "{}",
        e.stderr
    );
}

#[tokio::test]
async fn two_sessions_tools_never_cross() {
    let server = TestServer::start(registry(), Default::default()).await;
    let mut a = Client::open(&server, tools_kwargs(json!({})), "a").await;
    let mut b = Client::open(&server, tools_kwargs(json!({})), "b").await;
    let code = "sorted({search(i)['by'] for i in range(10)})";
    let (ea, eb) = tokio::join!(a.run(code), b.run(code));
    assert_eq!((value(&ea), value(&eb)), (json!(["a"]), json!(["b"])));
    assert_eq!((a.calls.len(), b.calls.len()), (10, 10));
}

#[tokio::test]
async fn unary_make_with_tools_is_failed_precondition() {
    let server = TestServer::start(registry(), Default::default()).await;
    let mut c = server.client().await;
    let err = c
        .make(v1::MakeRequest {
            env_id: "codegym/Code-v0".into(),
            kwargs_json: tools_kwargs(json!({})),
        })
        .await
        .expect_err("tools need the stream");
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains("Session"), "{}", err.message());
    // Bad declarations over the stream are INVALID_ARGUMENT.
    for kwargs in [
        json!({"tools": [{"name": "not a name"}]}),
        json!({"tools": [{"name": "a"}, {"name": "a"}]}),
        json!({"tools": [{"name": "a"}], "tool_limits": {"call_timeout_ms": 10_000_000}}),
    ] {
        let (tx, rx) = mpsc::channel(4);
        let mut responses = server
            .client()
            .await
            .session(ReceiverStream::new(rx))
            .await
            .expect("session")
            .into_inner();
        tx.send(v1::SessionRequest {
            request_id: 1,
            kind: Some(Req::Make(v1::MakeRequest {
                env_id: "codegym/Code-v0".into(),
                kwargs_json: kwargs.to_string(),
            })),
        })
        .await
        .expect("send");
        match responses
            .message()
            .await
            .expect("stream")
            .and_then(|r| r.kind)
        {
            Some(Resp::Error(e)) => assert_eq!(
                Code::from_i32(e.code),
                Code::InvalidArgument,
                "{kwargs}: {e:?}"
            ),
            other => panic!("{kwargs}: {other:?}"),
        }
    }
}
