//! `codegym/Python-v0` end to end through the registry: both modes, termination, truncation, tools,
//! errors, and the batch evaluator, on real sandboxed Python.

use std::sync::Arc;

use env_coding::{CodingConfig, PYTHON_ENV_ID, register};
use env_core::{
    AsyncEnv, EnvError, EvalItem, Info, Kwargs, Options, Registry, Result, Step, Value,
};
use serde_json::json;
use tokio::runtime::Runtime;

/// The registry with the coding env, and a runtime to drive its futures from these plain tests.
struct Reg {
    rt: Arc<Runtime>,
    reg: Registry,
}

/// An env driven to completion call by call, so the tests read like Gymnasium code.
struct TestEnv {
    rt: Arc<Runtime>,
    env: Box<dyn AsyncEnv>,
}

impl Reg {
    fn make(&self, id: &str, kwargs: &Kwargs) -> Result<TestEnv> {
        let env = self.rt.block_on(self.reg.make_async(id, kwargs))?;
        Ok(TestEnv {
            rt: self.rt.clone(),
            env,
        })
    }

    fn evaluate(&self, kwargs: Kwargs, items: Vec<EvalItem>) -> Result<Vec<Result<Step<Value>>>> {
        let evaluator = self.reg.evaluator(PYTHON_ENV_ID).expect("evaluator");
        self.rt.block_on(evaluator.evaluate(kwargs, items))
    }
}

impl TestEnv {
    fn reset(&mut self, seed: Option<u64>, options: &Options) -> Result<(Value, Info)> {
        self.rt.block_on(self.env.reset(seed, options.clone()))
    }

    fn step(&mut self, action: Value) -> Result<Step<Value>> {
        self.rt.block_on(self.env.step(action))
    }

    fn close(&mut self) -> Result<()> {
        self.rt.block_on(self.env.close())
    }

    fn as_mut(&mut self) -> &mut Self {
        self
    }
}

fn runtime() -> Arc<Runtime> {
    Arc::new(Runtime::new().expect("a tokio runtime"))
}

fn registry_with(config: CodingConfig) -> Reg {
    let mut reg = Registry::new();
    if let Err(e) = register(&mut reg, config) {
        panic!("register: {e}");
    }
    Reg { rt: runtime(), reg }
}

fn registry() -> Reg {
    registry_with(CodingConfig::default())
}

fn kwargs(v: serde_json::Value) -> Kwargs {
    v.as_object().cloned().unwrap_or_default()
}

fn make(reg: &Reg, kw: serde_json::Value) -> TestEnv {
    reg.make(PYTHON_ENV_ID, &kwargs(kw))
        .unwrap_or_else(|e| panic!("make: {e}"))
}

fn opts(v: serde_json::Value) -> Options {
    v.as_object().cloned().unwrap_or_default()
}

fn step(env: &mut TestEnv, action: Value) -> Step<Value> {
    env.step(action).unwrap_or_else(|e| panic!("step: {e}"))
}

fn exec(obs: &Value) -> &env_core::ExecutionResult {
    match obs {
        Value::Execution(r) => r,
        other => panic!("expected an execution, got {other:?}"),
    }
}

const SOLUTION: &str =
    "Here you go:\n```python\nprint(f'Result: {sum(i * i for i in range(1, 101))}')\n```\n";

#[test]
fn script_mode_solves_and_terminates() {
    let reg = registry();
    let mut env = make(&reg, json!({}));
    let (obs, info) = env
        .reset(Some(1), &opts(json!({"task_id": "sum-of-squares"})))
        .expect("reset");
    assert!(matches!(&obs, Value::Text(p) if p.contains("sum of the squares")));
    assert_eq!(info["task_id"], json!("sum-of-squares"));

    let s = step(env.as_mut(), Value::Text("print('Result: 1')".into()));
    assert_eq!(exec(&s.obs).stdout, "Result: 1\n");
    assert!(!s.terminated && !s.truncated);
    // A wrong answer earns nothing: the task checks only the answer (an exit-code component next
    // to it would pay a program that does nothing, which `codegym audit` flags).
    assert_eq!(s.reward, 0.0, "{s:?}");
    assert_eq!(s.info["solved"], json!(false));

    let s = step(env.as_mut(), Value::Text(SOLUTION.into()));
    assert_eq!(exec(&s.obs).stdout, "Result: 338350\n");
    assert!(s.terminated && !s.truncated);
    assert_eq!(s.reward, 1.0);
    assert_eq!(s.info["solved"], json!(true));
    assert_eq!(
        s.info["reward_breakdown"]["components"][0]["type"],
        json!("contains")
    );
    assert!(matches!(
        env.step(Value::Text(SOLUTION.into())),
        Err(EnvError::EpisodeEnded)
    ));
}

