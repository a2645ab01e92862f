//! `codegym/Repo-v0` through the registry, on the shipped repository set: two episodes at once of
//! the same task (prepared once), one fixing the bug with the file tools and submitting (reward 1),
//! the other submitting what it broke (reward 0); neither sees the other's changes. Task files
//! outside `task_dirs` are refused.

use env_coding::repo::REPO_ENV_ID;
use env_coding::{CodingConfig, register};
use env_core::{AsyncEnv, Kwargs, Registry, Value};
use serde_json::json;

#[path = "support/repo.rs"]
mod repo_support;

use repo_support::dir;

fn registry() -> Registry {
    let mut reg = Registry::new();
    let config = CodingConfig {
        task_dirs: vec![dir()],
        ..repo_support::config(2_600_000, 0)
    };
    register(&mut reg, config).unwrap_or_else(|e| panic!("register: {e}"));
    reg
}

fn kwargs(v: serde_json::Value) -> Kwargs {
    v.as_object().cloned().unwrap_or_default()
}

async fn step(env: &mut Box<dyn AsyncEnv>, call: serde_json::Value) -> (String, f64, bool, Kwargs) {
    let s = env.step(Value::Json(call)).await.expect("step");
    let Value::Text(obs) = s.obs else {
        panic!("text observation")
    };
    (obs, s.reward, s.terminated, s.info)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_fixes_the_bug_with_the_tools_and_submits() {
    let reg = registry();
    let tasks = kwargs(json!({"tasks": dir().join("tasks.jsonl").display().to_string()}));
    let mut fixer = reg.make_async(REPO_ENV_ID, &tasks).await.expect("make");
    let mut breaker = reg.make_async(REPO_ENV_ID, &tasks).await.expect("make");
    let options = kwargs(json!({"task_id": "inflection/ordinal-teens"}));
    let ((obs, info), (_, _)) = tokio::try_join!(
        fixer.reset(None, options.clone()),
        breaker.reset(None, options)
    )
    .expect("reset");
    assert!(
        matches!(&obs, Value::Text(t) if t.contains("ordinalize(111)")),
        "{obs:?}"
    );
    assert_eq!(info["task_id"], "inflection/ordinal-teens");

    let (view, reward, done, _) = step(
        &mut fixer,
        json!({"tool": "view", "path": "inflection/__init__.py", "start": 224, "end": 227}),
    )
    .await;
    assert!(
        view.contains("   226\t    if number in (11, 12, 13):"),
        "{view}"
    );
    assert_eq!((reward, done), (0.0, false));
    let (out, _, _, _) = step(
        &mut fixer,
        json!({"tool": "str_replace", "path": "inflection/__init__.py", "old": "return", "new": "x"}),
    )
    .await;
    assert!(
        out.contains("occurs") && out.contains("exactly once"),
        "{out}"
    );
    let (out, _, _, _) = step(
        &mut fixer,
        json!({"tool": "str_replace", "path": "inflection/__init__.py",
               "old": "if number in (11, 12, 13):", "new": "if number % 100 in (11, 12, 13):"}),
    )
    .await;
    assert!(out.contains("replaced one occurrence"), "{out}");
    let (out, _, _, _) = step(
        &mut fixer,
        json!({"tool": "create", "path": "notes/why.txt", "content": "teens\n"}),
    )
    .await;
    assert!(out.contains("created"), "{out}");

    // The other episode breaks the module; the fixer's copy is not affected.
    let (_, _, _, _) = step(
        &mut breaker,
        json!({"tool": "bash", "command": "echo 'raise SystemExit' > inflection/__init__.py"}),
    )
    .await;
    let (out, _, _, _) = step(
        &mut fixer,
        json!({"tool": "bash", "command": "python3 -c 'import inflection; print(inflection.ordinalize(111))'; cat notes/why.txt"}),
    )
    .await;
    assert!(out.starts_with("111th\nteens\n"), "{out}");

    let (obs, reward, done, info) = step(&mut fixer, json!({"tool": "submit"})).await;
    assert_eq!((reward, done), (1.0, true), "{obs} {info:?}");
    assert_eq!(info["solved"], true);
    assert!(
        info["patch"]
            .as_str()
            .unwrap_or("")
            .contains("notes/why.txt")
    );
    assert_eq!(
        info["verdict"]["fail_to_pass"]["test_hidden_ordinal.py::test_ordinal_of_teens_above_one_hundred"],
        "passed"
    );
    let (obs, reward, done, info) = step(&mut breaker, json!({"tool": "submit"})).await;
    assert_eq!((reward, done), (0.0, true), "{obs}");
    assert_eq!(info["solved"], false);
    assert!(obs.contains("not resolved"), "{obs}");
    // An ended episode takes no more steps.
    assert!(
        fixer
            .step(Value::Json(json!({"tool": "submit"})))
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_files_outside_the_allowed_dirs_are_refused() {
    let reg = registry();
    let outside = tempfile::tempdir().expect("tmp");
    let file = outside.path().join("tasks.jsonl");
    std::fs::write(&file, "{}\n").expect("write");
    let err = reg
        .make_async(
            REPO_ENV_ID,
            &kwargs(json!({"tasks": file.display().to_string()})),
        )
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("task_dirs"), "{err}");
    let err = reg
        .make_async(REPO_ENV_ID, &Kwargs::new())
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("repository task file"), "{err}");
}
