//! The HTTP facades end to end: a real server (gRPC + HTTP listeners on 127.0.0.1:0) in this
//! process, the real sandbox, real TCP clients (reqwest, tokio-tungstenite). The shapes checked here
//! are the raw wire formats SandboxFusion's and OpenEnv's clients parse; the clients themselves run
//! in `trainer-bridge/python/tests/test_http_compat.py`.

#[path = "support/http_server.rs"]
mod http_server;

use std::sync::Arc;

use codegym::server::ServerConfig;
use futures::{SinkExt, StreamExt};
use http_server::HttpServer as Server;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

async fn start(max_sessions: usize, auth_token: Option<&str>) -> Server {
    start_with(max_sessions, auth_token, None).await
}

async fn start_with(
    max_sessions: usize,
    auth_token: Option<&str>,
    max_sessions_per_client: Option<usize>,
) -> Server {
    let config = ServerConfig {
        max_sessions,
        max_request_bytes: 1 << 20,
        ..Default::default()
    };
    let options = codegym::http::HttpOptions {
        auth_token: auth_token.map(str::to_string),
        openenv_kwargs: [(
            "codegym/Python".to_string(),
            json!({"max_episode_steps": 3}).as_object().unwrap().clone(),
        )]
        .into(),
        max_sessions_per_client,
        datasets: Default::default(),
    };
    Server::start(config, options).await
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http)
    }

    async fn run_code(&self, body: Value) -> Value {
        let response = reqwest::Client::new()
            .post(self.url("/run_code"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    async fn ws(&self, env: &str) -> Ws {
        let url = format!("ws://{}/openenv/{env}/ws", self.http);
        let (socket, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        socket
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Sends one frame and returns the next text frame as JSON (`None`: the socket closed).
async fn ask(ws: &mut Ws, frame: Value) -> Option<Value> {
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .ok()?;
    next_json(ws).await
}

async fn next_json(ws: &mut Ws) -> Option<Value> {
    while let Some(Ok(message)) = ws.next().await {
        match message {
            Message::Text(t) => return Some(serde_json::from_str(&t).unwrap()),
            Message::Close(_) => return None,
            _ => continue,
        }
    }
    None
}

/// verl's request, every field as `call_sandbox_api` sends it.
fn verl_request(code: &str, stdin: Option<&str>) -> Value {
    json!({"compile_timeout": 10, "run_timeout": 10, "code": code, "stdin": stdin,
           "memory_limit_MB": 1024, "language": "python", "files": {}, "fetch_files": []})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verl_requests_64_at_once_are_each_answered_in_sandbox_fusion_shape() {
    let server = Arc::new(start(16, None).await);
    let calls = (0..64).map(|i| {
        let server = server.clone();
        tokio::spawn(async move {
            let stdin = format!("{i}\n");
            let r = server
                .run_code(verl_request("print(int(input()) * 2)", Some(&stdin)))
                .await;
            (i, r)
        })
    });
    for call in futures::future::join_all(calls).await {
        let (i, r) = call.unwrap();
        assert_eq!(r["status"], "Success", "{r}");
        assert_eq!(r["message"], "");
        assert_eq!(r["compile_result"], Value::Null);
        assert_eq!(r["files"], json!({}));
        assert_eq!(r["executor_pod_name"], Value::Null);
        let run = &r["run_result"];
        assert_eq!(run["status"], "Finished");
        assert_eq!(run["return_code"], 0);
        assert_eq!(run["stdout"], format!("{}\n", i * 2));
        assert_eq!(run["stderr"], "");
        assert!(run["execution_time"].is_f64(), "{run}");
    }
    // verl's assert-case shape: a failing assert is Failed with a non-zero return code.
    let r = server
        .run_code(verl_request(
            "def f(x):\n    return x\n\n\nassert f(1) == 2",
            Some(""),
        ))
        .await;
    assert_eq!(r["status"], "Failed", "{r}");
    assert_eq!(r["run_result"]["return_code"], 1);
    assert!(
        r["run_result"]["stderr"]
            .as_str()
            .unwrap()
            .contains("AssertionError")
    );
    // A timeout: Failed, TimeLimitExceeded, a null return code, strings for the output.
    let mut timeout = verl_request(
        "import time\nprint('start', flush=True)\ntime.sleep(30)",
        None,
    );
    timeout["run_timeout"] = json!(1);
    let r = server.run_code(timeout).await;
    assert_eq!(r["status"], "Failed", "{r}");
    assert_eq!(r["run_result"]["status"], "TimeLimitExceeded");
    assert_eq!(r["run_result"]["return_code"], Value::Null);
    assert_eq!(r["run_result"]["stdout"], "start\n");
    assert_eq!(r["run_result"]["stderr"], "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_fastapi_errors_and_unknown_fields_are_ignored() {
    let server = start(4, None).await;
    let client = reqwest::Client::new();
    let post = |body: &'static str| {
        client
            .post(server.url("/run_code"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    for body in [
        "{\"code\": ",
        "[1, 2]",
        "{\"language\": \"python\"}",
        "not json",
    ] {
        let response = post(body).await.unwrap();
        assert_eq!(response.status(), 422, "{body}");
        let detail: Value = response.json().await.unwrap();
        assert!(detail["detail"][0]["loc"].is_array(), "{detail}");
    }
    let response = post(r#"{"code": "print(1)", "language": "klingon"}"#)
        .await
        .unwrap();
    assert_eq!(response.status(), 422);

    // Unknown fields are ignored; `language` defaults to python (verl's tutorial sends only code).
    let r = server
        .run_code(json!({"code": "print('hi')", "frobnicate": [1, 2], "cpu_time_limit": 3}))
        .await;
    assert_eq!(r["status"], "Success", "{r}");
    assert_eq!(r["run_result"]["stdout"], "hi\n");

    // A language SandboxFusion knows but codegym does not run: SandboxError, HTTP 200.
    let r = server
        .run_code(json!({"code": "object Main extends App", "language": "scala"}))
        .await;
    assert_eq!(r["status"], "SandboxError", "{r}");
    assert!(r["message"].as_str().unwrap().contains("scala"));
    assert_eq!(r["run_result"], Value::Null);

    // Issue 14: compiled languages report their compile step; a compile error has no run.
    let r = server
        .run_code(json!({"code": "#include <cstdio>\nint main(){int n; scanf(\"%d\", &n); printf(\"%d\\n\", 2*n);}",
                         "language": "cpp", "stdin": "21"}))
        .await;
    assert_eq!(r["status"], "Success", "{r}");
    assert_eq!(r["compile_result"]["status"], "Finished", "{r}");
    assert_eq!(r["compile_result"]["return_code"], 0, "{r}");
    assert_eq!(r["run_result"]["stdout"], "42\n", "{r}");
    let r = server
        .run_code(json!({"code": "int main(){ nope }", "language": "cpp"}))
        .await;
    assert_eq!(r["status"], "Failed", "{r}");
    assert_ne!(r["compile_result"]["return_code"], 0, "{r}");
    assert!(
        r["compile_result"]["stderr"]
            .as_str()
            .unwrap()
            .contains("nope")
    );
    assert_eq!(r["run_result"], Value::Null);

    // Over the body cap: 413 in FastAPI's shape, never a hang or a panic.
    let big = json!({"code": "x".repeat(2 << 20)}).to_string();
    let response = client
        .post(server.url("/run_code"))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.unwrap();
    assert!(body["detail"].is_string(), "{body}");

    let ping: Value = client
        .get(server.url("/v1/ping"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ping, "pong");
    let missing = client.get(server.url("/nope")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_programs_stay_contained_and_are_answered() {
    let server = start(4, None).await;
    let shadow = server
        .run_code(verl_request("print(open('/etc/shadow').read())", None))
        .await;
    assert_eq!(shadow["status"], "Failed", "{shadow}");
    assert!(
        !shadow["run_result"]["stdout"]
            .as_str()
            .unwrap()
            .contains("root:")
    );

    let socket = server
        .run_code(verl_request(
            "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\nprint('connected')",
            None,
        ))
        .await;
    assert_eq!(socket["status"], "Failed", "{socket}");
    assert!(
        !socket["run_result"]["stdout"]
            .as_str()
            .unwrap()
            .contains("connected")
    );

    let mut bomb = verl_request(
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        None,
    );
    bomb["run_timeout"] = json!(2);
    let bomb = server.run_code(bomb).await;
    assert_eq!(bomb["status"], "Failed", "{bomb}");

    // Files outside the work dir cannot be planted or fetched.
    let escape = server
        .run_code(json!({"code": "print(1)", "files": {"../../etc/x": "aGk="}}))
        .await;
    assert_eq!(escape["status"], "SandboxError", "{escape}");
    let fetch = server
        .run_code(json!({"code": "print(1)", "fetch_files": ["/etc/shadow"]}))
        .await;
    assert_eq!(fetch["files"], json!({}), "{fetch}");
    // What the program planted is never followed: a symlink out, a hard link, a FIFO (reading it
    // would block), `..`; only the regular file comes back.
    let planted = server
        .run_code(json!({
            "code": "import os\nos.symlink('/etc/passwd', 'link')\nopen('real.txt', 'w').write('ok')\n\
                     os.link('real.txt', 'hard')\nos.mkfifo('fifo')\nopen('plain.txt', 'w').write('hi')",
            "fetch_files": ["link", "hard", "fifo", "../../etc/passwd", "plain.txt"],
        }))
        .await;
    assert_eq!(planted["status"], "Success", "{planted}");
    assert_eq!(planted["files"], json!({"plain.txt": "aGk="}), "{planted}");

    let after = server.run_code(verl_request("print(1)", None)).await;
    assert_eq!(after["status"], "Success", "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_auth_guards_every_route_when_configured() {
    let open = start(4, None).await;
    let client = reqwest::Client::new();
    let r = client.get(open.url("/v1/ping")).send().await.unwrap();
    assert_eq!(r.status(), 200);

    let guarded = start(4, Some("s3cret")).await;
    for path in ["/v1/ping", "/openenv/classic/CartPole-v1/health"] {
        let r = client.get(guarded.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["detail"], "Not authenticated");
        let r = client
            .get(guarded.url(path))
            .bearer_auth("wrong!")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{path}");
        let r = client
            .get(guarded.url(path))
            .bearer_auth("s3cret")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let url = format!("ws://{}/openenv/classic/CartPole-v1/ws", guarded.http);
    assert!(tokio_tungstenite::connect_async(url).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openenv_ws_sessions_share_the_session_cap_and_survive_bad_messages() {
    let server = start(1, None).await;
    let mut first = server.ws("classic/CartPole-v1").await;
    let obs = ask(&mut first, json!({"type": "reset", "data": {"seed": 3}}))
        .await
        .unwrap();
    assert_eq!(obs["type"], "observation", "{obs}");
    assert_eq!(obs["data"]["done"], false);
    assert_eq!(
        obs["data"]["observation"]["observation"]
            .as_array()
            .unwrap()
            .len(),
        4
    );

    // The one slot is taken: the second socket gets CAPACITY_REACHED, then a close.
    let mut second = server.ws("codegym/Code-v0").await;
    let refused = next_json(&mut second).await.unwrap();
    assert_eq!(refused["type"], "error");
    assert_eq!(refused["data"]["code"], "CAPACITY_REACHED", "{refused}");
    assert_eq!(refused["data"]["max_sessions"], 1);
    assert_eq!(refused["data"]["active_sessions"], 1);
    assert!(next_json(&mut second).await.is_none());

    // Malformed and unknown messages are answered with their codes; the session stays usable.
    first.send(Message::Text("{not json".into())).await.unwrap();
    assert_eq!(
        next_json(&mut first).await.unwrap()["data"]["code"],
        "INVALID_JSON"
    );
    let unknown = ask(&mut first, json!({"type": "teleport"})).await.unwrap();
    assert_eq!(unknown["data"]["code"], "UNKNOWN_TYPE");
    let untyped = ask(&mut first, json!({"data": {}})).await.unwrap();
    assert_eq!(untyped["data"]["code"], "UNKNOWN_TYPE");
    let invalid = ask(&mut first, json!({"type": "step", "data": {"action": 7}}))
        .await
        .unwrap();
    assert_eq!(invalid["data"]["code"], "VALIDATION_ERROR", "{invalid}");
    let extra = ask(
        &mut first,
        json!({"type": "step", "data": {"action": 1, "x": 1}}),
    )
    .await
    .unwrap();
    assert_eq!(extra["data"]["code"], "VALIDATION_ERROR", "{extra}");
    first
        .send(Message::Ping(b"hi".to_vec().into()))
        .await
        .unwrap();
    let step = ask(&mut first, json!({"type": "step", "data": {"action": 1}}))
        .await
        .unwrap();
    assert_eq!(step["type"], "observation", "{step}");
    assert_eq!(step["data"]["reward"], 1.0);
    let state = ask(&mut first, json!({"type": "state"})).await.unwrap();
    assert_eq!(state["type"], "state");
    assert_eq!(state["data"]["step_count"], 1);
    assert!(state["data"]["episode_id"].is_string());

    // `close` ends the session and frees the slot for the next socket.
    first
        .send(Message::Text(json!({"type": "close"}).to_string().into()))
        .await
        .unwrap();
    assert!(next_json(&mut first).await.is_none());
    let mut third = None;
    for _ in 0..100 {
        let mut ws = server.ws("codegym/Code-v0").await;
        let reply = ask(&mut ws, json!({"type": "reset", "data": {}})).await;
        if let Some(reply) = reply.filter(|r| r["type"] == "observation") {
            third = Some(reply);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let third = third.expect("the slot was freed by close");
    assert!(third["data"]["observation"]["metadata"]["prompt"].is_string());
}

/// Every observation the server sends fits the schema it publishes (checked the way pydantic's
/// `extra = "forbid"` models would: no unknown keys, required keys present, field types right).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observations_fit_the_published_schema() {
    let server = start(4, None).await;
    let client = reqwest::Client::new();
    for (env, action) in [
        ("codegym/Code-v0", json!({"code": "print(6 * 7)"})),
        ("classic/CartPole-v1", json!({"action": 0})),
    ] {
        let schema: Value = client
            .get(server.url(&format!("/openenv/{env}/schema")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let meta: Value = client
            .get(server.url(&format!("/openenv/{env}/metadata")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(meta["name"], env);
        let mut ws = server.ws(env).await;
        let reset = ask(&mut ws, json!({"type": "reset", "data": {"seed": 1}}))
            .await
            .unwrap();
        let step = ask(&mut ws, json!({"type": "step", "data": action}))
            .await
            .unwrap();
        for (frame, key) in [(&reset, "reset_observation"), (&step, "observation")] {
            assert_eq!(frame["type"], "observation", "{frame}");
            let observation = &frame["data"]["observation"];
            let schema = &schema[key];
            let properties = schema["properties"].as_object().unwrap();
            for (field, value) in observation.as_object().unwrap() {
                let field_schema = properties
                    .get(field)
                    .unwrap_or_else(|| panic!("{env}: {field} is not in the schema"));
                let ty = field_schema["type"].as_str().unwrap_or("any");
                let fits = match ty {
                    "string" => value.is_string(),
                    "integer" => value.is_i64(),
                    "object" => value.is_object(),
                    "array" => value.is_array(),
                    "boolean" => value.is_boolean(),
                    _ => true,
                };
                assert!(fits, "{env}: {field} = {value} is not a {ty}");
            }
            for required in schema["required"].as_array().into_iter().flatten() {
                assert!(observation.get(required.as_str().unwrap()).is_some());
            }
        }
        // The stateless HTTP step answers with the same payload shape.
        let r: Value = client
            .post(server.url(&format!("/openenv/{env}/step")))
            .json(&json!({"action": action}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(r["reward"].is_f64(), "{r}");
        let bad = client
            .post(server.url(&format!("/openenv/{env}/step")))
            .json(&json!({"action": {"nope": 1}}))
            .send()
            .await
            .unwrap();
        assert_eq!(bad.status(), 422);
    }
    let coding = ask(
        &mut server.ws("codegym/Code-v0").await,
        json!({"type": "reset"}),
    )
    .await
    .unwrap();
    assert_eq!(coding["data"]["observation"]["exit_code"], 0);
}

/// The binary: `--http` prints a second line, one SIGTERM drains both listeners (an open WebSocket
/// session is ended with `SESSION_ERROR`) and the process exits 0.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_http_reports_both_listeners_and_shuts_both_down_on_sigterm() {
    use tokio::io::AsyncBufReadExt;
    // The binary under test is a process by nature; this is not sandboxed user code.
    #[allow(clippy::disallowed_methods)]
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_codegym"))
        .args(["serve", "--addr", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start codegym serve");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap();
    assert!(first.starts_with("listening on "), "{first:?}");
    let second = lines.next_line().await.unwrap().unwrap();
    let http = second
        .strip_prefix("http listening on ")
        .unwrap_or_else(|| panic!("second line: {second:?}"))
        .to_string();
    let url = format!("ws://{http}/openenv/classic/CartPole-v1/ws");
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let obs = ask(&mut ws, json!({"type": "reset"})).await.unwrap();
    assert_eq!(obs["type"], "observation", "{obs}");

    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let ended = next_json(&mut ws).await;
    if let Some(frame) = ended {
        assert_eq!(frame["data"]["code"], "SESSION_ERROR", "{frame}");
    }
    let status = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "exit status after SIGTERM: {status:?}");
}

/// A long step does not starve the socket: pings are answered while the program runs (OpenEnv's
/// client drops a connection whose pings go unanswered), and frames sent meanwhile are answered in
/// order afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_are_answered_during_a_step_and_pipelined_frames_keep_their_order() {
    let server = start(4, None).await;
    let mut ws = server.ws("codegym/Code-v0").await;
    let reset = ask(
        &mut ws,
        json!({"type": "reset", "data": {"task_id": "hello-world"}}),
    )
    .await
    .unwrap();
    assert_eq!(reset["type"], "observation", "{reset}");
    let step = json!({"type": "step", "data": {"code": "import time\ntime.sleep(3)\nprint('Hello, world!')"}});
    ws.send(Message::Text(step.to_string().into()))
        .await
        .unwrap();
    ws.send(Message::Ping(b"alive?".to_vec().into()))
        .await
        .unwrap();
    ws.send(Message::Text(json!({"type": "state"}).to_string().into()))
        .await
        .unwrap();
    let mut order = Vec::new();
    while order.len() < 3 {
        match ws.next().await.unwrap().unwrap() {
            Message::Pong(payload) => {
                assert_eq!(&payload[..], b"alive?");
                order.push("pong".to_string());
            }
            Message::Text(t) => {
                let frame: Value = serde_json::from_str(&t).unwrap();
                order.push(frame["type"].as_str().unwrap().to_string());
                if frame["type"] == "observation" {
                    assert_eq!(frame["data"]["reward"], 1.0, "{frame}");
                }
            }
            other => panic!("unexpected frame {other:?}"),
        }
    }
    assert_eq!(order, ["pong", "observation", "state"]);
}

/// OpenEnv clients send no `make` kwargs; the server's `http.openenv_kwargs` do (the test server
/// sets `max_episode_steps: 3` for the coding env, whose default is 4): the third wrong answer ends
/// the episode as truncated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openenv_envs_are_made_with_the_configured_kwargs() {
    let server = start(4, None).await;
    let mut ws = server.ws("codegym/Code-v0").await;
    let reset = ask(
        &mut ws,
        json!({"type": "reset", "data": {"task_id": "hello-world"}}),
    )
    .await
    .unwrap();
    assert_eq!(reset["type"], "observation", "{reset}");
    let wrong = json!({"type": "step", "data": {"code": "print('nope')"}});
    let mut done = Vec::new();
    for _ in 0..3 {
        let step = ask(&mut ws, wrong.clone()).await.unwrap();
        assert_eq!(step["type"], "observation", "{step}");
        done.push(step["data"]["done"].as_bool().unwrap());
    }
    assert_eq!(done, [false, false, true]);
}

/// `http.max_sessions_per_client`: one client (here every socket comes from 127.0.0.1) gets at
/// most that many WebSocket sessions although the server has room for more; a closed one frees its
/// slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_holds_at_most_its_share_of_sessions() {
    let server = start_with(8, None, Some(2)).await;
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut ws = server.ws("classic/CartPole-v1").await;
        let obs = ask(&mut ws, json!({"type": "reset"})).await.unwrap();
        assert_eq!(obs["type"], "observation", "{obs}");
        open.push(ws);
    }
    let mut third = server.ws("classic/CartPole-v1").await;
    let refused = next_json(&mut third).await.unwrap();
    assert_eq!(refused["data"]["code"], "CAPACITY_REACHED", "{refused}");
    assert_eq!(refused["data"]["max_sessions_per_client"], 2);
    assert!(next_json(&mut third).await.is_none());

    let mut first = open.remove(0);
    first.close(None).await.unwrap();
    while next_json(&mut first).await.is_some() {}
    // The server notices the close asynchronously: retry briefly until the slot is back.
    let mut again = None;
    for _ in 0..50 {
        let mut ws = server.ws("classic/CartPole-v1").await;
        let answer = ask(&mut ws, json!({"type": "reset"})).await;
        if answer.as_ref().is_some_and(|a| a["type"] == "observation") {
            again = Some(ws);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(again.is_some(), "the freed slot was never given back");
}
