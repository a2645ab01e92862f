//! Property-based fuzzing of the HTTP facades' request bodies: SandboxFusion's `/run_code`,
//! `/submit`, `/get_prompts` and `/get_prompt_by_id`, and OpenEnv's stateless `/reset` and `/step`
//! (CartPole and the coding env), on a real server over TCP with the real sandbox, as `http.rs`
//! runs it; and the frames of OpenEnv's WebSocket sessions.
//!
//! Bodies are the valid requests of the other tests, mutated (a field dropped, retyped or added),
//! any JSON value, or not JSON at all (cut short, random bytes, invalid UTF-8, empty). Property:
//! the answer is a 200 with a JSON body, or a 4xx whose status is a row of the one error table
//! (`codegym::server::status::TABLE`) with FastAPI's `{"detail": ...}` body; never a 5xx, never a
//! dropped connection. A WebSocket frame grown the same way (sent as text, or as binary when it is
//! not UTF-8) mid-session gets one `observation`, `state` or `error` frame whose code is the
//! protocol's or a row of the table, and the session goes on (a `state` request is answered after
//! it), unless the frame was a `close`. Each request may run a program, so the case count is modest:
//! `CODEGYM_FUZZ_CASES` (default 48; see docs/fuzzing.md for the long mode).

#[path = "support/http_server.rs"]
mod http_server;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use codegym::http::datasets::Datasets;
use codegym::server::ServerConfig;
use codegym::server::status::TABLE;
use futures::{SinkExt, StreamExt};
use http_server::HttpServer;
use proptest::prelude::*;
use serde_json::{Value as J, json};
use tokio_tungstenite::tungstenite::Message;

#[path = "support/fuzz_config.rs"]
mod fuzz_config;

fn config(default: u32) -> proptest::test_runner::Config {
    fuzz_config::config(default, "tests/proptest-regressions/fuzz_http.txt")
}

const HUMANEVAL: &str = r#"{"task_id": "HumanEval/0", "prompt": "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n", "canonical_solution": "    return a + b\n", "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n", "entry_point": "add"}
"#;

/// The server (one for every case) and the runtime that serves it.
struct World {
    runtime: tokio::runtime::Runtime,
    server: HttpServer,
    _dir: tempfile::TempDir,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let dir = tempfile::tempdir().expect("a temp dir");
        let he = dir.path().join("he.jsonl");
        std::fs::write(&he, HUMANEVAL).expect("writes");
        let datasets = Datasets::load(&BTreeMap::from([("he".to_string(), he)])).expect("loads");
        let options = codegym::http::HttpOptions {
            datasets,
            ..Default::default()
        };
        let config = ServerConfig {
            max_request_bytes: 1 << 16,
            ..Default::default()
        };
        let server = runtime.block_on(HttpServer::start(config, options));
        World {
            runtime,
            server,
            _dir: dir,
        }
    })
}

/// Each route and the valid requests (from `http.rs` and `http_submit.rs`) its bodies grow from.
fn routes() -> Vec<(&'static str, Vec<J>)> {
    vec![
        (
            "/run_code",
            vec![
                json!({"code": "print(1)", "language": "python"}),
                json!({"code": "print(input())", "language": "python", "stdin": "x\n",
                       "run_timeout": 5, "files": {"a.txt": "aGk="}, "fetch_files": ["a.txt"]}),
            ],
        ),
        (
            "/submit",
            vec![json!({"dataset": "he", "id": "HumanEval/0", "config": {},
                        "completion": "def add(a, b):\n    return a + b\n"})],
        ),
        (
            "/get_prompts",
            vec![json!({"dataset": "he", "config": {}, "offset": 0, "limit": 5})],
        ),
        (
            "/get_prompt_by_id",
            vec![json!({"dataset": "he", "config": {}, "id": "HumanEval/0"})],
        ),
        (
            "/openenv/classic/CartPole-v1/reset",
            vec![json!({"seed": 1}), json!({})],
        ),
        (
            "/openenv/classic/CartPole-v1/step",
            vec![json!({"action": {"action": 0}})],
        ),
        (
            "/openenv/codegym/Code-v0/step",
            vec![json!({"action": {"code": "print(1)"}})],
        ),
    ]
}

fn json_value() -> impl Strategy<Value = J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        any::<i64>().prop_map(J::from),
        Just(J::from(u64::MAX)),
        prop::sample::select(vec![-1.5, 1e308, 0.5]).prop_map(J::from),
        "\\PC{0,12}".prop_map(J::String),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(J::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| J::Object(m.into_iter().collect())),
        ]
    })
}

