//! Server lifecycle end to end: thousands of sessions, vanished clients, graceful shutdown (in process
//! and of the real `codegym serve` binary).

#[path = "support/codegym_bin.rs"]
mod codegym_bin;
mod support;

use std::time::Duration;

use codegym::server::ServerConfig;
use env_core::Value;
use proto::convert::{value_from_proto, value_to_proto};
use proto::v1::{self, session_request::Kind as Req, session_response::Kind as Resp};
use support::{TestServer, test_registry};
use tonic::Code;

fn make(env_id: &str, kwargs: &str) -> v1::MakeRequest {
    v1::MakeRequest {
        env_id: env_id.into(),
        kwargs_json: kwargs.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_concurrent_sessions() {
    let server = TestServer::start(test_registry(), Default::default()).await;
    // A handful of HTTP/2 connections, as a trainer's worker pool would have.
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(server.client().await);
    }
    let n = 2_000usize;
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let mut c = clients[i % clients.len()].clone();
            tokio::spawn(async move {
                let id = c
                    .make(make("classic/CartPole-v1", ""))
                    .await?
                    .into_inner()
                    .session_id;
                let reset = v1::ResetRequest {
                    session_id: id.clone(),
                    seed: Some(i as u64),
                    options_json: String::new(),
                };
                let first = c.reset(reset).await?.into_inner();
                let mut total = 0.0;
                for _ in 0..5 {
                    let step = v1::StepRequest {
                        session_id: id.clone(),
                        action: Some(value_to_proto(&Value::Discrete(0))),
                    };
                    total += c.step(step).await?.into_inner().reward;
                }
                Ok::<_, tonic::Status>((id, first, total))
            })
        })
        .collect();
    let mut ids = std::collections::HashSet::new();
    let mut distinct_starts = std::collections::HashSet::new();
    for t in tasks {
        let (id, first, total) = t.await.unwrap().unwrap();
        assert_eq!(total, 5.0);
        ids.insert(id);
        distinct_starts.insert(format!(
            "{:?}",
            value_from_proto(first.observation.unwrap()).unwrap()
        ));
    }
    assert_eq!(ids.len(), n, "every session has its own id");
    assert!(
        distinct_starts.len() > n * 9 / 10,
        "seeds give distinct initial states"
    );
    let mut c = clients[0].clone();
    for id in ids {
        assert!(
            c.close(v1::CloseRequest { session_id: id })
                .await
                .unwrap()
                .into_inner()
                .closed
        );
    }
}

/// Polls until `f` succeeds; the server frees resources asynchronously.
async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..200 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

#[tokio::test]
async fn a_client_that_vanishes_mid_stream_has_its_session_closed() {
    let config = ServerConfig {
        max_sessions: 1,
        ..Default::default()
    };
    let server = TestServer::start(test_registry(), config).await;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut c = server.client().await;
    let mut responses = c
        .session(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(v1::SessionRequest {
        request_id: 1,
        kind: Some(Req::Make(make("classic/CartPole-v1", ""))),
    })
    .await
    .unwrap();
    assert!(matches!(
        responses.message().await.unwrap().unwrap().kind,
        Some(Resp::Make(_))
    ));
    // The only slot is taken.
    assert_eq!(
        c.make(make("classic/CartPole-v1", ""))
            .await
            .unwrap_err()
            .code(),
        Code::ResourceExhausted
    );
    // The client goes away without closing: drop both halves of the stream.
    drop(tx);
    drop(responses);
    eventually("the stream's session to be closed", || {
        let mut c = c.clone();
        async move { c.make(make("classic/CartPole-v1", "")).await.is_ok() }
    })
    .await;
}

#[tokio::test]
async fn idle_unary_sessions_are_reaped() {
    // One slot: a new `make` succeeds only once the idle session is gone. Probing with `make` (not
    // with calls on the idle session, which would keep it alive) observes the reaper from outside.
    let config = ServerConfig {
        max_sessions: 1,
        idle_timeout_ms: 300,
        ..Default::default()
    };
    let server = TestServer::start(test_registry(), config).await;
    let mut c = server.client().await;
    let idle = c
        .make(make("classic/CartPole-v1", ""))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    eventually("the idle session to be reaped", || {
        let mut c = c.clone();
        async move { c.make(make("classic/CartPole-v1", "")).await.is_ok() }
    })
    .await;
    let reset = v1::ResetRequest {
        session_id: idle,
        seed: None,
        options_json: String::new(),
    };
    assert_eq!(c.reset(reset).await.unwrap_err().code(), Code::NotFound);
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_steps() {
    let mut server = TestServer::start(test_registry(), Default::default()).await;
    let mut c = server.client().await;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut responses = c
        .session(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let send = |id, kind| v1::SessionRequest {
        request_id: id,
        kind: Some(kind),
    };
    tx.send(send(
        1,
        Req::Make(make("test/Sleepy-v0", r#"{"sleep_ms": 700}"#)),
    ))
    .await
    .unwrap();
    tx.send(send(2, Req::Reset(v1::ResetRequest::default())))
        .await
        .unwrap();
    let step = v1::StepRequest {
        session_id: String::new(),
        action: Some(value_to_proto(&Value::Discrete(0))),
    };
    tx.send(send(3, Req::Step(step))).await.unwrap();
    assert!(matches!(
        responses.message().await.unwrap().unwrap().kind,
        Some(Resp::Make(_))
    ));
    assert!(matches!(
        responses.message().await.unwrap().unwrap().kind,
        Some(Resp::Reset(_))
    ));
    // The step is now in flight (it sleeps 700 ms); ask the server to stop.
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.begin_shutdown();
    let step = responses
        .message()
        .await
        .unwrap()
        .expect("the in-flight step is answered");
    assert!(matches!(step.kind, Some(Resp::Step(_))), "{step:?}");
    // Then the stream ends and the server returns cleanly.
    assert!(
        responses
            .message()
            .await
            .map(|m| m.is_none())
            .unwrap_or(true)
    );
    tokio::time::timeout(Duration::from_secs(30), server.handle)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[cfg(unix)]
#[tokio::test]
async fn the_serve_binary_reports_its_port_and_exits_zero_on_sigterm() {
    let mut serve = codegym_bin::Serve::start(["--addr", "127.0.0.1:0"]).await;
    let mut c = proto::v1::env_service_client::EnvServiceClient::connect(serve.url())
        .await
        .unwrap();
    let envs = c
        .list_envs(v1::ListEnvsRequest {})
        .await
        .unwrap()
        .into_inner()
        .envs;
    let ids: Vec<_> = envs.iter().map(|e| e.id.as_str()).collect();
    assert!(
        ids.contains(&"classic/CartPole-v1") && ids.contains(&"codegym/Code-v0"),
        "{ids:?}"
    );
    let session = c
        .make(make("classic/CartPole-v1", ""))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    assert!(!session.is_empty());

    serve.signal(nix::sys::signal::Signal::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(60), serve.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "exit status after SIGTERM: {status:?}");
}
