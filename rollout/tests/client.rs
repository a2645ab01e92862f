//! The chat client against the fake server: every fault kind, which ones are retried, server
//! retry delays, the episode retry budget, and what is passed through and kept.

use fake_llm::{FakeLlm, FakeScript, Fault, FaultRule, Reply};
use rollout::client::{CallOutcome, ChatClient, ChatRequest};
use rollout::config::ModelConfig;
use rollout::dataset::record::{ChatMessage, ErrorKind, Role, TokenSource};

fn model_config(base_url: &str) -> ModelConfig {
    ModelConfig {
        model: "org/model:fastest".into(),
        base_urls: vec![base_url.to_string()],
        api_key_env: Some(Vec::new()),
        backoff_initial_ms: 1,
        backoff_max_ms: 2_000,
        request_timeout_secs: 30.0,
        max_retries: 5,
        ..ModelConfig::default()
    }
}

fn faults(rules: Vec<FaultRule>) -> FakeScript {
    FakeScript {
        faults: rules,
        default_reply: Reply::Text("ok".into()),
        ..FakeScript::default()
    }
}

async fn call(client: &ChatClient, budget: &mut u32) -> CallOutcome {
    let messages = [ChatMessage::text(Role::User, "hello")];
    let req = ChatRequest {
        messages: &messages,
        tools: None,
        seed: Some(42),
        response_format: None,
    };
    client.chat(0, &req, budget).await
}

#[tokio::test]
async fn retries_server_errors_until_success() {
    let server = FakeLlm::start(faults(vec![
        FaultRule::at(Fault::Status(500), [0]),
        FaultRule::at(Fault::Status(503), [1]),
        FaultRule::at(Fault::Status(408), [2]),
    ]))
    .await
    .unwrap();
    let client = ChatClient::new(&model_config(&server.base_url())).unwrap();
    let mut budget = 10;
    let out = call(&client, &mut budget).await;
    assert!(out.completion.is_some(), "{:?}", out.call.error);
    assert_eq!(out.call.attempts, 4);
    let statuses: Vec<_> = out.call.retries.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [Some(500), Some(503), Some(408)]);
    assert!(
        out.call
            .retries
            .iter()
            .all(|r| r.kind == ErrorKind::ServerError && !r.server_delay)
    );
    assert_eq!(server.request_count(), 4);
    assert_eq!(budget, 7);
}

#[tokio::test]
async fn honours_retry_after_headers_within_the_cap() {
    let server = FakeLlm::start(faults(vec![
        FaultRule::at(
            Fault::RateLimited {
                retry_after_secs: None,
                retry_after_ms: Some(30),
            },
            [0],
        ),
        FaultRule::at(
            Fault::RateLimited {
                retry_after_secs: Some(1),
                retry_after_ms: None,
            },
            [1],
        ),
        // Beyond the 2 s cap: ignored in favour of backoff.
        FaultRule::at(
            Fault::RateLimited {
                retry_after_secs: Some(3600),
                retry_after_ms: None,
            },
            [2],
        ),
    ]))
    .await
    .unwrap();
    let client = ChatClient::new(&model_config(&server.base_url())).unwrap();
    let out = call(&client, &mut 10).await;
    assert!(out.completion.is_some());
    let r = &out.call.retries;
    assert_eq!(r.len(), 3);
    assert!(
        r.iter()
            .all(|a| a.kind == ErrorKind::RateLimited && a.status == Some(429))
    );
    assert_eq!((r[0].backoff_ms, r[0].server_delay), (30, true));
    assert_eq!((r[1].backoff_ms, r[1].server_delay), (1000, true));
    assert!(!r[2].server_delay);
    assert!(r[2].backoff_ms <= 2_000);
    assert_eq!(server.request_count(), 4);
}

#[tokio::test]
async fn retries_timeouts_of_hanging_requests() {
    let server = FakeLlm::start(faults(vec![FaultRule::at(Fault::Hang, [0])]))
        .await
        .unwrap();
    let mut config = model_config(&server.base_url());
    config.request_timeout_secs = 1.0;
    let client = ChatClient::new(&config).unwrap();
    let out = call(&client, &mut 10).await;
    assert!(out.completion.is_some());
    assert_eq!(out.call.retries.len(), 1);
    assert_eq!(out.call.retries[0].kind, ErrorKind::RequestTimeout);
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn retries_connect_errors_then_gives_up() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = model_config(&format!("http://127.0.0.1:{port}/v1"));
    config.max_retries = 2;
    let client = ChatClient::new(&config).unwrap();
    let out = call(&client, &mut 10).await;
    assert!(out.completion.is_none());
    assert_eq!(out.call.attempts, 3);
    assert_eq!(out.call.retries.len(), 2);
    assert!(
        out.call
            .retries
            .iter()
            .all(|r| r.kind == ErrorKind::Connect)
    );
    assert_eq!(out.call.error.unwrap().kind, ErrorKind::Connect);
}

