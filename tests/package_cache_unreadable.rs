//! The task package cache made unreadable under a running `codegym serve` (the real binary, the
//! real sandbox, a wheel built here and served from an offline wheelhouse): runs that need the
//! cache fail as the machinery's error (UNAVAILABLE from the server's error table), never with a
//! reward; runs that do not need it are unaffected; once the cache is readable again, runs that
//! need it succeed. Kept apart from the soak, whose checks allow no error of any code.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use codegym_bin::Serve;
use codegym_sandbox::host_tool::run_host_tool;
use codegym_sandbox::{Backend, SandboxConfig};
use env_core::Value;
use proto::convert::value_to_proto;
use proto::v1;
use proto::v1::env_service_client::EnvServiceClient;
use serde_json::json;

/// A pure-Python wheel of one module, `soakpkg` (`VALUE = 42`), zipped by the sandbox's
/// interpreter into `wheelhouse`.
fn build_wheel(staging: &Path, wheelhouse: &Path) {
    let info = staging.join("soakpkg-1.0.dist-info");
    std::fs::create_dir_all(staging.join("soakpkg")).unwrap();
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(staging.join("soakpkg/__init__.py"), "VALUE = 42\n").unwrap();
    std::fs::write(
        info.join("METADATA"),
        "Metadata-Version: 2.1\nName: soakpkg\nVersion: 1.0\n",
    )
    .unwrap();
    std::fs::write(
        info.join("WHEEL"),
        "Wheel-Version: 1.0\nGenerator: codegym-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    )
    .unwrap();
    std::fs::write(
        info.join("RECORD"),
        "soakpkg/__init__.py,,\nsoakpkg-1.0.dist-info/METADATA,,\nsoakpkg-1.0.dist-info/WHEEL,,\nsoakpkg-1.0.dist-info/RECORD,,\n",
    )
    .unwrap();
    let python = codegym_sandbox::Sandbox::new(SandboxConfig {
        backend: Backend::Fresh,
        ..SandboxConfig::default()
    })
    .expect("sandbox")
    .python()
    .to_path_buf();
    let wheel = wheelhouse.join("soakpkg-1.0-py3-none-any.whl");
    let args = ["-m", "zipfile", "-c"]
        .map(std::ffi::OsString::from)
        .into_iter()
        .chain([
            wheel.into_os_string(),
            "soakpkg".into(),
            "soakpkg-1.0.dist-info".into(),
        ])
        .collect::<Vec<_>>();
    let zipped = run_host_tool(&python, &args, &[], staging, Duration::from_secs(60))
        .expect("zip the wheel");
    assert_eq!(zipped.exit_code, Some(0), "{}", zipped.stderr);
}

/// An `Evaluate` item: the task needing the package (reward 1 when it imports), or hello-world.
fn item(needs_package: bool, n: u32) -> v1::EvaluateItem {
    let options = if needs_package {
        json!({"task": {"id": "pkg", "prompt": "Print soakpkg.VALUE.", "requirements": ["soakpkg==1.0"],
                        "reward": {"version": 1, "components": [{"type": "contains", "text": "42"}]}}})
    } else {
        json!({"task_id": "hello-world"})
    };
    let src = if needs_package {
        format!("import soakpkg\nprint(soakpkg.VALUE)  # {n}")
    } else {
        format!("print('Hello, world!')  # {n}")
    };
    v1::EvaluateItem {
        seed: None,
        options_json: options.to_string(),
        action: Some(value_to_proto(&Value::Text(src))),
    }
}

/// Each item's reward, or its error code and message.
async fn evaluate(
    client: &mut EnvServiceClient<tonic::transport::Channel>,
    n: u32,
) -> Vec<Result<f64, (i32, String)>> {
    let items = vec![item(true, n), item(false, n), item(true, n + 1)];
    let response = client
        .evaluate(v1::EvaluateRequest {
            env_id: "codegym/Code-v0".into(),
            kwargs_json: String::new(),
            items,
        })
        .await
        .expect("Evaluate answers")
        .into_inner();
    response
        .results
        .into_iter()
        .map(|r| match (r.step, r.error) {
            (Some(step), _) => Ok(step.reward),
            (None, Some(e)) => Err((e.code, e.message)),
            (None, None) => Err((-1, "neither a step nor an error".into())),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_package_cache_is_a_machinery_error_never_a_reward() {
    let dir = tempfile::tempdir().unwrap();
    let (staging, wheelhouse, cache) = (
        dir.path().join("staging"),
        dir.path().join("wheelhouse"),
        dir.path().join("cache"),
    );
    std::fs::create_dir_all(&wheelhouse).unwrap();
    build_wheel(&staging, &wheelhouse);
    let packages = json!({"enabled": true, "wheelhouse": wheelhouse, "cache_dir": cache,
                          "index_url": "http://127.0.0.1:9/"});
    // Its own work root and uid range: no other server on the host shares them.
    let work = dir.path().join("work");
    let sandbox = json!({"work_root": work, "uid_base": 20_100_000, "uid_count": 64});
    let config =
        json!({"coding": {"packages": packages, "sandbox": sandbox, "verdict_cache_mib": 0}});
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let server = Serve::start_in(
        dir.path(),
        ["--addr", "127.0.0.1:0", "--config", "config.json"],
    )
    .await;
    let channel = tonic::transport::Channel::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = EnvServiceClient::new(channel);

    // Readable: the cache entry is built from the wheelhouse, and every run earns its reward.
    assert_eq!(evaluate(&mut client, 0).await, [Ok(1.0), Ok(1.0), Ok(1.0)]);

    // Unreadable (the server is root, so it still reads it; the runs' uids do not): the runs that
    // need it are the machinery's failure, the others unaffected.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o000)).unwrap();
    let got = evaluate(&mut client, 10).await;
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755)).unwrap();
    let unavailable = tonic::Code::Unavailable as i32;
    for (i, r) in got.iter().enumerate() {
        match (i, r) {
            (1, Ok(reward)) => assert_eq!(*reward, 1.0, "{got:?}"),
            (0 | 2, Err((code, message))) => {
                assert_eq!(*code, unavailable, "{got:?}");
                assert!(message.contains("package cache"), "{message}");
            }
            _ => panic!("with the cache unreadable: {got:?}"),
        }
    }

    // Readable again: every run earns its reward.
    assert_eq!(evaluate(&mut client, 20).await, [Ok(1.0), Ok(1.0), Ok(1.0)]);
}
