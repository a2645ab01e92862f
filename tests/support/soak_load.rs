//! The soak test's load (`tests/soak.rs`): every kind of request a trainer sends to one
//! `codegym serve`, each checked for its exact outcome, and the faults injected while they run.
//!
//! Good requests (their reward or output known exactly): gRPC `Evaluate` batches (Python and C),
//! `Session` streams and unary `Step`s, SandboxFusion `/run_code` (Python and C) and `/submit`,
//! and OpenEnv WebSocket episodes.
//! Hostile ones (fork bomb, memory hog, output flood, sleeper, a child that outlives its run) must
//! get their verdict (reward 0, a failed run), never an error. Every program carries the request's
//! number, so no verdict or compile cache answers for the sandbox.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use env_core::Value;
use futures::{SinkExt, StreamExt};
use proto::convert::value_to_proto;
use proto::v1;
use proto::v1::env_service_client::EnvServiceClient;
use proto::v1::session_request::Kind as Req;
use proto::v1::session_response::Kind as Resp;
use serde_json::{Value as Json, json};
use tokio_stream::wrappers::ReceiverStream;
use tokio_tungstenite::tungstenite::Message;
use tonic::transport::Channel;

const ENV: &str = "codegym/Code-v0";
const HELLO: &str = r#"{"task_id": "hello-world"}"#;
/// A judged task whose tests a right C program passes and a wrong Python one fails.
const A_PLUS_B: &str = r#"{"id": "a-plus-b", "prompt": "Sum.", "reward": {"version": 1, "components": [
  {"type": "judge", "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "4 5\n", "output": "9\n"}]}]}}"#;
/// Make kwargs of the hostile requests: limits they hit within a second (a run that times out
/// is run again to confirm it, so a sleeper's step takes a few seconds).
const TIGHT: &str = r#"{"limits": {"cpu_ms": 500, "wall_ms": 1000, "memory_bytes": 134217728}}"#;
/// The hostile programs: each ends by a limit, or leaves a child behind that the sandbox must end.
pub const HOSTILE: [(&str, &str); 5] = [
    (
        "fork bomb",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    ),
    (
        "memory hog",
        "x = []\nwhile True:\n    x.append(bytearray(16 << 20))",
    ),
    ("output flood", "while True:\n    print('x' * 4096)"),
    ("sleeper", "import time\ntime.sleep(60)"),
    (
        "outliver",
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(120)\n    os._exit(0)\nprint('bye')",
    ),
];

/// The server's addresses.
#[derive(Clone)]
pub struct Target {
    pub grpc: Channel,
    pub http: String,
    pub metrics: String,
    pub client: reqwest::Client,
}

/// What the load did: requests by kind, runs, good requests' latencies, and every failure.
#[derive(Default)]
pub struct Tally {
    pub counts: Mutex<BTreeMap<&'static str, u64>>,
    pub latencies_ms: Mutex<Vec<f64>>,
    pub failures: Mutex<Vec<String>>,
    pub runs: Mutex<u64>,
}

impl Tally {
    pub fn count(&self, kind: &'static str, runs: u64) {
        *self.counts.lock().unwrap().entry(kind).or_default() += 1;
        *self.runs.lock().unwrap() += runs;
    }

    /// Records one request of `kind` that started at `start`: its outcome, and its latency when
    /// `timed` (good requests).
    pub fn record(&self, kind: &'static str, start: Instant, timed: bool, r: Result<u64, String>) {
        match r {
            Ok(runs) => {
                self.count(kind, runs);
                if timed {
                    let ms = start.elapsed().as_secs_f64() * 1e3;
                    self.latencies_ms.lock().unwrap().push(ms);
                }
            }
            Err(e) => self.failures.lock().unwrap().push(format!("{kind}: {e}")),
        }
    }
}

fn text(src: String) -> Option<v1::Value> {
    Some(value_to_proto(&Value::Text(src)))
}

fn item(options: String, src: String) -> v1::EvaluateItem {
    v1::EvaluateItem {
        seed: None,
        options_json: options,
        action: text(src),
    }
}

/// Each item's reward, or the first item error.
async fn evaluate(
    t: &Target,
    kwargs: &str,
    items: Vec<v1::EvaluateItem>,
) -> Result<Vec<f64>, String> {
    let response = EnvServiceClient::new(t.grpc.clone())
        .evaluate(v1::EvaluateRequest {
            env_id: ENV.into(),
            kwargs_json: kwargs.into(),
            items,
        })
        .await
        .map_err(|s| format!("Evaluate: {:?} {}", s.code(), s.message()))?
        .into_inner();
    response
        .results
        .into_iter()
        .map(|r| {
            r.step
                .map(|s| s.reward)
                .ok_or(format!("item error {:?}", r.error))
        })
        .collect()
}

fn expect(what: &str, got: Vec<f64>, want: &[f64]) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: rewards {got:?}, expected {want:?}"))
    }
}