#[derive(Debug, Clone)]
enum Body {
    Drop(prop::sample::Index),
    Retype(prop::sample::Index, J),
    Add(String, J),
    Value(J),
    Truncate(prop::sample::Index),
    Bytes(Vec<u8>),
    InvalidUtf8(prop::sample::Index),
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        3 => any::<prop::sample::Index>().prop_map(Body::Drop),
        4 => (any::<prop::sample::Index>(), json_value()).prop_map(|(i, v)| Body::Retype(i, v)),
        1 => ("[a-z_]{1,10}", json_value()).prop_map(|(k, v)| Body::Add(k, v)),
        1 => json_value().prop_map(Body::Value),
        2 => any::<prop::sample::Index>().prop_map(Body::Truncate),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Body::Bytes),
        1 => any::<prop::sample::Index>().prop_map(Body::InvalidUtf8),
    ]
}

/// The bytes of `body` grown from `seed`.
fn render(seed: &J, body: &Body) -> Vec<u8> {
    let mut value = seed.clone();
    let keys: Vec<String> = value
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let key =
        |i: &prop::sample::Index| (!keys.is_empty()).then(|| keys[i.index(keys.len())].clone());
    let obj = value.as_object_mut().expect("seeds are objects");
    match body {
        Body::Drop(i) => {
            if let Some(k) = key(i) {
                obj.remove(&k);
            }
        }
        Body::Retype(i, v) => {
            if let Some(k) = key(i) {
                obj.insert(k, v.clone());
            }
        }
        Body::Add(k, v) => {
            obj.insert(k.clone(), v.clone());
        }
        Body::Value(v) => return v.to_string().into_bytes(),
        Body::Bytes(b) => return b.clone(),
        Body::Truncate(i) => {
            let text = value.to_string().into_bytes();
            return text[..i.index(text.len())].to_vec();
        }
        Body::InvalidUtf8(i) => {
            let mut text = value.to_string().into_bytes();
            text.insert(i.index(text.len() + 1), 0xFF);
            return text;
        }
    }
    value.to_string().into_bytes()
}

