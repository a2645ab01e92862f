//! End-to-end tests of the gRPC server: a real server on 127.0.0.1:0 and a real tonic client.

mod support;

use std::time::Duration;

use env_core::{Options, Value};
use proto::convert::{self, value_from_proto, value_to_proto};
use proto::v1::env_service_client::EnvServiceClient;
use proto::v1::{self, session_request::Kind as Req, session_response::Kind as Resp};
use support::{TestServer, test_registry};
use tonic::Code;
use tonic::transport::Channel;

fn discrete(a: i64) -> Option<v1::Value> {
    Some(value_to_proto(&Value::Discrete(a)))
}

fn make(env_id: &str, kwargs: &str) -> v1::MakeRequest {
    v1::MakeRequest {
        env_id: env_id.into(),
        kwargs_json: kwargs.into(),
    }
}

fn step_req(session_id: &str, action: Option<v1::Value>) -> v1::StepRequest {
    v1::StepRequest {
        session_id: session_id.into(),
        action,
    }
}

fn reset_req(session_id: &str, seed: Option<u64>) -> v1::ResetRequest {
    v1::ResetRequest {
        session_id: session_id.into(),
        seed,
        options_json: String::new(),
    }
}

/// The in-process env is the oracle: over the wire, every observation must be bit-identical.
#[tokio::test]
async fn cartpole_unary_episode_matches_in_process_env() {
    let server = TestServer::start(test_registry(), Default::default()).await;
    let mut client = server.client().await;
    let made = client
        .make(make("classic/CartPole-v1", ""))
        .await
        .unwrap()
        .into_inner();
    let spec = made.spec.unwrap();
    assert_eq!(spec.id, "classic/CartPole-v1");
    assert_eq!(spec.max_episode_steps, Some(500));
    assert!(
        spec.supports_evaluate,
        "CartPole uses the generic reset+step evaluator"
    );

    let mut local = test_registry()
        .make("classic/CartPole-v1", &Default::default())
        .unwrap();
    let (local_obs, _) = local.reset(Some(7), &Options::new()).unwrap();
    let reset = client
        .reset(reset_req(&made.session_id, Some(7)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        value_from_proto(reset.observation.unwrap()).unwrap(),
        local_obs
    );

    let mut steps = 0;
    loop {
        // An alternating policy keeps the pole up for a while, then fails: a real episode.
        let action = (steps / 3) % 2;
        let remote = client
            .step(step_req(&made.session_id, discrete(action)))
            .await
            .unwrap()
            .into_inner();
        let expected = local.step(Value::Discrete(action)).unwrap();
        steps += 1;
        assert_eq!(
            value_from_proto(remote.observation.unwrap()).unwrap(),
            expected.obs
        );
        assert_eq!(remote.reward, 1.0);
        assert_eq!(
            (remote.terminated, remote.truncated),
            (expected.terminated, expected.truncated)
        );
        if remote.terminated || remote.truncated {
            break;
        }
        assert!(steps < 600, "CartPole must end by truncation at 500");
    }
    // Stepping a finished episode is a precondition failure, not a silent reward.
    let err = client
        .step(step_req(&made.session_id, discrete(0)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(
        client
            .close(v1::CloseRequest {
                session_id: made.session_id.clone()
            })
            .await
            .unwrap()
            .into_inner()
            .closed
    );
    assert!(
        !client
            .close(v1::CloseRequest {
                session_id: made.session_id
            })
            .await
            .unwrap()
            .into_inner()
            .closed
    );
}

#[tokio::test]
async fn cartpole_truncates_at_max_episode_steps_over_a_pipelined_stream() {
    let server = TestServer::start(test_registry(), Default::default()).await;
    let mut client = server.client().await;
    // All requests are sent up front: the server must answer each, in order.
    let n_steps = 40u64;
    let mut requests = vec![
        v1::SessionRequest {
            request_id: 1,
            kind: Some(Req::Make(make(
                "classic/CartPole-v1",
                r#"{"max_episode_steps": 10}"#,
            ))),
        },
        v1::SessionRequest {
            request_id: 2,
            kind: Some(Req::Reset(reset_req("", Some(3)))),
        },
    ];
    for i in 0..n_steps {
        requests.push(v1::SessionRequest {
            request_id: 3 + i,
            kind: Some(Req::Step(step_req("", discrete((i % 2) as i64)))),
        });
    }
    requests.push(v1::SessionRequest {
        request_id: 100,
        kind: Some(Req::Close(v1::CloseRequest::default())),
    });
    let total = requests.len();
    let mut responses = client
        .session(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let mut got = Vec::new();
    while let Some(r) = responses.message().await.unwrap() {
        got.push(r);
    }
    assert_eq!(got.len(), total, "exactly one response per request");
    let ids: Vec<u64> = got.iter().map(|r| r.request_id).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(ids, sorted, "responses come in request order");
    assert!(matches!(got[0].kind, Some(Resp::Make(_))));
    assert!(matches!(got[1].kind, Some(Resp::Reset(_))));
    // Steps 1..=10 succeed; the 10th is truncated (alternating actions do not terminate that fast);
    // everything after is FAILED_PRECONDITION in-band, and the stream keeps going.
    for (i, r) in got[2..2 + n_steps as usize].iter().enumerate() {
        match (&r.kind, i) {
            (Some(Resp::Step(s)), i) if i < 10 => assert_eq!(s.truncated, i == 9, "step {i}"),
            (Some(Resp::Error(e)), i) if i >= 10 => {
                assert_eq!(e.code, Code::FailedPrecondition as i32)
            }
            (other, i) => panic!("unexpected response to step {i}: {other:?}"),
        }
    }
    assert!(matches!(
        got.last().unwrap().kind,
        Some(Resp::Close(v1::CloseResponse { closed: true }))
    ));
}

#[tokio::test]
async fn every_error_maps_to_its_status_code() {
    let config = codegym::server::ServerConfig {
        max_sessions: 3,
        ..Default::default()
    };
    let server = TestServer::start(test_registry(), config).await;
    let mut c = server.client().await;

    let e = c.make(make("classic/NoSuchEnv-v1", "")).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(e.message().contains("NoSuchEnv"), "{}", e.message());
    assert_eq!(
        c.make(make("classic/CartPole-v9", ""))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    assert_eq!(
        c.make(make("not an id!", "")).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    assert_eq!(
        c.make(make("classic/CartPole-v1", "{oops"))
            .await
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
    assert_eq!(
        c.make(make("classic/CartPole-v1", "[1]"))
            .await
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
    assert_eq!(
        c.reset(reset_req("no-such-session", None))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    assert_eq!(
        c.step(step_req("no-such-session", discrete(0)))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );

    let id = c
        .make(make("classic/CartPole-v1", ""))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let e = c.step(step_req(&id, discrete(0))).await.unwrap_err();
    assert_eq!(
        e.code(),
        Code::FailedPrecondition,
        "step before reset: {e:?}"
    );
    c.reset(reset_req(&id, Some(0))).await.unwrap();
    assert_eq!(
        c.step(step_req(&id, None)).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    assert_eq!(
        c.step(step_req(&id, discrete(5))).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let text = Some(value_to_proto(&Value::Text("left".into())));
    assert_eq!(
        c.step(step_req(&id, text)).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let torn = v1::Value {
        kind: Some(v1::value::Kind::Tensor(v1::Tensor {
            dtype: v1::Dtype::Int64 as i32,
            shape: vec![1],
            data: vec![1, 2, 3],
        })),
    };
    assert_eq!(
        c.step(step_req(&id, Some(torn))).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let bad_options = v1::ResetRequest {
        session_id: id.clone(),
        seed: None,
        options_json: "nope".into(),
    };
    assert_eq!(
        c.reset(bad_options).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    // The session survived every bad request.
    c.step(step_req(&id, discrete(1))).await.unwrap();

    let eval = v1::EvaluateRequest {
        env_id: "test/Sleepy-v0".into(),
        kwargs_json: String::new(),
        items: vec![],
    };
    let e = c.evaluate(eval).await.unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented, "{e:?}");
    let eval = v1::EvaluateRequest {
        env_id: "classic/NoSuchEnv-v1".into(),
        kwargs_json: String::new(),
        items: vec![],
    };
    assert_eq!(c.evaluate(eval).await.unwrap_err().code(), Code::NotFound);

    // Capacity: 3 sessions in all; one is open, two more fit, the fourth does not.
    let _a = c.make(make("classic/CartPole-v1", "")).await.unwrap();
    let _b = c.make(make("classic/CartPole-v1", "")).await.unwrap();
    let e = c.make(make("classic/CartPole-v1", "")).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    c.close(v1::CloseRequest { session_id: id }).await.unwrap();
    c.make(make("classic/CartPole-v1", ""))
        .await
        .expect("a closed session frees its slot");
}

/// A server with one reset session of an env whose steps take 1.5 s.
async fn sleepy_session() -> (TestServer, EnvServiceClient<Channel>, String) {
    let server = TestServer::start(test_registry(), Default::default()).await;
    let mut c = server.client().await;
    let id = c
        .make(make("test/Sleepy-v0", r#"{"sleep_ms": 1500}"#))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    c.reset(reset_req(&id, None)).await.unwrap();
    (server, c, id)
}

#[tokio::test]
async fn client_deadline_gives_deadline_exceeded_and_session_survives() {
    let (server, mut c, id) = sleepy_session().await;
    // The bare client has no timer of its own, so the status is the server's answer.
    let answer = support::raw_grpc::unary(
        server.addr,
        "/codegym.v1.EnvService/Step",
        &step_req(&id, discrete(0)),
        Duration::from_millis(200),
        Duration::ZERO,
    )
    .await;
    assert_eq!(answer.code, Code::DeadlineExceeded, "{answer:?}");
    // The abandoned step completes in the background; the next one sees its effect.
    let next = c
        .step(step_req(&id, discrete(0)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        value_from_proto(next.observation.unwrap()).unwrap(),
        Value::Discrete(2)
    );
}

/// tonic starts its own timer when the headers arrive; a handler that only counted from when it got
/// the whole body would lose that race to a slow uploader and the client would see CANCELLED.
#[tokio::test]
async fn the_deadline_counts_from_arrival_not_from_a_slow_body() {
    let (server, _c, id) = sleepy_session().await;
    let answer = support::raw_grpc::unary(
        server.addr,
        "/codegym.v1.EnvService/Step",
        &step_req(&id, discrete(0)),
        Duration::from_millis(300),
        Duration::from_millis(200),
    )
    .await;
    assert_eq!(answer.code, Code::DeadlineExceeded, "{answer:?}");
}

#[tokio::test]
async fn a_panicking_env_fails_its_request_not_the_server() {
    let server = TestServer::start(test_registry(), Default::default()).await;
    let mut c = server.client().await;
    let id = c
        .make(make("test/Panicky-v0", ""))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    c.reset(reset_req(&id, None)).await.unwrap();
    let e = c.step(step_req(&id, discrete(13))).await.unwrap_err();
    assert_eq!(e.code(), Code::Internal, "{e:?}");
    // Its session is unusable afterwards, but every other session and the server are fine.
    assert!(c.step(step_req(&id, discrete(1))).await.is_err());
    let other = c
        .make(make("test/Panicky-v0", ""))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    c.reset(reset_req(&other, None)).await.unwrap();
    assert_eq!(
        c.step(step_req(&other, discrete(1)))
            .await
            .unwrap()
            .into_inner()
            .reward,
        1.0
    );
}

/// The generic `Evaluate` path: each item is an independent reset(seed, options) + step(action); a bad
/// item fails alone.
/// On a stream, a panicking env fails its own request with INTERNAL; the stream goes on without a
/// session (FAILED_PRECONDITION until the next `make`), and a new session on it works.
#[tokio::test]
async fn a_panicking_env_on_a_stream_loses_only_its_session() {
    let server = TestServer::start(test_registry(), Default::default()).await;
    let mut client = server.client().await;
    let req = |request_id, kind| v1::SessionRequest {
        request_id,
        kind: Some(kind),
    };
    let requests = vec![
        req(1, Req::Make(make("test/Panicky-v0", ""))),
        req(2, Req::Reset(reset_req("", None))),
        req(3, Req::Step(step_req("", discrete(13)))),
        req(4, Req::Step(step_req("", discrete(1)))),
        req(5, Req::Make(make("test/Panicky-v0", ""))),
        req(6, Req::Reset(reset_req("", None))),
        req(7, Req::Step(step_req("", discrete(1)))),
    ];
    let mut responses = client
        .session(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let mut got = Vec::new();
    while let Some(r) = responses.message().await.unwrap() {
        got.push(r.kind);
    }
    assert_eq!(got.len(), 7, "{got:?}");
    let code = |k: &Option<Resp>| match k {
        Some(Resp::Error(e)) => Code::from_i32(e.code),
        other => panic!("expected an error, got {other:?}"),
    };
    assert_eq!(code(&got[2]), Code::Internal);
    assert_eq!(code(&got[3]), Code::FailedPrecondition);
    assert!(matches!(got[4], Some(Resp::Make(_))), "{:?}", got[4]);
    assert!(
        matches!(&got[6], Some(Resp::Step(s)) if s.reward == 1.0),
        "{:?}",
        got[6]
    );
}

#[tokio::test]
async fn evaluate_scores_items_independently_and_in_order() {
    let server = TestServer::start(test_registry(), Default::default()).await;
    let mut c = server.client().await;
    let item = |seed, action: Option<v1::Value>| v1::EvaluateItem {
        seed: Some(seed),
        options_json: String::new(),
        action,
    };
    let items = vec![
        item(1, discrete(0)),
        item(2, discrete(7)),
        item(3, discrete(1)),
        item(4, None),
    ];
    let results = c
        .evaluate(v1::EvaluateRequest {
            env_id: "classic/CartPole-v1".into(),
            kwargs_json: String::new(),
            items,
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(results.len(), 4);
    let registry = test_registry();
    for (i, (seed, action)) in [(0usize, (1u64, 0i64)), (2, (3, 1))] {
        let mut env = registry
            .make("classic/CartPole-v1", &Default::default())
            .unwrap();
        env.reset(Some(seed), &Options::new()).unwrap();
        let expected = env.step(Value::Discrete(action)).unwrap();
        let got = results[i].step.clone().expect("a scored item");
        assert_eq!(
            value_from_proto(got.observation.unwrap()).unwrap(),
            expected.obs,
            "item {i}"
        );
        assert_eq!(got.reward, expected.reward);
    }
    for i in [1, 3] {
        let error = results[i]
            .error
            .as_ref()
            .unwrap_or_else(|| panic!("item {i} must fail: {:?}", results[i]));
        assert_eq!(
            error.code,
            Code::InvalidArgument as i32,
            "item {i}: {}",
            error.message
        );
    }
}

#[tokio::test]
async fn health_and_reflection_are_served() {
    use tonic_health::pb::{
        HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
    };
    let server = TestServer::start(test_registry(), Default::default()).await;
    let mut health = HealthClient::new(server.channel().await);
    let status = health
        .check(HealthCheckRequest {
            service: "codegym.v1.EnvService".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);

    use tonic_reflection::pb::v1::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };
    let mut reflection = ServerReflectionClient::new(server.channel().await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let response = stream.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("unexpected reflection response: {response:?}");
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"codegym.v1.EnvService"), "{names:?}");
}

#[tokio::test]
async fn list_envs_describes_spaces() {
    let server = TestServer::start(test_registry(), Default::default()).await;
    let envs = server
        .client()
        .await
        .list_envs(v1::ListEnvsRequest {})
        .await
        .unwrap()
        .into_inner()
        .envs;
    let cartpole = envs
        .iter()
        .find(|e| e.id == "classic/CartPole-v1")
        .expect("CartPole listed");
    let Some(v1::space::Kind::Box(obs)) = cartpole
        .observation_space
        .as_ref()
        .and_then(|s| s.kind.clone())
    else {
        panic!("CartPole observes a Box: {cartpole:?}");
    };
    assert_eq!(
        (obs.dtype, obs.shape.as_slice()),
        (v1::Dtype::Float32 as i32, &[4u64][..])
    );
    assert!(matches!(
        cartpole.action_space.as_ref().and_then(|s| s.kind.clone()),
        Some(v1::space::Kind::Discrete(v1::DiscreteSpace {
            n: 2,
            start: 0
        }))
    ));
    let _ = convert::json_object(&cartpole.default_kwargs_json, "default_kwargs_json").unwrap();
}
