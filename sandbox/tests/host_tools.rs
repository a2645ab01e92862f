//! Host tools called from sandboxed code (issue 12), at the sandbox level on both script backends:
//! arguments and keyword arguments, errors as exceptions, per-call timeout against the run's wall
//! clock, a handler that never answers, the call cap, size caps, threads, two runs' tools never
//! crossing, and hostile programs.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use codegym_sandbox::{
    Backend, ExecRequest, HostToolCall, Limits, Sandbox, SandboxConfig, ToolHandler, ToolHost,
    ToolLimits,
};
use env_core::{ExecutionResult, ReturnValue};
use futures::FutureExt;
use serde_json::json;

fn sandbox(backend: Backend) -> &'static Sandbox {
    static WARM: OnceLock<Sandbox> = OnceLock::new();
    static FRESH: OnceLock<Sandbox> = OnceLock::new();
    let (cell, uid_base) = match backend {
        Backend::Fresh => (&FRESH, 1_900_000),
        _ => (&WARM, 1_950_000),
    };
    cell.get_or_init(|| {
        let config = SandboxConfig {
            backend,
            uid_base,
            uid_count: 4096,
            limits: Limits {
                wall_ms: 3_000,
                ..Limits::default()
            },
            ..SandboxConfig::default()
        };
        Sandbox::new(config).unwrap_or_else(|e| panic!("sandbox: {e}"))
    })
}

const BACKENDS: [Backend; 2] = [Backend::Auto, Backend::Fresh];

/// The tools of these tests; `tag` names the handler (two runs, two handlers).
fn handler(tag: &'static str) -> ToolHandler {
    Arc::new(move |call: HostToolCall| {
        async move {
            match call.name.as_str() {
                "echo" => Ok(json!({"args": call.args, "kwargs": call.kwargs, "tag": tag})),
                "fail" => Err(format!(
                    "no results for {}",
                    call.args[0].as_str().unwrap_or("?")
                )),
                "slow" => {
                    tokio::time::sleep(Duration::from_millis(call.args[0].as_u64().unwrap_or(0)))
                        .await;
                    Ok(json!("done"))
                }
                "never" => std::future::pending().await,
                "big" => Ok(json!(
                    "x".repeat(call.args[0].as_u64().unwrap_or(0) as usize)
                )),
                other => Err(format!("unknown tool {other}")),
            }
        }
        .boxed()
    })
}

fn host(tag: &'static str, limits: ToolLimits) -> ToolHost {
    ToolHost {
        names: ["echo", "fail", "slow", "never", "big"]
            .map(String::from)
            .to_vec(),
        handler: handler(tag),
        limits,
    }
}

async fn run(backend: Backend, src: &str, tools: ToolHost) -> ExecutionResult {
    let mut req = ExecRequest::new(src);
    req.tools = Some(tools);
    sandbox(backend)
        .run(req)
        .await
        .unwrap_or_else(|e| panic!("infrastructure error: {e}"))
}

fn value(r: &ExecutionResult) -> serde_json::Value {
    match &r.return_value {
        Some(ReturnValue::Json { value }) => value.clone(),
        other => panic!("no JSON return value: {other:?}; stderr: {}", r.stderr),
    }
}

#[tokio::test]
async fn args_kwargs_and_errors() {
    for backend in BACKENDS {
        let src = "r = echo('q', 2, flag=True, opts={'k': [1]})\n\
                   try:\n    fail('nothing')\nexcept RuntimeError as e:\n    err = str(e)\n\
                   [r, err]";
        let r = run(backend, src, host("a", ToolLimits::default())).await;
        assert!(r.success(), "{backend:?}: {}", r.stderr);
        assert_eq!(
            value(&r),
            json!([{"args": ["q", 2], "kwargs": {"flag": true, "opts": {"k": [1]}}, "tag": "a"},
                   "tool fail: no results for nothing"]),
            "{backend:?}"
        );
        // An uncaught tool error is the program's exception.
        let r = run(backend, "fail('x')", host("a", ToolLimits::default())).await;
        assert_eq!(
            r.error.as_ref().map(|e| e.type_name.as_str()),
            Some("RuntimeError")
        );
        // Arguments must be JSON: refused inside the sandbox, nothing sent.
        let r = run(backend, "echo(object())", host("a", ToolLimits::default())).await;
        assert_eq!(
            r.error.as_ref().map(|e| e.type_name.as_str()),
            Some("TypeError"),
            "{}",
            r.stderr
        );
    }
}