#[tokio::test]
async fn does_not_retry_client_errors() {
    for (fault, kind, status) in [
        (Fault::Unauthorized, ErrorKind::Auth, 401),
        (Fault::Status(400), ErrorKind::BadRequest, 400),
        (Fault::Status(404), ErrorKind::NotFound, 404),
        (Fault::ContextLength, ErrorKind::ContextLength, 400),
        (Fault::QuotaExceeded, ErrorKind::QuotaExceeded, 429),
        (Fault::NoRetryHeader, ErrorKind::ServerError, 500),
    ] {
        let server = FakeLlm::start(faults(vec![FaultRule::at(fault.clone(), [0])]))
            .await
            .unwrap();
        let client = ChatClient::new(&model_config(&server.base_url())).unwrap();
        let out = call(&client, &mut 10).await;
        let error = out.call.error.expect("the call must fail");
        assert_eq!(
            (error.kind, error.status),
            (kind, Some(status)),
            "{fault:?}"
        );
        assert_eq!(out.call.attempts, 1, "{fault:?}");
        assert!(out.call.retries.is_empty());
        assert_eq!(server.request_count(), 1, "{fault:?}");
    }
}

#[tokio::test]
async fn records_malformed_and_empty_completions_as_model_errors() {
    for (fault, kind) in [
        (Fault::Malformed, ErrorKind::MalformedResponse),
        (Fault::EmptyChoices, ErrorKind::EmptyChoice),
    ] {
        let server = FakeLlm::start(faults(vec![FaultRule::at(fault, [0])]))
            .await
            .unwrap();
        let client = ChatClient::new(&model_config(&server.base_url())).unwrap();
        let out = call(&client, &mut 10).await;
        assert_eq!(out.call.error.unwrap().kind, kind);
        assert_eq!(server.request_count(), 1);
    }
}

#[tokio::test]
async fn the_episode_retry_budget_bounds_retries() {
    let server = FakeLlm::start(faults(vec![FaultRule::with_rate(Fault::Status(502), 1.0)]))
        .await
        .unwrap();
    let client = ChatClient::new(&model_config(&server.base_url())).unwrap();
    let mut budget = 2;
    let out = call(&client, &mut budget).await;
    assert_eq!(
        out.call.error.unwrap().kind,
        ErrorKind::RetryBudgetExhausted
    );
    assert_eq!(out.call.attempts, 3);
    assert_eq!(budget, 0);
    let again = call(&client, &mut budget).await;
    assert_eq!(again.call.attempts, 1);
    assert_eq!(server.request_count(), 4);
}

#[tokio::test]
async fn passes_parameters_through_and_keeps_server_tokens() {
    let server = FakeLlm::start(FakeScript {
        default_reply: Reply::Text("abc".into()),
        support_logprobs: true,
        support_token_ids: true,
        record_requests: true,
        served_model: Some("org/model-provider-x".into()),
        ..FakeScript::default()
    })
    .await
    .unwrap();
    let mut config = model_config(&server.base_url());
    config.sampling.temperature = Some(0.7);
    config.sampling.top_p = Some(0.9);
    config.sampling.max_tokens = Some(64);
    config.sampling.stop = Some(vec!["END".into()]);
    config.sampling.logprobs = Some(true);
    config.sampling.top_logprobs = Some(2);
    config
        .sampling
        .extra_body
        .insert("return_token_ids".into(), serde_json::json!(true));
    let client = ChatClient::new(&config).unwrap();
    let out = call(&client, &mut 10).await;
    let body = &server.recorded_requests()[0];
    assert_eq!(body["model"], "org/model:fastest");
    assert_eq!(body["temperature"], 0.7);
    assert_eq!(body["top_p"], 0.9);
    assert_eq!(body["max_tokens"], 64);
    assert_eq!(body["stop"], serde_json::json!(["END"]));
    assert_eq!(body["seed"], 42);
    assert_eq!(body["top_logprobs"], 2);
    assert_eq!(body["return_token_ids"], true);
    assert!(body.get("n").is_none());
    assert_eq!(
        out.call.served_model.as_deref(),
        Some("org/model-provider-x")
    );
    let tokens = out.call.tokens.expect("the server returned tokens");
    assert_eq!(tokens.logprobs_source, Some(TokenSource::OpenaiLogprobs));
    assert_eq!(tokens.token_ids_source, Some(TokenSource::VllmTokenIds));
    assert_eq!(tokens.completion_token_ids, Some(vec![97, 98, 99]));
    assert_eq!(tokens.logprobs.map(|l| l.len()), Some(3));
    assert!(tokens.prompt_token_ids.is_some_and(|p| !p.is_empty()));

    // Without the request flags, nothing is invented.
    let plain = ChatClient::new(&model_config(&server.base_url())).unwrap();
    assert!(call(&plain, &mut 10).await.call.tokens.is_none());
}