/// Posts `bytes` to `route`; the status and the body.
fn post(route: &str, bytes: Vec<u8>, json_type: bool) -> Result<(u16, Vec<u8>), String> {
    let w = world();
    let url = format!("http://{}{route}", w.server.http);
    w.runtime.block_on(async move {
        let mut request = reqwest::Client::new().post(url).body(bytes);
        if json_type {
            request = request.header("content-type", "application/json");
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(|e| e.to_string())?;
        Ok((status, body.to_vec()))
    })
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn bodies_get_a_200_or_a_4xx_of_the_error_table(
        route in any::<prop::sample::Index>(),
        seed in any::<prop::sample::Index>(),
        body in body(),
        json_type in any::<bool>(),
    ) {
        let routes = routes();
        let (route, seeds) = &routes[route.index(routes.len())];
        let bytes = render(&seeds[seed.index(seeds.len())], &body);
        let shown = String::from_utf8_lossy(&bytes).into_owned();
        let answer = post(route, bytes, json_type);
        prop_assert!(answer.is_ok(), "{} {:?}: no answer: {:?}", route, shown, answer);
        let (status, reply) = answer.unwrap();
        let reply: Result<J, _> = serde_json::from_slice(&reply);
        prop_assert!(reply.is_ok(), "{} {:?}: {} with a body that is not JSON", route, shown, status);
        let reply = reply.unwrap();
        if status != 200 {
            let table_4xx = TABLE.iter().any(|row| row.http == status && row.http < 500);
            prop_assert!(
                (400..500).contains(&status) && table_4xx,
                "{} {:?}: {} is no 4xx of the error table: {}",
                route, shown, status, reply
            );
            prop_assert!(reply.get("detail").is_some(), "{} {:?}: {} without detail: {}", route, shown, status, reply);
        }
    }
}

/// The WebSocket session's seed frames: a valid request of each type (the session was reset first).
fn ws_frames() -> Vec<J> {
    vec![
        json!({"type": "reset", "data": {"seed": 1}}),
        json!({"type": "step", "data": {"action": 0}}),
        json!({"type": "state"}),
        json!({"type": "close"}),
    ]
}

/// The protocol's own codes, beside the table's: a frame that is not JSON, a type it does not know.
const WS_PROTOCOL_CODES: [&str; 2] = ["INVALID_JSON", "UNKNOWN_TYPE"];

/// What the server answered one frame with.
#[derive(Debug)]
enum WsAnswer {
    Frame(J),
    Closed(Option<u16>),
    Broken(String),
}

async fn ws_next(ws: &mut Ws) -> WsAnswer {
    loop {
        match tokio::time::timeout(std::time::Duration::from_secs(60), ws.next()).await {
            Err(_) => return WsAnswer::Broken("no answer in 60 s".into()),
            Ok(Some(Ok(Message::Text(t)))) => {
                return match serde_json::from_str(&t) {
                    Ok(v) => WsAnswer::Frame(v),
                    Err(e) => WsAnswer::Broken(format!("a text frame that is not JSON ({e}): {t}")),
                };
            }
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => continue,
            Ok(Some(Ok(Message::Close(frame)))) => {
                return WsAnswer::Closed(frame.map(|f| u16::from(f.code)));
            }
            Ok(other) => return WsAnswer::Broken(format!("{other:?}")),
        }
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A fresh CartPole session, reset; then `frame` (text when UTF-8, else binary); the answer to it
/// and, unless it closed the session, the answer to a `state` request after it.
fn ws_exchange(frame: Vec<u8>) -> Result<(WsAnswer, Option<WsAnswer>), String> {
    let w = world();
    let url = format!("ws://{}/openenv/classic/CartPole-v1/ws", w.server.http);
    w.runtime.block_on(async move {
        let (mut ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let reset = json!({"type": "reset", "data": {"seed": 1}}).to_string();
        ws.send(Message::Text(reset.into()))
            .await
            .map_err(|e| e.to_string())?;
        match ws_next(&mut ws).await {
            WsAnswer::Frame(f) if f["type"] == "observation" => {}
            other => return Err(format!("the valid reset got {other:?}")),
        }
        let message = match String::from_utf8(frame) {
            Ok(text) => Message::Text(text.into()),
            Err(e) => Message::Binary(e.into_bytes().into()),
        };
        ws.send(message).await.map_err(|e| e.to_string())?;
        let answer = ws_next(&mut ws).await;
        if matches!(answer, WsAnswer::Closed(_)) {
            return Ok((answer, None));
        }
        let state = json!({"type": "state"}).to_string();
        ws.send(Message::Text(state.into()))
            .await
            .map_err(|e| e.to_string())?;
        let after = ws_next(&mut ws).await;
        let _ = ws.close(None).await;
        Ok((answer, Some(after)))
    })
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn websocket_frames_get_one_answer_and_keep_the_session(
        seed in any::<prop::sample::Index>(),
        body in body(),
    ) {
        let seeds = ws_frames();
        let seed = &seeds[seed.index(seeds.len())];
        let bytes = render(seed, &body);
        let shown = String::from_utf8_lossy(&bytes).into_owned();
        let is_close = serde_json::from_slice::<J>(&bytes)
            .is_ok_and(|v| v.get("type").and_then(J::as_str) == Some("close"));
        let exchange = ws_exchange(bytes);
        prop_assert!(exchange.is_ok(), "{:?}: {:?}", shown, exchange);
        let (answer, after) = exchange.unwrap();
        match &answer {
            WsAnswer::Frame(f) => {
                let kind = f["type"].as_str().unwrap_or_default();
                prop_assert!(["observation", "state", "error"].contains(&kind), "{:?}: {}", shown, f);
                if kind == "error" {
                    let code = f["data"]["code"].as_str().unwrap_or_default();
                    let known = WS_PROTOCOL_CODES.contains(&code) || TABLE.iter().any(|r| r.ws == code);
                    prop_assert!(known, "{:?}: code {:?} is neither the protocol's nor the table's: {}", shown, code, f);
                    prop_assert!(code != "SESSION_ERROR", "{:?}: a bad frame ended the session: {}", shown, f);
                    prop_assert!(f["data"]["message"].is_string(), "{:?}: no message: {}", shown, f);
                }
            }
            WsAnswer::Closed(code) => {
                prop_assert!(is_close, "{:?}: the server closed the session ({:?})", shown, code);
            }
            WsAnswer::Broken(why) => prop_assert!(false, "{:?}: {}", shown, why),
        }
        if let Some(after) = after {
            let ok = matches!(&after, WsAnswer::Frame(f) if f["type"] == "state");
            prop_assert!(ok, "{:?}: after it, `state` got {:?}", shown, after);
        }
    }
}