#[test]
fn truncates_at_max_episode_steps() {
    let reg = registry();
    let mut env = make(&reg, json!({"max_episode_steps": 2}));
    env.reset(None, &opts(json!({"task_id": "hello-world"})))
        .expect("reset");
    let s = step(env.as_mut(), Value::Text("print('hello')".into()));
    assert!(!s.terminated && !s.truncated);
    let s = step(env.as_mut(), Value::Text("print('hello')".into()));
    assert!(!s.terminated && s.truncated);
    assert!(matches!(
        env.step(Value::Text("print(1)".into())),
        Err(EnvError::EpisodeEnded)
    ));
    // The default comes from the spec (4 turns).
    assert_eq!(
        reg.reg.spec(PYTHON_ENV_ID).expect("spec").max_episode_steps,
        Some(4)
    );
}

#[test]
fn session_mode_keeps_state_and_scores_in_fresh_processes() {
    let reg = registry();
    let mut env = make(&reg, json!({"mode": "session"}));
    let task = json!({"id": "inline-42", "prompt": "print 42",
        "reward": {"version": 1, "components": [{"type": "exit_code"}, {"type": "stdout", "expected": "42"}]}});
    let (obs, _) = env
        .reset(None, &opts(json!({"task": task})))
        .expect("reset");
    assert_eq!(obs, Value::Text("print 42".into()));

    let s = step(env.as_mut(), Value::Text("import math\nx = 41".into()));
    assert_eq!(exec(&s.obs).exit_code, Some(0));
    assert!(!s.terminated);
    // A failing cell does not become part of the scored program.
    let s = step(env.as_mut(), Value::Text("raise ValueError('oops')".into()));
    assert!(exec(&s.obs).stderr.contains("ValueError: oops"));
    let s = step(env.as_mut(), Value::Text("print(x + 1)".into()));
    assert_eq!(exec(&s.obs).stdout, "42\n");
    assert!(s.terminated, "{:?}", s.info);
    assert_eq!(s.reward, 1.0);
}

#[test]
fn session_file_tools() {
    let reg = registry();
    let mut env = make(&reg, json!({"mode": "session", "max_episode_steps": 10}));
    env.reset(None, &opts(json!({"task_id": "hello-world"})))
        .expect("reset");
    let w = step(
        env.as_mut(),
        Value::Json(json!({"tool": "write_file", "path": "data/in.txt", "content": "hello"})),
    );
    assert_eq!(w.obs, Value::Text("wrote data/in.txt".into()));
    let s = step(
        env.as_mut(),
        Value::Json(json!({"tool": "run_python",
        "code": "print(open('data/in.txt').read().upper())\nopen('out.txt', 'w').write('from python')"})),
    );
    assert_eq!(exec(&s.obs).stdout, "HELLO\n", "{:?}", exec(&s.obs).stderr);
    let r = step(
        env.as_mut(),
        Value::Json(json!({"tool": "read_file", "path": "out.txt"})),
    );
    assert_eq!(r.obs, Value::Text("from python".into()));
    let s = step(
        env.as_mut(),
        Value::Json(json!({"tool": "run_python",
        "code": "import os\nos.symlink('/etc/hostname', 'link')"})),
    );
    assert_eq!(exec(&s.obs).exit_code, Some(0), "{:?}", exec(&s.obs).stderr);
    for path in ["link", "../x", "/etc/passwd"] {
        let r = step(
            env.as_mut(),
            Value::Json(json!({"tool": "read_file", "path": path})),
        );
        assert!(
            matches!(&r.obs, Value::Text(t) if t.starts_with("error:")),
            "{path}: {:?}",
            r.obs
        );
    }
    let w = step(
        env.as_mut(),
        Value::Json(json!({"tool": "write_file", "path": "link", "content": "x"})),
    );
    assert!(matches!(&w.obs, Value::Text(t) if t.starts_with("error:")));
}

