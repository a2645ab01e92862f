//! Property-based fuzzing of what `make` and `reset` take (kwargs and options), through a real
//! gRPC server (`Make`, `Reset`, `Close`) with the real registry: `codegym/Code-v0` (and its alias
//! `codegym/Python-v0`), `codegym/Repo-v0` and `classic/CartPole-v1`.
//!
//! Kwargs and options are the valid ones of the other tests, mutated (a key dropped, retyped, given
//! a random value or added), any JSON object, or text that is not a JSON object. Properties:
//! - `Make` gives a session or INVALID_ARGUMENT, the one error table's answer to bad kwargs
//!   (`InvalidKwargs`, or `Convert` for text that is no JSON object); a declared `tools` kwarg is
//!   `ToolsNeedStream` (FAILED_PRECONDITION) on unary `Make`, as the table says; never INTERNAL,
//!   never a panic, never a dropped connection;
//! - a known kwarg of `codegym/Code-v0` retyped is an error naming it;
//! - `Reset` of a made session with random options gives an observation or INVALID_ARGUMENT
//!   (FAILED_PRECONDITION for a task's refused `requirements`), never anything else;
//! - every row met is a row of the table (`codegym::server::status::TABLE`).
//!
//! Reset runs no program and `Repo-v0` is only made, so the case count can be high-ish:
//! `CODEGYM_FUZZ_CASES` (default 128; see docs/fuzzing.md for the long mode).

mod support;

#[path = "support/fuzz_config.rs"]
mod fuzz_config;

use std::sync::OnceLock;

use codegym::server::status::TABLE;
use proptest::prelude::*;
use proto::v1;
use serde_json::{Value as J, json};
use support::TestServer;
use tonic::Code;

fn config(default: u32) -> proptest::test_runner::Config {
    fuzz_config::config(default, "tests/proptest-regressions/fuzz_kwargs.txt")
}

struct World {
    runtime: tokio::runtime::Runtime,
    server: TestServer,
}

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let coding = env_coding::CodingConfig {
            task_dirs: vec![root().join("env-coding/tasks")],
            ..Default::default()
        };
        let registry = codegym::registry(coding).expect("the registry");
        let server = runtime.block_on(TestServer::start(registry, Default::default()));
        World { runtime, server }
    })
}

/// Each env and the valid kwargs its `make` calls grow from.
fn envs() -> Vec<(&'static str, Vec<J>)> {
    let tasks = |rel: &str| root().join(rel).display().to_string();
    let code = vec![
        json!({}),
        json!({"mode": "session", "extract": "raw", "variables": true}),
        json!({"limits": {"wall_ms": 5000, "cpu_ms": 2000}, "max_episode_steps": 2}),
        json!({"grade": false, "observe": true, "tool_limits": {"max_calls": 2}}),
        json!({"observe": false, "tasks": tasks("env-coding/tasks/examples.jsonl")}),
        json!({"tasks": "builtin:examples", "tools": []}),
    ];
    vec![
        ("codegym/Code-v0", code.clone()),
        ("codegym/Python-v0", code),
        (
            "codegym/Repo-v0",
            vec![json!({"tasks": tasks("env-coding/tasks/repository/tasks.jsonl")})],
        ),
        (
            "classic/CartPole-v1",
            vec![
                json!({}),
                json!({"sutton_barto_reward": true, "max_episode_steps": 10}),
            ],
        ),
    ]
}

/// The valid `reset` options of an env.
fn options(env: &str) -> Vec<J> {
    if env == "classic/CartPole-v1" {
        return vec![json!({})];
    }
    let inline = env_coding::tasks::TaskSet::builtin_examples()
        .iter()
        .next()
        .expect("a task")
        .to_json();
    vec![
        json!({}),
        json!({"task_id": "sum-of-squares"}),
        json!({"task_id": "sum-of-squares", "language": "python", "vars": {"x": 1}}),
        json!({"task": inline}),
    ]
}

fn json_value() -> impl Strategy<Value = J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        any::<i64>().prop_map(J::from),
        Just(J::from(u64::MAX)),
        prop::sample::select(vec![-1.5, 0.0, 1e308]).prop_map(J::from),
        "\\PC{0,10}".prop_map(J::String),
        prop::sample::select(vec![
            "session",
            "script",
            "raw",
            "builtin:examples",
            "/etc/passwd"
        ])
        .prop_map(J::from),
    ];
    leaf.prop_recursive(2, 10, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(J::Array),
            prop::collection::btree_map("[a-z_]{1,10}", inner, 0..4)
                .prop_map(|m| J::Object(m.into_iter().collect())),
        ]
    })
}

