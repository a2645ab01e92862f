//! Per-task packages (issue 13): a task requiring a small pure-Python package from PyPI (and the
//! same from a local wheelhouse with the index unreachable), on both backends; the cache reused and
//! shared by concurrent builders; policy and uninstallable packages as FAILED_PRECONDITION; a hostile
//! program trying to write into the package cache.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use codegym_sandbox::host_tool::run_host_tool;
use codegym_sandbox::packages::{PackageCache, PackageError, PackagesConfig};
use codegym_sandbox::{Backend, SandboxConfig};
use env_coding::{CodingConfig, PYTHON_ENV_ID, register};
use env_core::{EnvError, Registry, Value};
use serde_json::json;

const PACKAGE: &str = "tabulate==0.9.0";

fn python() -> PathBuf {
    // The interpreter the sandbox resolves by default.
    codegym_sandbox::Sandbox::new(SandboxConfig {
        backend: Backend::Fresh,
        ..SandboxConfig::default()
    })
    .map(|s| s.python().to_path_buf())
    .unwrap_or_else(|e| panic!("sandbox: {e}"))
}

fn registry(cache: &Path, backend: Backend, n: u32, packages: PackagesConfig) -> Registry {
    let mut reg = Registry::new();
    let config = CodingConfig {
        sandbox: SandboxConfig {
            backend,
            uid_base: 2_600_000 + (std::process::id() % 1000) * 100 + n * 16,
            uid_count: 16,
            ..SandboxConfig::default()
        },
        packages: PackagesConfig {
            enabled: true,
            cache_dir: cache.to_path_buf(),
            ..packages
        },
        ..CodingConfig::default()
    };
    register(&mut reg, config).unwrap_or_else(|e| panic!("register: {e}"));
    reg
}

/// An inline task whose program imports the package; the reward checks its output.
fn task(requirements: &[&str]) -> serde_json::Map<String, serde_json::Value> {
    let task = json!({
        "id": "pkg",
        "prompt": "Print a table with tabulate.",
        "requirements": requirements,
        "reward": {"version": 1, "components": [{"type": "contains", "text": "0.9.0"}]}
    });
    json!({"task": task})
        .as_object()
        .cloned()
        .unwrap_or_default()
}

const PROGRAM: &str = r#"
import os, tabulate
print(tabulate.__version__, tabulate.__file__)
target = os.path.dirname(tabulate.__file__)
for what, path, mode in [("new", os.path.join(target, "pwned.py"), "w"),
                         ("edit", tabulate.__file__, "a")]:
    try:
        open(path, mode).write("x = 1\n")
        print(what, "ALLOWED")
    except OSError as e:
        print(what, "denied", type(e).__name__)
"#;

async fn run_task(
    reg: &Registry,
    options: serde_json::Map<String, serde_json::Value>,
) -> Result<String, EnvError> {
    let kwargs = json!({"extract": "raw"})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut env = reg.make_async(PYTHON_ENV_ID, &kwargs).await?;
    env.reset(None, options).await?;
    let step = env.step(Value::Text(PROGRAM.into())).await?;
    assert_eq!(step.reward, 1.0, "{:?}", step.obs);
    match step.obs {
        Value::Execution(r) => Ok(r.stdout),
        other => panic!("{other:?}"),
    }
}

fn entries(cache: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(cache)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    !p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn assert_read_only(stdout: &str, cache: &Path) {
    assert!(stdout.starts_with("0.9.0 "), "{stdout}");
    assert!(stdout.contains(&cache.display().to_string()), "{stdout}");
    assert!(stdout.contains("new denied"), "{stdout}");
    assert!(stdout.contains("edit denied"), "{stdout}");
}

/// From PyPI, on both backends: built once, reused by the second registration, never writable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pypi_package_on_both_backends_built_once() {
    let cache = tempfile::tempdir().expect("tempdir");
    let fresh = registry(cache.path(), Backend::Fresh, 0, PackagesConfig::default());
    let out = run_task(&fresh, task(&[PACKAGE])).await.expect("fresh run");
    assert_read_only(&out, cache.path());
    let built = entries(cache.path());
    assert_eq!(built.len(), 1);
    let manifest = std::fs::read_to_string(built[0].join("manifest.json")).expect("manifest");
    assert!(manifest.contains("tabulate-0.9.0"), "{manifest}");
    let inode =
        |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).expect("meta"));
    let before = inode(&built[0].join("site"));

    let warm = registry(
        cache.path(),
        Backend::WarmFork,
        1,
        PackagesConfig::default(),
    );
    let out = run_task(&warm, task(&[PACKAGE])).await.expect("warm run");
    assert_read_only(&out, cache.path());
    assert_eq!(entries(cache.path()), built, "reused, not rebuilt");
    assert_eq!(inode(&built[0].join("site")), before);
    assert!(!built[0].join("site/pwned.py").exists());
}

