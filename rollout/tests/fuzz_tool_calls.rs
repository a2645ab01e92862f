//! Property-based fuzzing of the model's tool calls in tools mode, end to end: the fake model
//! answers with one message of tool calls whose names and `arguments` texts are generated (the
//! OpenAI form, arguments as a JSON string: valid calls, calls with a field missing or retyped,
//! unknown tools, arguments that are no JSON object or no JSON at all), and a real rollout runs
//! them against the real `codegym/Code-v0` (sandboxed Python; script and session modes), which
//! dispatches each decoded call (`env-coding/src/tools.rs`).
//!
//! Properties, for every episode:
//! - the episode ends without an episode error (a malformed call is the model's fault, not the
//!   machinery's);
//! - every call gets exactly one env step record and one tool message answering its id, in order;
//! - a call the model of the tools says is valid is a step with a result (an execution or an
//!   observation) and a reward; any other is a failed step whose tool message tells the model
//!   why (`error: ...` or `invalid action: ...`).
//!
//! Each case runs a rollout (and the valid calls run programs), so the count is small:
//! `CODEGYM_FUZZ_CASES` (default 16; see docs/fuzzing.md for the long mode).

mod support;

#[path = "../../tests/support/fuzz_config.rs"]
mod fuzz_config;

use std::sync::{Arc, OnceLock};

use fake_llm::{FakeLlm, FakeScript, Reply, Rule};
use proptest::prelude::*;
use rollout::dataset::read_latest;
use rollout::dataset::record::{EpisodeMode, Role, StopReason};
use rollout::{EnvBackend, run};
use serde_json::{Value as J, json};
use tokio_util::sync::CancellationToken;

fn config(default: u32) -> proptest::test_runner::Config {
    fuzz_config::config(default, "tests/proptest-regressions/fuzz_tool_calls.txt")
}

struct World {
    runtime: tokio::runtime::Runtime,
    registry: Arc<env_core::Registry>,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| World {
        runtime: tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime"),
        registry: support::registry(),
    })
}

/// One generated call: the tool's name and its arguments (a JSON value, or raw text).
#[derive(Debug, Clone)]
struct Call {
    name: String,
    arguments: Args,
}

#[derive(Debug, Clone)]
enum Args {
    Json(J),
    Text(String),
}

impl Args {
    fn text(&self) -> String {
        match self {
            Args::Json(v) => v.to_string(),
            Args::Text(t) => t.clone(),
        }
    }
}

/// Programs a call may carry: none solves the task, none is slow.
const PROGRAMS: &[&str] = &[
    "print(1)",
    "",
    "import sys; sys.exit(3)",
    "x = 'é' * 3\nprint(x)",
    "raise ValueError('no')",
];

fn json_value() -> impl Strategy<Value = J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        any::<i32>().prop_map(J::from),
        "\\PC{0,8}".prop_map(J::String),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(J::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..3)
                .prop_map(|m| J::Object(m.into_iter().collect())),
        ]
    })
}

/// A change to a call's valid arguments.
#[derive(Debug, Clone)]
enum Change {
    None,
    Drop(prop::sample::Index),
    Retype(prop::sample::Index, J),
    Add(String, J),
    Json(J),
    Text(String),
}

fn change() -> impl Strategy<Value = Change> {
    let ix = any::<prop::sample::Index>;
    prop_oneof![
        3 => Just(Change::None),
        1 => ix().prop_map(Change::Drop),
        2 => (ix(), json_value()).prop_map(|(i, v)| Change::Retype(i, v)),
        1 => ("[a-z]{1,6}", json_value()).prop_map(|(k, v)| Change::Add(k, v)),
        1 => json_value().prop_map(Change::Json),
        1 => prop_oneof![
            Just("{\"code\": \"print(1)\"".to_string()), Just(String::new()), "\\PC{0,24}"
        ].prop_map(Change::Text),
    ]
}

fn call() -> impl Strategy<Value = Call> {
    let name = prop::sample::select(vec![
        "run_python",
        "run_python",
        "run_code",
        "write_file",
        "read_file",
        "rm_rf",
        "",
    ]);
    let program = prop::sample::select(PROGRAMS.to_vec());
    (
        name,
        program,
        "[a-z]{1,8}\\.(py|txt)",
        "\\PC{0,20}",
        change(),
    )
        .prop_map(|(name, code, path, content, change)| {
            // The tool's valid arguments (`run_code`'s language is optional).
            let mut args = match name {
                "run_code" => json!({"code": code, "language": "python"}),
                "write_file" => json!({"path": path, "content": content}),
                "read_file" => json!({"path": path}),
                _ => json!({"code": code}),
            };
            let map = args.as_object_mut().expect("an object");
            let keys: Vec<String> = map.keys().cloned().collect();
            let arguments = match change {
                Change::None => Args::Json(args),
                Change::Drop(i) => {
                    map.remove(&keys[i.index(keys.len())]);
                    Args::Json(args)
                }
                Change::Retype(i, v) => {
                    map.insert(keys[i.index(keys.len())].clone(), v);
                    Args::Json(args)
                }
                Change::Add(k, v) => {
                    map.insert(k, v);
                    Args::Json(args)
                }
                Change::Json(v) => Args::Json(v),
                Change::Text(t) => Args::Text(t),
            };
            Call {
                name: name.to_string(),
                arguments,
            }
        })
}