/// One `Evaluate` batch of four: Python right and wrong, C right (judged) and Python wrong (judged).
pub async fn evaluate_batch(t: &Target, n: u64) -> Result<u64, String> {
    let judged = |language: &str| format!(r#"{{"task": {A_PLUS_B}, "language": "{language}"}}"#);
    let items = vec![
        item(HELLO.into(), format!("print('Hello, world!')  # {n}")),
        item(HELLO.into(), format!("print('Hello, world')  # {n}")),
        item(
            judged("c"),
            format!(
                "```c\n#include <stdio.h>\nint main(void) {{ int a, b; scanf(\"%d %d\", &a, &b); printf(\"%d\\n\", a + b); return 0; }} /* {n} */\n```"
            ),
        ),
        item(
            judged("python"),
            format!("a, b = map(int, input().split())\nprint(a * b)  # {n}"),
        ),
    ];
    let got = evaluate(t, "", items).await?;
    expect("evaluate", got, &EXPECTED_BATCH)?;
    Ok(6) // one run each, the judged ones one per test
}

/// The rewards of [`evaluate_batch`]'s items.
pub const EXPECTED_BATCH: [f64; 4] = [1.0, 0.0, 1.0, 0.0];

/// One episode over a `Session` stream: make, reset, a right step; `drop_after` gives up instead
/// after that long, mid-step (the stream vanishes with a run in flight).
pub async fn session(
    t: &Target,
    kwargs: &str,
    src: String,
    drop_after: Option<Duration>,
) -> Result<f64, String> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut responses = EnvServiceClient::new(t.grpc.clone())
        .session(ReceiverStream::new(rx))
        .await
        .map_err(|s| format!("Session: {:?} {}", s.code(), s.message()))?
        .into_inner();
    let requests = [
        Req::Make(v1::MakeRequest {
            env_id: ENV.into(),
            kwargs_json: kwargs.into(),
        }),
        Req::Reset(v1::ResetRequest {
            session_id: String::new(),
            seed: None,
            options_json: HELLO.into(),
        }),
        Req::Step(v1::StepRequest {
            session_id: String::new(),
            action: text(src),
        }),
    ];
    let mut last = None;
    for (id, kind) in requests.into_iter().enumerate() {
        let is_step = matches!(kind, Req::Step(_));
        let request = v1::SessionRequest {
            request_id: id as u64,
            kind: Some(kind),
        };
        tx.send(request).await.map_err(|e| format!("send: {e}"))?;
        if let (true, Some(after)) = (is_step, drop_after) {
            tokio::time::sleep(after).await;
            return Ok(0.0); // both halves of the stream dropped here
        }
        let r = responses
            .message()
            .await
            .map_err(|s| format!("stream: {:?} {}", s.code(), s.message()))?;
        last = r.and_then(|r| r.kind);
    }
    match last {
        Some(Resp::Step(step)) => Ok(step.reward),
        other => Err(format!("step answered {other:?}")),
    }
}

/// A right `Session` episode: reward 1.
pub async fn session_episode(t: &Target, n: u64) -> Result<u64, String> {
    let reward = session(t, "", format!("print('Hello, world!')  # {n}"), None).await?;
    expect("session", vec![reward], &[1.0]).map(|()| 1)
}