#[test]
fn errors_are_typed() {
    let reg = registry();
    assert!(matches!(
        reg.make(PYTHON_ENV_ID, &kwargs(json!({"mode": "notebook"}))),
        Err(EnvError::InvalidKwargs(_))
    ));
    assert!(matches!(
        reg.make(PYTHON_ENV_ID, &kwargs(json!({"bogus": 1}))),
        Err(EnvError::InvalidKwargs(_))
    ));
    assert!(matches!(
        reg.make(
            PYTHON_ENV_ID,
            &kwargs(json!({"tasks": "/nonexistent.jsonl"}))
        ),
        Err(EnvError::InvalidKwargs(_))
    ));
    let mut env = make(&reg, json!({}));
    assert!(matches!(
        env.step(Value::Text("print(1)".into())),
        Err(EnvError::ResetNeeded)
    ));
    assert!(matches!(
        env.reset(None, &opts(json!({"task_id": "nope"}))),
        Err(EnvError::InvalidOptions(_))
    ));
    assert!(matches!(
        env.reset(None, &opts(json!({"colour": "red"}))),
        Err(EnvError::InvalidOptions(_))
    ));
    assert!(matches!(
        env.reset(None, &opts(json!({"task": {"id": 1}}))),
        Err(EnvError::InvalidOptions(_))
    ));
    env.reset(None, &opts(json!({"task_id": "hello-world"})))
        .expect("reset");
    assert!(matches!(
        env.step(Value::Discrete(1)),
        Err(EnvError::InvalidAction(_))
    ));
    assert!(matches!(
        env.step(Value::Json(json!({"tool": "format_disk"}))),
        Err(EnvError::InvalidAction(_))
    ));
    assert!(matches!(
        env.step(Value::Json(json!({"tool": "read_file", "path": "x"}))),
        Err(EnvError::InvalidAction(_))
    ));
    env.close().expect("close");
    assert!(env.reset(None, &Options::new()).is_err());
}