/// A client whose environment holds exactly `vars`.
fn client_with_env(config: &ModelConfig, vars: &[(&str, &str)]) -> ChatClient {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ChatClient::with_env(config, move |name| {
        vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
    .unwrap()
}

#[tokio::test]
async fn keys_follow_the_endpoint_and_never_go_elsewhere() {
    let server = FakeLlm::start(faults(Vec::new())).await.unwrap();
    let mut config = model_config(&server.base_url());
    config.api_key_env = None; // the default: the key follows the endpoint
    let mut budget = 10;

    // A local endpoint is not the Hugging Face router: HF_TOKEN is never sent to it.
    let client = client_with_env(&config, &[("HF_TOKEN", "hf-secret")]);
    assert!(call(&client, &mut budget).await.completion.is_some());
    assert_eq!(server.last_authorization(), None);
    assert!(!client.has_api_key());

    // Its key is OPENAI_API_KEY, as for the OpenAI SDK.
    let client = client_with_env(
        &config,
        &[("HF_TOKEN", "hf-secret"), ("OPENAI_API_KEY", "sk-local")],
    );
    assert!(call(&client, &mut budget).await.completion.is_some());
    assert_eq!(
        server.last_authorization().as_deref(),
        Some("Bearer sk-local")
    );

    // An explicit --api-key-env is sent as named.
    config.api_key_env = Some(vec!["MY_KEY".into()]);
    let client = client_with_env(&config, &[("MY_KEY", "mine"), ("OPENAI_API_KEY", "sk")]);
    assert!(call(&client, &mut budget).await.completion.is_some());
    assert_eq!(server.last_authorization().as_deref(), Some("Bearer mine"));

    // An empty list sends no key at all.
    config.api_key_env = Some(Vec::new());
    let client = client_with_env(&config, &[("OPENAI_API_KEY", "sk"), ("HF_TOKEN", "hf")]);
    assert!(call(&client, &mut budget).await.completion.is_some());
    assert_eq!(server.last_authorization(), None);
}

#[test]
fn default_key_variable_by_host() {
    use rollout::config::default_key_env;
    assert_eq!(
        default_key_env("https://router.huggingface.co/v1"),
        "HF_TOKEN"
    );
    assert_eq!(default_key_env("https://HF.co/v1"), "HF_TOKEN");
    assert_eq!(
        default_key_env("https://api.openai.com/v1"),
        "OPENAI_API_KEY"
    );
    assert_eq!(
        default_key_env("http://127.0.0.1:8000/v1"),
        "OPENAI_API_KEY"
    );
    // Look-alike hosts are not the router.
    assert_eq!(
        default_key_env("https://huggingface.co.evil.example/v1"),
        "OPENAI_API_KEY"
    );
    assert_eq!(
        default_key_env("https://evilhuggingface.co/v1"),
        "OPENAI_API_KEY"
    );
    assert_eq!(
        default_key_env("https://huggingface.co@evil.example/v1"),
        "OPENAI_API_KEY"
    );
}

/// AutoCoder (issue 13): `response_format` reaches the server; one that refuses it answers 400,
/// which is not retried; a JSON reply is bare JSON with it and a fenced block without it.
#[tokio::test]
async fn response_format_is_sent_and_a_refusal_is_a_bad_request() {
    let format = serde_json::json!({"type": "json_schema",
        "json_schema": {"name": "plan", "strict": true, "schema": {"type": "object"}}});
    let messages = [ChatMessage::text(Role::User, "plan it")];
    let req = |f| ChatRequest {
        messages: &messages,
        tools: None,
        seed: None,
        response_format: f,
    };
    let reply = Reply::Json(serde_json::json!({"plan": "x"}));
    let server = FakeLlm::start(FakeScript {
        default_reply: reply.clone(),
        record_requests: true,
        ..FakeScript::default()
    })
    .await
    .unwrap();
    let client = ChatClient::new(&model_config(&server.base_url())).unwrap();
    let out = client.chat(0, &req(Some(&format)), &mut 10).await;
    let text = out.completion.unwrap().message.content.unwrap();
    assert_eq!(text, r#"{"plan":"x"}"#);
    assert_eq!(server.recorded_requests()[0]["response_format"], format);
    let out = client.chat(0, &req(None), &mut 10).await;
    let text = out.completion.unwrap().message.content.unwrap();
    assert!(
        text.contains("```json\n{\n  \"plan\": \"x\"\n}\n```"),
        "{text}"
    );
    assert!(
        server.recorded_requests()[1]
            .get("response_format")
            .is_none()
    );

    let refusing = FakeLlm::start(FakeScript {
        default_reply: reply,
        reject_response_format: true,
        ..FakeScript::default()
    })
    .await
    .unwrap();
    let client = ChatClient::new(&model_config(&refusing.base_url())).unwrap();
    let mut budget = 10;
    let out = client.chat(0, &req(Some(&format)), &mut budget).await;
    let error = out.call.error.expect("refused");
    assert_eq!(
        (error.kind, error.status),
        (ErrorKind::BadRequest, Some(400))
    );
    assert_eq!((out.call.attempts, budget), (1, 10));
    assert!(
        client
            .chat(0, &req(None), &mut budget)
            .await
            .completion
            .is_some()
    );
}