/// Make, reset, a right unary `Step` (reward 1), close.
pub async fn unary_steps(t: &Target, n: u64) -> Result<u64, String> {
    let mut c = EnvServiceClient::new(t.grpc.clone());
    let err = |s: tonic::Status| format!("{:?} {}", s.code(), s.message());
    let id = c
        .make(v1::MakeRequest {
            env_id: ENV.into(),
            kwargs_json: String::new(),
        })
        .await
        .map_err(err)?
        .into_inner()
        .session_id;
    let reset = v1::ResetRequest {
        session_id: id.clone(),
        seed: None,
        options_json: HELLO.into(),
    };
    c.reset(reset).await.map_err(err)?;
    let step = v1::StepRequest {
        session_id: id.clone(),
        action: text(format!("print('Hello, world!')  # {n}")),
    };
    let reward = c.step(step).await.map_err(err)?.into_inner().reward;
    c.close(v1::CloseRequest { session_id: id })
        .await
        .map_err(err)?;
    expect("unary step", vec![reward], &[1.0]).map(|()| 1)
}

/// POSTs `body` to `path`; a 5xx or any other non-200 is an error.
async fn post(t: &Target, path: &str, body: Json) -> Result<Json, String> {
    let response = t
        .client
        .post(format!("http://{}{path}", t.http))
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("{path}: {e}"))?;
    let status = response.status();
    let body: Json = response
        .json()
        .await
        .map_err(|e| format!("{path} body: {e}"))?;
    if status != 200 {
        return Err(format!("{path}: HTTP {status}: {body}"));
    }
    Ok(body)
}

/// `/run_code` in Python and in C (as `cpp`: SandboxFusion has no `c`), each printing a multiple of `n` read from stdin.
pub async fn run_code(t: &Target, n: u64) -> Result<u64, String> {
    let programs = [
        ("python", format!("print(int(input()) * 2)  # {n}"), 2 * n),
        (
            "cpp",
            format!(
                "#include <stdio.h>\nint main(void) {{ long n; scanf(\"%ld\", &n); printf(\"%ld\\n\", 3 * n); return 0; }} /* {n} */"
            ),
            3 * n,
        ),
    ];
    for (language, code, want) in programs {
        let body = json!({"code": code, "language": language, "stdin": format!("{n}\n"), "run_timeout": 30});
        let r = post(t, "/run_code", body).await?;
        if r["status"] != "Success" || r["run_result"]["stdout"] != format!("{want}\n") {
            return Err(format!("{language}: {r}"));
        }
    }
    Ok(2)
}

/// `/submit` of a right and a wrong HumanEval completion: accepted, then not.
pub async fn submit(t: &Target, n: u64) -> Result<u64, String> {
    for (body, accepted) in [("a + b", true), ("a - b", false)] {
        let completion = format!("```python\ndef add(a, b):\n    return {body}  # {n}\n```");
        let r = post(
            t,
            "/submit",
            json!({"dataset": "humaneval_python", "id": "HumanEval/0",
                                            "completion": completion, "config": {}}),
        )
        .await?;
        if r["accepted"] != accepted {
            return Err(format!(
                "accepted {} expected {accepted}: {r}",
                r["accepted"]
            ));
        }
    }
    Ok(2)
}

/// The HumanEval file `/submit` scores against.
pub const HUMANEVAL: &str = r#"{"task_id": "HumanEval/0", "prompt": "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n", "canonical_solution": "    return a + b\n", "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n", "entry_point": "add"}
"#;

/// Every hostile program at once in one `Evaluate` batch under tight limits (reward 0 each), and
/// the sleeper and the fork bomb through `/run_code` (a failed run, HTTP 200).
pub async fn hostile(t: &Target, n: u64) -> Result<u64, String> {
    let items = HOSTILE
        .iter()
        .map(|(_, src)| item(HELLO.into(), format!("{src}  # {n}")))
        .collect();
    let got = evaluate(t, TIGHT, items).await?;
    expect("hostile batch", got, &[0.0; HOSTILE.len()])?;
    for (name, src) in [HOSTILE[3], HOSTILE[0]] {
        let body = json!({"code": format!("{src}  # {n}"), "language": "python", "run_timeout": 1});
        let r = post(t, "/run_code", body).await?;
        if r["status"] != "Failed" {
            return Err(format!("/run_code {name}: {r}"));
        }
    }
    Ok(HOSTILE.len() as u64 + 2)
}

