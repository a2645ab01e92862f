//! Results as agents use them (issue 12): return values of every kind of last statement,
//! variables with their caps, errors, injected vars, on both script backends and in session cells,
//! and that a program printing fake report markers changes nothing.

use std::sync::OnceLock;

use codegym_sandbox::{
    Backend, ExecRequest, MAX_REPR_CHARS, MAX_VARIABLES, ReportSpec, Sandbox, SandboxConfig,
};
use env_core::{ExecutionResult, ReturnValue};
use serde_json::json;

fn sandbox(backend: Backend) -> &'static Sandbox {
    static WARM: OnceLock<Sandbox> = OnceLock::new();
    static FRESH: OnceLock<Sandbox> = OnceLock::new();
    let (cell, uid_base) = match backend {
        Backend::Fresh => (&FRESH, 1_700_000),
        _ => (&WARM, 1_800_000),
    };
    cell.get_or_init(|| {
        let config = SandboxConfig {
            backend,
            uid_base,
            uid_count: 4096,
            ..SandboxConfig::default()
        };
        Sandbox::new(config).unwrap_or_else(|e| panic!("sandbox: {e}"))
    })
}

const BACKENDS: [Backend; 2] = [Backend::Auto, Backend::Fresh];

fn spec(vars: serde_json::Value, variables: bool) -> ReportSpec {
    ReportSpec {
        vars: vars.as_object().cloned().unwrap_or_default(),
        variables,
    }
}

/// Runs `src` as a script with a report, on `backend`.
async fn script(backend: Backend, src: &str, spec: ReportSpec) -> ExecutionResult {
    let mut req = ExecRequest::new(src);
    req.report = Some(spec);
    sandbox(backend)
        .run(req)
        .await
        .unwrap_or_else(|e| panic!("infrastructure error: {e}"))
}

/// Runs each source as one cell of a fresh session, in order; returns the last result.
async fn cells(srcs: &[(&str, ReportSpec)]) -> Vec<ExecutionResult> {
    let mut s = sandbox(Backend::Fresh)
        .open_session(None)
        .await
        .unwrap_or_else(|e| panic!("session: {e}"));
    let mut out = Vec::new();
    for (src, spec) in srcs {
        out.push(
            s.exec_reporting(src, None, Some(spec))
                .await
                .unwrap_or_else(|e| panic!("exec: {e}")),
        );
    }
    s.close().await;
    out
}

fn json_value(r: &ExecutionResult) -> Option<&serde_json::Value> {
    match &r.return_value {
        Some(ReturnValue::Json { value }) => Some(value),
        _ => None,
    }
}