#[test]
fn seeded_sampling_and_fenced_extraction() {
    let reg = registry();
    let mut env = make(&reg, json!({"extract": "fenced"}));
    let ids: Vec<String> = (0..2)
        .map(|_| {
            let (_, info) = env.reset(Some(42), &Options::new()).expect("reset");
            info["task_id"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    assert_eq!(ids[0], ids[1]);
    let draws: std::collections::BTreeSet<String> = (0..40u64)
        .map(|seed| {
            let (_, info) = env.reset(Some(seed), &Options::new()).expect("reset");
            info["task_id"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    assert!(draws.len() > 3, "{draws:?}");

    env.reset(None, &opts(json!({"task_id": "hello-world"})))
        .expect("reset");
    let s = step(env.as_mut(), Value::Text("print('Hello, world!')".into()));
    assert!(exec(&s.obs).stderr.contains("no ```python code block"));
    assert_eq!(s.reward, 0.0);
    let s = step(
        env.as_mut(),
        Value::Text("```python\nprint('Hello, world!')\n```".into()),
    );
    assert!(s.terminated);
}

#[test]
fn batch_evaluator_scores_a_mixed_batch() {
    let reg = registry();
    let item = |task: &str, code: &str| EvalItem {
        seed: None,
        options: opts(json!({"task_id": task})),
        action: Value::Text(code.into()),
    };
    let items = vec![
        item("sum-of-squares", SOLUTION),
        item("is-prime", "def is_prime(n):\n    return n == 2\n"),
        item("no-such-task", "print(1)"),
        item("fibonacci", "def fib(n:\n"),
        EvalItem {
            seed: None,
            options: opts(json!({"task_id": "hello-world"})),
            action: Value::Discrete(3),
        },
    ];
    let out = reg.evaluate(Kwargs::new(), items).expect("batch");
    assert_eq!(out.len(), 5);
    let ok = |i: usize| out[i].as_ref().unwrap_or_else(|e| panic!("item {i}: {e}"));
    assert!(ok(0).terminated && ok(0).reward == 1.0);
    assert!(
        !ok(1).terminated && ok(1).reward > 0.0 && ok(1).reward < 1.0,
        "{:?}",
        ok(1).info
    );
    assert!(matches!(out[2], Err(EnvError::InvalidOptions(_))));
    assert_eq!(ok(3).reward, 0.0);
    assert!(matches!(out[4], Err(EnvError::InvalidAction(_))));
    assert!(matches!(
        reg.evaluate(kwargs(json!({"mode": 3})), vec![]),
        Err(EnvError::InvalidKwargs(_))
    ));
}

/// The env is natively asynchronous: it needs no thread of its own, even on a current-thread
/// runtime, in both modes, with steps of several envs interleaved on that one thread.
#[tokio::test]
async fn runs_on_a_current_thread_runtime_with_interleaved_steps() {
    let mut reg = Registry::new();
    register(&mut reg, CodingConfig::default()).unwrap_or_else(|e| panic!("register: {e}"));
    let hello = || Value::Text("print('Hello, world!')".into());
    let mut envs = Vec::new();
    for mode in ["session", "script"] {
        let mut env = reg
            .make_async(PYTHON_ENV_ID, &kwargs(json!({"mode": mode})))
            .await
            .unwrap_or_else(|e| panic!("make: {e}"));
        env.reset(None, opts(json!({"task_id": "hello-world"})))
            .await
            .unwrap_or_else(|e| panic!("reset: {e}"));
        envs.push(env);
    }
    let (a, b) = envs.split_at_mut(1);
    let (sa, sb) = tokio::join!(a[0].step(hello()), b[0].step(hello()));
    for s in [sa, sb] {
        assert!(s.unwrap_or_else(|e| panic!("step: {e}")).terminated);
    }
}

/// `make` comes from remote clients: the `tasks` kwarg may only name files in `task_dirs`, however
/// the path is spelled, and the refusal does not reveal whether the file exists.
#[test]
fn task_files_outside_the_allowed_dirs_are_refused() {
    let allowed = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks/fixtures/mbpp_mini.jsonl");
    let inside = allowed.path().join("mbpp.jsonl");
    std::fs::copy(&fixture, &inside).expect("copy");
    let elsewhere = outside.path().join("mbpp.jsonl");
    std::fs::copy(&fixture, &elsewhere).expect("copy");
    let link = allowed.path().join("link.jsonl");
    std::os::unix::fs::symlink(&elsewhere, &link).expect("symlink");

    let reg = registry_with(CodingConfig {
        task_dirs: vec![allowed.path().to_path_buf()],
        ..CodingConfig::default()
    });
    let tasks = |p: &std::path::Path| kwargs(json!({"tasks": p.display().to_string()}));

    let mut env = reg
        .make(PYTHON_ENV_ID, &tasks(&inside))
        .unwrap_or_else(|e| panic!("a file in an allowed dir: {e}"));
    let (obs, _) = env.reset(Some(0), &opts(json!({}))).expect("reset");
    assert!(matches!(obs, Value::Text(_)));

    let dotdot = allowed
        .path()
        .join("..")
        .join(outside.path().file_name().expect("name"))
        .join("mbpp.jsonl");
    for refused in [
        elsewhere.clone(),
        link,
        dotdot,
        "/etc/passwd".into(),
        "/nonexistent.jsonl".into(),
    ] {
        match reg.make(PYTHON_ENV_ID, &tasks(&refused)) {
            Err(EnvError::InvalidKwargs(m)) => {
                assert!(m.contains("task directory"), "{refused:?}: {m}")
            }
            Err(e) => panic!("{refused:?}: {e}"),
            Ok(_) => panic!("{refused:?} was loaded"),
        }
    }
    // Built-in sets need no directory.
    reg.make(PYTHON_ENV_ID, &kwargs(json!({"tasks": "builtin:examples"})))
        .unwrap_or_else(|e| panic!("builtin: {e}"));
}

/// A tool call sent as text (its JSON, as clients that serialize actions themselves send it) is the
/// call, not Python source: run as source it would be a dict literal that does nothing. A text that
/// names a tool but does not fit it is a clear error, not a silent zero.
#[test]
fn the_json_text_of_a_tool_call_is_the_call() {
    use env_core::contract::{self, info};
    let reg = registry();
    let mut env = make(&reg, json!({}));
    env.reset(None, &opts(json!({"task_id": "sum-of-squares"})))
        .expect("reset");
    let call = contract::run_python("print(f'Result: {sum(i * i for i in range(1, 101))}')");
    let s = step(env.as_mut(), Value::Text(format!("  {call}\n")));
    assert_eq!(s.reward, 1.0, "{s:?}");
    assert_eq!(s.info[info::SOLVED], json!(true));

    let mut env = make(&reg, json!({}));
    env.reset(None, &opts(json!({"task_id": "sum-of-squares"})))
        .expect("reset");
    let bad = env.step(Value::Text(
        r#"{"tool": "run_python", "source": "x"}"#.into(),
    ));
    assert!(
        matches!(&bad, Err(EnvError::InvalidAction(m)) if m.contains("bad tool call")),
        "{bad:?}"
    );
}