/// A client that gives up mid-flight on a sleeper (under tight limits: a step the client left
/// still finishes, and must not hold a slot long), by turn: a `Session` stream dropped mid-step,
/// an `Evaluate` call dropped, an HTTP `/run_code` whose connection closes, an OpenEnv WebSocket
/// that vanishes mid-step (its step is dropped with it).
pub async fn drop_mid_flight(t: &Target, n: u64) -> &'static str {
    let after = Duration::from_millis(300);
    let sleeper = format!("{}  # {n}", HOSTILE[3].1);
    match n % 4 {
        3 => {
            if let Ok(mut ws) = ws_connect(t).await {
                let _ = ws_ask(
                    &mut ws,
                    json!({"type": "reset", "data": {"task_id": "hello-world"}}),
                )
                .await;
                let step = json!({"type": "step", "data": {"code": sleeper}});
                let _ = ws.send(Message::Text(step.to_string().into())).await;
                tokio::time::sleep(after).await;
            }
            "dropped OpenEnv WebSocket" // the socket dropped here, with no close frame
        }
        0 => {
            let _ = session(t, TIGHT, sleeper, Some(after)).await;
            "dropped Session stream"
        }
        1 => {
            let items = vec![item(HELLO.into(), sleeper)];
            let _ = tokio::time::timeout(after, evaluate(t, TIGHT, items)).await;
            "dropped Evaluate"
        }
        _ => {
            let body = json!({"code": sleeper, "language": "python", "run_timeout": 1});
            let url = format!("http://{}/run_code", t.http);
            let _ = t.client.post(url).timeout(after).json(&body).send().await;
            "dropped /run_code"
        }
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn ws_connect(t: &Target) -> Result<Ws, String> {
    let url = format!("ws://{}/openenv/{ENV}/ws", t.http);
    let (ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .map_err(|e| format!("WebSocket connect: {e}"))?;
    Ok(ws)
}

/// Sends one frame; the next text frame as JSON, which must be an observation.
async fn ws_ask(ws: &mut Ws, frame: Json) -> Result<Json, String> {
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .map_err(|e| format!("WebSocket send: {e}"))?;
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => {
                let reply: Json = serde_json::from_str(&t).map_err(|e| format!("{e}: {t}"))?;
                if reply["type"] != "observation" {
                    return Err(format!("WebSocket answered {reply}"));
                }
                return Ok(reply["data"].clone());
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => return Err(format!("WebSocket ended: {other:?}")),
        }
    }
}

/// An OpenEnv WebSocket episode: reset, a wrong step (reward 0, the episode goes on), a right one
/// (reward 1, done), close.
pub async fn openenv_episode(t: &Target, n: u64) -> Result<u64, String> {
    let mut ws = ws_connect(t).await?;
    ws_ask(
        &mut ws,
        json!({"type": "reset", "data": {"task_id": "hello-world"}}),
    )
    .await?;
    let mut got = Vec::new();
    for src in ["print('Hello, world')", "print('Hello, world!')"] {
        let step = json!({"type": "step", "data": {"code": format!("{src}  # {n}")}});
        let data = ws_ask(&mut ws, step).await?;
        got.push((data["reward"].as_f64(), data["done"].as_bool()));
    }
    let want = [(Some(0.0), Some(false)), (Some(1.0), Some(true))];
    if got != want {
        return Err(format!(
            "openenv: (reward, done) {got:?}, expected {want:?}"
        ));
    }
    let close = json!({"type": "close"}).to_string();
    ws.send(Message::Text(close.into()))
        .await
        .map_err(|e| format!("WebSocket close: {e}"))?;
    Ok(2)
}