#[derive(Debug, Clone)]
enum Mutation {
    None,
    Drop(prop::sample::Index),
    Retype(prop::sample::Index, J),
    Add(String, J),
    Object(J),
    Text(String),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        1 => Just(Mutation::None),
        1 => any::<prop::sample::Index>().prop_map(Mutation::Drop),
        4 => (any::<prop::sample::Index>(), json_value()).prop_map(|(i, v)| Mutation::Retype(i, v)),
        2 => ("[a-z_]{1,12}", json_value()).prop_map(|(k, v)| Mutation::Add(k, v)),
        1 => prop::collection::btree_map("[a-z_]{1,10}", json_value(), 0..4)
            .prop_map(|m| Mutation::Object(J::Object(m.into_iter().collect()))),
        1 => prop_oneof![
            Just("[]".to_string()), Just("null".to_string()), Just("{".to_string()),
            Just("\"mode\"".to_string()), "\\PC{0,16}",
        ].prop_map(Mutation::Text),
    ]
}

/// The JSON text `m` makes of `seed`, and the key it retyped (if any).
fn render(seed: &J, m: &Mutation) -> (String, Option<String>) {
    let mut value = seed.clone();
    let map = value.as_object_mut().expect("an object");
    let keys: Vec<String> = map.keys().cloned().collect();
    let mut retyped = None;
    match m {
        Mutation::None => {}
        Mutation::Drop(ix) if !keys.is_empty() => {
            map.remove(&keys[ix.index(keys.len())]);
        }
        Mutation::Retype(ix, v) if !keys.is_empty() => {
            let k = keys[ix.index(keys.len())].clone();
            map.insert(k.clone(), v.clone());
            retyped = Some(k);
        }
        Mutation::Add(k, v) => {
            map.insert(k.clone(), v.clone());
        }
        Mutation::Object(v) => return (v.to_string(), None),
        Mutation::Text(t) => return (t.clone(), None),
        _ => {}
    }
    (value.to_string(), retyped)
}

/// Whether the server's rule for unary `Make` sees host tools declared (`requests.rs`).
fn declares_tools(text: &str) -> bool {
    serde_json::from_str::<J>(text).is_ok_and(|v| {
        v.get("tools")
            .is_some_and(|t| !t.is_null() && t.as_array().is_none_or(|a| !a.is_empty()))
    })
}

/// The status is a row of the one table with a message.
fn in_table(s: &tonic::Status) -> Result<(), TestCaseError> {
    prop_assert!(
        TABLE.iter().any(|row| row.grpc == s.code()),
        "{:?} is no row of the table: {}",
        s.code(),
        s.message()
    );
    prop_assert!(!s.message().is_empty(), "{:?} without a message", s.code());
    Ok(())
}

async fn check(
    env: &str,
    kwargs: &str,
    retyped: Option<&str>,
    opts: &str,
) -> Result<(), TestCaseError> {
    let mut c = world().server.client().await;
    let made = c
        .make(v1::MakeRequest {
            env_id: env.into(),
            kwargs_json: kwargs.into(),
        })
        .await;
    let id = match made {
        Ok(r) => r.into_inner().session_id,
        Err(s) => {
            in_table(&s)?;
            let expected = if declares_tools(kwargs) {
                Code::FailedPrecondition
            } else {
                Code::InvalidArgument
            };
            prop_assert_eq!(
                s.code(),
                expected,
                "make {} {}: {}",
                env,
                kwargs,
                s.message()
            );
            if let (Some(k), "codegym/Code-v0", Code::InvalidArgument) = (retyped, env, s.code()) {
                prop_assert!(s.message().contains(k), "{} retyped: {}", k, s.message());
            }
            return Ok(());
        }
    };
    if env != "codegym/Repo-v0" {
        let reset = c
            .reset(v1::ResetRequest {
                session_id: id.clone(),
                seed: Some(7),
                options_json: opts.into(),
            })
            .await;
        match reset {
            Ok(r) => prop_assert!(r.into_inner().observation.is_some(), "no observation"),
            Err(s) => {
                in_table(&s)?;
                let refused_package =
                    s.code() == Code::FailedPrecondition && opts.contains("requirements");
                prop_assert!(
                    s.code() == Code::InvalidArgument || refused_package,
                    "reset {} {} with {}: {:?} {}",
                    env,
                    kwargs,
                    opts,
                    s.code(),
                    s.message()
                );
            }
        }
    }
    let closed = c.close(v1::CloseRequest { session_id: id }).await;
    prop_assert!(closed.is_ok(), "close: {:?}", closed.err());
    Ok(())
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn kwargs_and_options_get_a_session_or_a_table_error(
        env in any::<prop::sample::Index>(),
        seed in any::<prop::sample::Index>(),
        m in mutation(),
        option in any::<prop::sample::Index>(),
        om in mutation(),
    ) {
        let envs = envs();
        let (env, seeds) = &envs[env.index(envs.len())];
        let (kwargs, retyped) = render(&seeds[seed.index(seeds.len())], &m);
        let options = options(env);
        let (opts, _) = render(&options[option.index(options.len())], &om);
        world().runtime.block_on(check(env, &kwargs, retyped.as_deref(), &opts))?;
    }
}