/// From a wheelhouse with the index unreachable; concurrent builders of one set build it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wheelhouse_offline_shared_by_concurrent_builders() {
    let wheelhouse = tempfile::tempdir().expect("tempdir");
    let args: Vec<OsString> = [
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "-d",
    ]
    .iter()
    .map(OsString::from)
    .chain([wheelhouse.path().as_os_str().to_owned(), PACKAGE.into()])
    .collect();
    let env: Vec<(String, String)> = [
        "PATH",
        "HOME",
        "PIP_CERT",
        "PIP_INDEX_URL",
        "HTTPS_PROXY",
        "https_proxy",
    ]
    .iter()
    .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
    .collect();
    let py = python();
    let dl = run_host_tool(
        &py,
        &args,
        &env,
        wheelhouse.path(),
        Duration::from_secs(120),
    )
    .expect("pip download");
    assert_eq!(dl.exit_code, Some(0), "{}", dl.stderr);

    let cache = tempfile::tempdir().expect("tempdir");
    let config = PackagesConfig {
        enabled: true,
        wheelhouse: Some(wheelhouse.path().to_path_buf()),
        index_url: Some("http://127.0.0.1:9/".into()),
        cache_dir: cache.path().to_path_buf(),
        ..PackagesConfig::default()
    };
    codegym_sandbox::packages::create_cache_dir(&config).expect("cache dir");
    // Two caches on one dir: like two servers sharing it (the lock is a file lock, not a mutex).
    let a = PackageCache::new(config.clone(), py.clone());
    let b = PackageCache::new(config.clone(), py.clone());
    let reqs = vec![PACKAGE.to_string()];
    let (ra, rb) = tokio::join!(a.ensure(&reqs), b.ensure(&reqs));
    let (ra, rb) = (ra.expect("a"), rb.expect("b"));
    assert_eq!(ra, rb);
    assert!(ra.join("tabulate").is_dir() || ra.join("tabulate.py").is_file());
    assert_eq!(entries(cache.path()).len(), 1);
    assert!(a.report().to_string().contains(PACKAGE), "{}", a.report());

    // Not in the wheelhouse: a clear error naming it, from the offline source.
    let missing = a
        .ensure(&["codegym-no-such-package==1.0".into()])
        .await
        .unwrap_err();
    match &missing {
        PackageError::Install { requirement, .. } => {
            assert!(requirement.contains("codegym-no-such-package"), "{missing}")
        }
        other => panic!("{other}"),
    }
    assert_eq!(
        entries(cache.path()).len(),
        1,
        "a failed build leaves nothing"
    );

    // Through the env: the same errors are FAILED_PRECONDITION (EnvError::FailedPrecondition).
    let reg = registry(cache.path(), Backend::Fresh, 2, config.clone());
    let out = run_task(&reg, task(&[PACKAGE]))
        .await
        .expect("run from the wheelhouse");
    assert_read_only(&out, cache.path());
    let e = run_task(&reg, task(&["codegym-no-such-package==1.0"]))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, EnvError::FailedPrecondition(m) if m.contains("codegym-no-such-package")),
        "{e}"
    );
    let e = run_task(&reg, task(&["tabulate @ https://example.com/t.whl"]))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, EnvError::FailedPrecondition(m) if m.contains("refused")),
        "{e}"
    );

    // Policy: an allow-list without the package refuses it.
    let strict = registry(
        cache.path(),
        Backend::Fresh,
        3,
        PackagesConfig {
            allow: vec!["numpy".into()],
            ..config
        },
    );
    let e = run_task(&strict, task(&[PACKAGE])).await.unwrap_err();
    assert!(
        matches!(&e, EnvError::FailedPrecondition(m) if m.contains("allow-list")),
        "{e}"
    );
}

/// A server without packages refuses tasks that need them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requirements_need_the_server_to_allow_them() {
    let mut reg = Registry::new();
    register(&mut reg, CodingConfig::default()).unwrap_or_else(|e| panic!("register: {e}"));
    let e = run_task(&reg, task(&[PACKAGE])).await.unwrap_err();
    assert!(
        matches!(&e, EnvError::FailedPrecondition(m) if m.contains("packages.enabled")),
        "{e}"
    );
}