/// Whether the tools' contract takes this call in this mode: a tool the episode offers, with its
/// required string fields, in the episode's language, and nothing the env refuses.
fn valid(call: &Call, session: bool) -> bool {
    let Args::Json(J::Object(args)) = &call.arguments else {
        return false;
    };
    let string = |k: &str| args.get(k).is_some_and(J::is_string);
    // The env's own fields of each tool (`tools.rs`): any other is an unknown field.
    let only = |allowed: &[&str]| args.keys().all(|k| allowed.contains(&k.as_str()));
    match call.name.as_str() {
        "run_python" => string("code") && only(&["code"]),
        "run_code" => {
            string("code")
                && args.get("language").is_none_or(|l| l == "python")
                && only(&["code", "language"])
        }
        "write_file" => {
            session && string("path") && string("content") && only(&["path", "content"])
        }
        "read_file" => session && string("path") && only(&["path"]),
        _ => false,
    }
}

async fn episode(calls: &[Call], session: bool) -> Result<(), TestCaseError> {
    let tasks = support::tasks(1);
    let raw: Vec<(String, String)> = calls
        .iter()
        .map(|c| (c.name.clone(), c.arguments.text()))
        .collect();
    let script = FakeScript {
        rules: vec![Rule {
            prompt_contains: None,
            turn: Some(0),
            reply: Reply::RawToolCalls(raw),
        }],
        default_reply: Reply::Text("I am done.".into()),
        ..FakeScript::default()
    };
    let server = FakeLlm::start(script).await.expect("the fake model");
    let dir = tempfile::tempdir().expect("a temp dir");
    let out = dir.path().join("tools.jsonl");
    let mut config = support::config(&server.base_url(), &tasks, 1, &out);
    config.episode.mode = EpisodeMode::Tools;
    if session {
        config.env_kwargs.insert("mode".into(), json!("session"));
    }
    let ran = run(
        config,
        EnvBackend::in_process(world().registry.clone()),
        CancellationToken::new(),
    )
    .await;
    prop_assert!(ran.is_ok(), "the run failed: {:?}", ran.err());
    let records = read_latest(&out).expect("the dataset reads");
    prop_assert_eq!(records.len(), 1);
    let r = &records[0];
    prop_assert!(r.error.is_none(), "an episode error: {:?}", r.error);
    prop_assert!(r.stop_reason != StopReason::Error, "{:?}", r.stop_reason);
    let sent = r
        .messages
        .iter()
        .find_map(|m| m.tool_calls.clone())
        .expect("the calls");
    prop_assert_eq!(sent.len(), calls.len());
    let steps = &r.turns[0].env_steps;
    prop_assert_eq!(steps.len(), calls.len(), "one step per call");
    let answers: Vec<_> = r.messages.iter().filter(|m| m.role == Role::Tool).collect();
    prop_assert_eq!(answers.len(), calls.len(), "one tool message per call");
    for (i, call) in calls.iter().enumerate() {
        let id = &sent[i].id;
        prop_assert_eq!(steps[i].tool_call_id.as_ref(), Some(id));
        prop_assert_eq!(answers[i].tool_call_id.as_ref(), Some(id));
        let text = answers[i].content.clone().unwrap_or_default();
        if valid(call, session) {
            prop_assert!(steps[i].error.is_none(), "{:?}: {:?}", call, steps[i].error);
            prop_assert!(
                steps[i].execution.is_some() || steps[i].observation.is_some(),
                "{:?}: no result",
                call
            );
        } else {
            prop_assert!(steps[i].error.is_some(), "{:?} was taken: {}", call, text);
            prop_assert!(
                text.starts_with("error: ") || text.starts_with("invalid action: "),
                "{:?}: the model is not told why: {}",
                call,
                text
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(16))]

    #[test]
    fn every_tool_call_gets_a_result_or_an_error_the_model_sees(
        calls in prop::collection::vec(call(), 1..4),
        session in any::<bool>(),
    ) {
        world().runtime.block_on(episode(&calls, session))?;
    }
}