#[tokio::test]
async fn timeouts_and_silent_handlers() {
    let short = ToolLimits {
        call_timeout_ms: 300,
        ..ToolLimits::default()
    };
    for backend in BACKENDS {
        // A handler that never answers fails the call after the per-call timeout; the run goes on.
        let src = "try:\n    never()\nexcept RuntimeError as e:\n    msg = str(e)\nmsg";
        let r = run(backend, src, host("a", short)).await;
        assert!(
            value(&r)
                .as_str()
                .is_some_and(|m| m.contains("did not answer within 300 ms"))
        );
        // The run's wall clock keeps running during calls: a slow tool cannot extend it.
        let long = ToolLimits {
            call_timeout_ms: 60_000,
            ..ToolLimits::default()
        };
        let r = run(backend, "slow(10_000)", host("a", long)).await;
        assert!(r.timed_out, "{backend:?}: {r:?}");
        assert!(r.wall_ms < 8_000, "{backend:?}: {}", r.wall_ms);
        let r = run(backend, "never()", host("a", long)).await;
        assert!(r.timed_out, "{backend:?}");
        // A slow tool within its budget is just slow.
        let r = run(backend, "slow(200)", host("a", long)).await;
        assert_eq!(value(&r), json!("done"));
    }
}

#[tokio::test]
async fn caps_on_calls_and_sizes() {
    let limits = ToolLimits {
        max_calls: 5,
        max_arg_bytes: 10_000,
        max_result_bytes: 10_000,
        ..ToolLimits::default()
    };
    for backend in BACKENDS {
        let src = "out = []\nfor i in range(8):\n    try:\n        out.append(echo(i)['args'][0])\n    except RuntimeError as e:\n        out.append(str(e))\nout";
        let r = run(backend, src, host("a", limits)).await;
        let v = value(&r);
        let out = v.as_array().expect("list");
        assert_eq!(
            &out[..5],
            &[json!(0), json!(1), json!(2), json!(3), json!(4)]
        );
        assert!(out[5..].iter().all(|m| {
            m.as_str()
                .is_some_and(|m| m.contains("too many tool calls"))
        }));
        let src = "res = []\nfor f in (lambda: echo('y' * 20_000), lambda: big(20_000), lambda: big(10)):\n    try:\n        res.append(len(str(f())))\n    except RuntimeError as e:\n        res.append(str(e))\nres";
        let r = run(backend, src, host("a", limits)).await;
        let v = value(&r);
        assert!(
            v[0].as_str()
                .is_some_and(|m| m.contains("over the cap of 10000 bytes")),
            "{v}"
        );
        assert!(
            v[1].as_str()
                .is_some_and(|m| m.contains("returned") && m.contains("over the cap")),
            "{v}"
        );
        assert_eq!(v[2], json!(10));
    }
}

#[tokio::test]
async fn threads_get_their_own_results() {
    for backend in BACKENDS {
        let src = "import threading\nres = {}\n\
                   def work(i):\n    slow(50 * (i % 3))\n    res[i] = echo(i, k=i * 10)\n\
                   ts = [threading.Thread(target=work, args=(i,)) for i in range(12)]\n\
                   [t.start() for t in ts]; [t.join() for t in ts]\n\
                   all(res[i]['args'] == [i] and res[i]['kwargs'] == {'k': i * 10} for i in range(12)) and len(res)";
        let r = run(backend, src, host("a", ToolLimits::default())).await;
        assert_eq!(value(&r), json!(12), "{backend:?}: {}", r.stderr);
    }
}

#[tokio::test]
async fn two_runs_never_cross_and_forged_replies_do_nothing() {
    for backend in BACKENDS {
        let src = "import time\nseen = set()\nfor _ in range(20):\n    seen.add(echo()['tag'])\n    time.sleep(0.005)\nsorted(seen)";
        let (a, b) = tokio::join!(
            run(backend, src, host("a", ToolLimits::default())),
            run(backend, src, host("b", ToolLimits::default()))
        );
        assert_eq!(
            (value(&a), value(&b)),
            (json!(["a"]), json!(["b"])),
            "{backend:?}"
        );
        // A program writing a "reply" to its channel sends it to the host, not to itself; its
        // call still gets the host's answer. Other runs' channels are not reachable: no name,
        // and /proc shows only this run's own processes.
        let hostile = r#"import os, json, glob
fds = [int(p.rsplit('/', 1)[1]) for p in glob.glob('/proc/self/fd/*')]
for fd in fds:
    if fd > 2:
        try:
            body = json.dumps({"id": 1, "result": "forged"}).encode()
            os.write(fd, len(body).to_bytes(4, 'little') + body)
        except OSError:
            pass
others = [p for p in glob.glob('/proc/[0-9]*') if p.rsplit('/', 1)[1] not in ('1', str(os.getpid()))]
[echo('real')['args'], others]"#;
        let r = run(backend, hostile, host("a", ToolLimits::default())).await;
        assert_eq!(
            value(&r),
            json!([["real"], []]),
            "{backend:?}: {}",
            r.stderr
        );
    }
}