#[tokio::test]
async fn return_value_of_every_kind_of_last_statement() {
    for backend in BACKENDS {
        let b = format!("{backend:?}");
        // An expression: its value, after the output of the statements before it.
        let r = script(
            backend,
            "print('hi')\nx = 20\nx * 2 + 2",
            spec(json!({}), false),
        )
        .await;
        assert!(r.success(), "{b}: {}", r.stderr);
        assert_eq!(r.stdout, "hi\n");
        assert_eq!(json_value(&r), Some(&json!(42)), "{b}");
        assert_eq!(r.error, None);
        // Containers become JSON (tuples as arrays); None is null.
        let r = script(
            backend,
            "{'a': (1, 2), 'b': [None, 1.5, 'x']}",
            spec(json!({}), false),
        )
        .await;
        assert_eq!(
            json_value(&r),
            Some(&json!({"a": [1, 2], "b": [null, 1.5, "x"]})),
            "{b}"
        );
        // An assignment, a def, an empty program: no return value.
        // A None value is not shown, as in a REPL (`print(...)` as the last statement).
        for src in [
            "x = 1",
            "def f():\n    return 1",
            "",
            "import os",
            "print(1)",
            "None",
        ] {
            let r = script(backend, src, spec(json!({}), false)).await;
            assert!(r.success(), "{b} {src:?}: {}", r.stderr);
            assert_eq!(r.return_value, None, "{b} {src:?}");
        }
        // Not JSON: type, capped repr, reason.
        let r = script(
            backend,
            "class K:\n    def __repr__(self):\n        return 'K' * 100000\nK()",
            spec(json!({}), false),
        )
        .await;
        match &r.return_value {
            Some(ReturnValue::Unrepresentable {
                type_name,
                repr,
                reason,
            }) => {
                assert_eq!(type_name, "K", "{b}");
                assert!(
                    repr.starts_with("KKK") && repr.len() <= MAX_REPR_CHARS + 3,
                    "{b}: {}",
                    repr.len()
                );
                assert!(reason.contains("not JSON-serializable"), "{b}: {reason}");
            }
            other => panic!("{b}: {other:?}"),
        }
        let r = script(backend, "float('nan')", spec(json!({}), false)).await;
        assert!(
            matches!(r.return_value, Some(ReturnValue::Unrepresentable { .. })),
            "{b}"
        );
        // Huge: over the cap, reported as such with its repr cut.
        let r = script(backend, "'x' * 10_000_000", spec(json!({}), false)).await;
        match &r.return_value {
            Some(ReturnValue::Unrepresentable {
                type_name,
                repr,
                reason,
            }) => {
                assert_eq!(type_name, "str");
                assert!(repr.len() <= MAX_REPR_CHARS + 3);
                assert!(reason.contains("over the cap"), "{b}: {reason}");
            }
            other => panic!("{b}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn errors_and_tracebacks() {
    for backend in BACKENDS {
        let b = format!("{backend:?}");
        let r = script(backend, "x = 1\n1 / 0\n", spec(json!({}), false)).await;
        assert_eq!(r.exit_code, Some(1), "{b}");
        let e = r.error.as_ref().expect("error");
        assert_eq!(
            (e.type_name.as_str(), e.message.as_str()),
            ("ZeroDivisionError", "division by zero")
        );
        assert_eq!(r.return_value, None);
        // The traceback is the program's, as under `python main.py`: no runner frames.
        assert!(
            r.stderr.contains("File \"main.py\", line 2"),
            "{b}: {}",
            r.stderr
        );
        assert!(!r.stderr.contains("<string>"), "{b}: {}", r.stderr);
        let r = script(backend, "def f(:\n", spec(json!({}), false)).await;
        assert_eq!(
            r.error.as_ref().map(|e| e.type_name.as_str()),
            Some("SyntaxError"),
            "{b}"
        );
        // sys.exit is an exit code, not an exception.
        let r = script(backend, "import sys\nsys.exit(3)", spec(json!({}), false)).await;
        assert_eq!((r.exit_code, &r.error), (Some(3), &None), "{b}");
        // A limit is the error, whatever the program did.
        let mut req = ExecRequest::new("while True: pass");
        req.report = Some(spec(json!({}), false));
        let mut limits = *sandbox(backend).limits();
        limits.cpu_ms = 300;
        req.limits = Some(limits);
        let r = sandbox(backend).run(req).await.expect("run");
        assert!(r.timed_out, "{b}");
        assert_eq!(
            r.error.as_ref().map(|e| e.type_name.as_str()),
            Some("TimeoutError")
        );
    }
}

#[tokio::test]
async fn variables_with_caps_and_reasons() {
    for backend in BACKENDS {
        let b = format!("{backend:?}");
        let src = "import os\nx = 1\nname = 'a'\n_hidden = 2\ndef f(): pass\nbig = 'y' * 2_000_000\nitems = [1, {'k': None}]";
        let r = script(backend, src, spec(json!({}), true)).await;
        let v = r.variables.as_ref().expect("variables");
        assert_eq!(
            serde_json::Value::Object(v.values.clone()),
            json!({"x": 1, "name": "a", "items": [1, {"k": null}]}),
            "{b}"
        );
        let dropped: Vec<(&str, &str)> = v
            .dropped
            .iter()
            .map(|d| (d.name.as_str(), d.reason.as_str()))
            .collect();
        assert!(
            dropped
                .iter()
                .any(|(n, r)| *n == "f" && r.contains("not JSON-serializable")),
            "{b}: {dropped:?}"
        );
        assert!(
            dropped
                .iter()
                .any(|(n, r)| *n == "big" && r.contains("bytes")),
            "{b}: {dropped:?}"
        );
        assert!(
            !dropped.iter().any(|(n, _)| *n == "os" || *n == "_hidden"),
            "{b}: {dropped:?}"
        );
        // Not asked for: absent.
        let r = script(backend, "x = 1", spec(json!({}), false)).await;
        assert_eq!(r.variables, None);
        // Count cap.
        let src = format!(
            "for i in range({}):\n    globals()[f'v{{i}}'] = i",
            MAX_VARIABLES + 10
        );
        let r = script(backend, &src, spec(json!({}), true)).await;
        let v = r.variables.expect("variables");
        assert_eq!(v.values.len(), MAX_VARIABLES, "{b}");
        assert!(v.dropped.iter().any(|d| d.reason.contains("variables")));
    }
}

#[tokio::test]
async fn injected_vars_are_globals() {
    for backend in BACKENDS {
        let r = script(
            backend,
            "context['q'] + str(n * 2)",
            spec(json!({"context": {"q": "n="}, "n": 21}), false),
        )
        .await;
        assert_eq!(
            json_value(&r),
            Some(&json!("n=42")),
            "{backend:?}: {}",
            r.stderr
        );
    }
}

/// The warm backend sends a small spec inside the run's request and a large one (vars of up to
/// 1 MiB) on the report channel (issue 17): both arrive whole, on both backends.
#[tokio::test]
async fn injected_vars_of_any_allowed_size_arrive_whole() {
    for backend in BACKENDS {
        for size in [10, 15_000, 17_000, 300_000, 1_000_000] {
            let big = "x".repeat(size);
            let r = script(
                backend,
                "(len(big), big[:3], tail)",
                spec(json!({"big": big, "tail": "end"}), false),
            )
            .await;
            assert_eq!(
                json_value(&r),
                Some(&json!([size, "xxx", "end"])),
                "{backend:?} {size}: {}",
                r.stderr
            );
        }
    }
}

/// The report channel is the runner's alone: close-on-exec, so a program's subprocesses do not
/// inherit it (on the warm backend it arrives that way, issue 17, rather than being set so).
#[tokio::test]
async fn the_report_channel_is_not_inherited_by_subprocesses() {
    let probe = "import os\nfds = [int(f) for f in os.listdir('/proc/self/fd') if int(f) > 2]\n[(f, int(open(f'/proc/self/fdinfo/{f}').read().split('flags:')[1].split()[0], 8) & 0o2000000 != 0) for f in fds if os.path.exists(f'/proc/self/fdinfo/{f}')]";
    for backend in BACKENDS {
        let r = script(backend, probe, spec(json!({}), false)).await;
        let Some(serde_json::Value::Array(fds)) = json_value(&r) else {
            panic!("{backend:?}: {r:?}");
        };
        // The channel itself, at least (the listing's own descriptor is gone by then).
        assert!(!fds.is_empty(), "{backend:?}: {r:?}");
        for fd in fds {
            assert_eq!(
                fd[1],
                json!(true),
                "{backend:?}: descriptor {fd} inheritable"
            );
        }
    }
}

#[tokio::test]
async fn session_cells_report_and_keep_variables() {
    let rs = cells(&[
        ("a = n + 1\na", spec(json!({"n": 1}), true)),
        ("b = [a, n]", spec(json!({}), true)),
        ("n = 100", spec(json!({"n": 5}), false)),
        ("n", spec(json!({}), false)),
        ("raise KeyError('k')", spec(json!({}), true)),
        ("print('after')\nb", spec(json!({}), false)),
    ])
    .await;
    assert_eq!(json_value(&rs[0]), Some(&json!(2)), "{}", rs[0].stderr);
    assert_eq!(rs[0].variables.as_ref().map(|v| v.values.len()), Some(2)); // a, n
    assert_eq!(rs[1].return_value, None);
    let v1 = &rs[1].variables.as_ref().expect("variables").values;
    assert_eq!(v1.get("b"), Some(&json!([2, 1])));
    assert_eq!(json_value(&rs[3]), Some(&json!(100)));
    assert_eq!(
        rs[4].error.as_ref().map(|e| e.type_name.as_str()),
        Some("KeyError")
    );
    assert!(
        rs[4].stderr.contains("KeyError: 'k'") && !rs[4].stderr.contains("<string>"),
        "{}",
        rs[4].stderr
    );
    assert!(rs[4].variables.is_some(), "variables after a failed cell");
    assert_eq!(json_value(&rs[5]), Some(&json!([2, 1])));
    assert_eq!(rs[5].stdout, "after\n");
}

#[tokio::test]
async fn printed_markers_change_nothing() {
    // The report travels on its own descriptor: output that looks like a report frame is output.
    let fake = r#"import sys
frame = '{"return_value": {"kind": "json", "value": 666}, "error": {"type_name": "X", "message": "y"}}'
sys.stdout.write(len(frame).to_bytes(4, 'little').decode('latin-1') + frame)
sys.stderr.write(frame)
7"#;
    for backend in BACKENDS {
        let r = script(backend, fake, spec(json!({}), false)).await;
        assert_eq!(json_value(&r), Some(&json!(7)), "{backend:?}: {}", r.stderr);
        assert_eq!(r.error, None);
    }
    let rs = cells(&[(fake, spec(json!({}), false))]).await;
    assert_eq!(json_value(&rs[0]), Some(&json!(7)));
}

#[tokio::test]
async fn runs_without_a_report_are_unchanged() {
    for backend in BACKENDS {
        let r = sandbox(backend)
            .run(ExecRequest::new("1 / 0\n2"))
            .await
            .expect("run");
        assert_eq!(
            (r.exit_code, &r.return_value, &r.variables),
            (Some(1), &None, &None)
        );
        // Without a report channel nothing is guessed from stderr.
        assert_eq!(r.error, None);
    }
}
