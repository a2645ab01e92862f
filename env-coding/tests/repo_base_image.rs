//! The shipped repository tasks (inflection with three bugs) in the Debian image CI builds for
//! the container suite (`deploy/build-base.sh`): podman derives an image from it with git,
//! `python` and pytest added (no `RUN`: podman starts no container), saves it as an oci-archive, and every
//! task is then set up, run and scored in that image's filesystem with no podman process
//! running: the reference patch resolves each task, the empty patch does not, and a run sees
//! the image's Python and pytest, not the host's.
//!
//! Heavy (a 1.9 GB image saved and unpacked, ~2 min): ignored by default, run by the heavy step
//! of `tests/all.sh` with `CODEGYM_BASE_IMAGE` naming the base image.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use env_coding::repo::check_repo_tasks;
use env_coding::tasks::RepoTaskSet;

#[path = "support/repo.rs"]
mod repo_support;

const PYTEST: &str = "pytest==8.3.4";
/// Where Debian's python3 finds packages installed outside its own (`sys.path`).
const IMAGE_SITE: &str = "/usr/local/lib/python3.11/dist-packages";

#[allow(clippy::disallowed_methods)] // podman and ldd build the test's input
fn command(program: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A tar of the host's git and the libraries `ldd` lists (the host is the image's Debian
/// release, so they fit), and `python` as Debian's `python-is-python3` makes it: the base image
/// has neither, and preparing and scoring need git, the tasks' test command `python`.
fn tools_tar(path: &Path) {
    let mut files = vec![PathBuf::from("/usr/bin/git")];
    for word in command("ldd", &["/usr/bin/git"]).split_whitespace() {
        if word.starts_with('/') {
            files.push(PathBuf::from(word));
        }
    }
    let mut b = tar::Builder::new(std::fs::File::create(path).expect("tools tar"));
    for file in files {
        let rel = file.strip_prefix("/").expect("absolute");
        b.append_path_with_name(std::fs::canonicalize(&file).expect("host file"), rel)
            .expect("append");
    }
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    h.set_mode(0o777);
    b.append_link(&mut h, "usr/local/bin/python", "/usr/bin/python3")
        .expect("python link");
    b.finish().expect("tools tar");
}

/// Copies `from` (a site dir) into `to`, following nothing outside it.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir").flatten() {
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().expect("type");
        if kind.is_dir() {
            copy_tree(&src, &dst);
        } else if kind.is_file() {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

/// The shipped set, copied with every task's `environment` the image at `image` (the image
/// brings pytest, so the tasks list no `requirements`).
fn task_set_in(dir: &Path, image: &str) -> PathBuf {
    let shipped = repo_support::dir();
    for sub in ["repos", "hidden", "patches"] {
        copy_tree(&shipped.join(sub), &dir.join(sub));
    }
    let text = std::fs::read_to_string(repo_support::shipped()).expect("shipped set");
    let mut out = String::new();
    for line in text.lines().filter(|l| l.starts_with('{')) {
        let mut task: serde_json::Value = serde_json::from_str(line).expect("task line");
        let task = task.as_object_mut().expect("object");
        task.insert("version".into(), 2.into());
        task.insert("environment".into(), image.into());
        task.remove("requirements");
        out.push_str(&serde_json::Value::Object(task.clone()).to_string());
        out.push('\n');
    }
    let path = dir.join("tasks.jsonl");
    std::fs::write(&path, out).expect("tasks");
    path
}

fn podman_running() -> bool {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .any(|e| std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "podman"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "heavy: needs the base image CI builds (CODEGYM_BASE_IMAGE); tests/all.sh runs it"]
async fn the_shipped_tasks_resolve_in_an_archive_of_the_ci_base_image() {
    let base = std::env::var("CODEGYM_BASE_IMAGE")
        .expect("CODEGYM_BASE_IMAGE: the base image's tag (deploy/build-base.sh --tag)");
    let dir = tempfile::Builder::new()
        .prefix("codegym-repo-base-image-")
        .tempdir()
        .expect("tmp");
    let config = repo_support::config(3_300_000, 0);
    let scorer = env_coding::Scorer::new(&config).unwrap_or_else(|e| panic!("scorer: {e}"));
    let packages = scorer.packages().cloned().expect("package cache");
    let site = packages
        .ensure(&[PYTEST.to_string()])
        .await
        .unwrap_or_else(|e| panic!("pytest: {e}"));

    // The derived image: the base, the host's git, `python`, pytest's files where Debian's python3 looks.
    let context = dir.path().join("context");
    copy_tree(&site, &context.join("site"));
    tools_tar(&context.join("tools.tar"));
    std::fs::write(
        context.join("Containerfile"),
        format!("FROM {base}\nADD tools.tar /\nCOPY site/ {IMAGE_SITE}/\n"),
    )
    .expect("Containerfile");
    let tag = format!("localhost/codegym-test-repo-base:{}", std::process::id());
    let ctx = context.to_str().expect("path");
    command("podman", &["build", "-q", "-t", &tag, ctx]);
    let archive = dir.path().join("image.tar");
    command(
        "podman",
        // Uncompressed: half the time to save, and nothing to decompress at import.
        &[
            "save",
            "--uncompressed",
            "--format",
            "oci-archive",
            "-o",
            archive.to_str().expect("path"),
            &tag,
        ],
    );
    command("podman", &["rmi", &tag]);

    let set = RepoTaskSet::load(&task_set_in(dir.path(), "image.tar")).expect("task set");
    assert_eq!(set.tasks.len(), 3);
    assert!(set.tasks.iter().all(|t| t.requirements.is_empty()));
    assert!(!podman_running(), "podman is still running");
    let repo = env_coding::repo::RepoScorer::new(scorer.sandbox().clone(), None);
    let checks = check_repo_tasks(&repo, &set).await;
    for c in &checks {
        assert!(c.passed, "{}: {:?}", c.task_id, c.error);
        assert_eq!(c.reference.as_ref().map(|v| v.reward), Some(1.0));
        assert_eq!(c.empty.as_ref().map(|v| v.reward), Some(0.0));
    }

    // A run sees the image (Debian's python3, the pytest added to it), not the host.
    let prepared = repo
        .prepare(Arc::new(set.tasks[0].clone()))
        .await
        .expect("prepare");
    let ws = repo.episode(&prepared).expect("episode");
    let seen = repo
        .run(
            &ws,
            &prepared,
            "command -v python3; python3 -c 'import pytest; print(pytest.__file__)'; \
             ls /usr/bin/rustc; ls /work 2>&1",
            None,
        )
        .await
        .expect("run");
    assert!(!podman_running(), "podman is still running");
    let lines: Vec<&str> = seen.stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"/usr/bin/python3"), "{seen:?}");
    assert_eq!(
        lines.get(1).copied(),
        Some(format!("{IMAGE_SITE}/pytest/__init__.py").as_str()),
        "{seen:?}"
    );
    // The base image has Rust (a toolchain the sandbox runs); the host's /work is not there.
    assert_eq!(lines.get(2).copied(), Some("/usr/bin/rustc"), "{seen:?}");
    assert!(
        lines.get(3).is_some_and(|l| l.contains("No such file")),
        "{seen:?}"
    );
}
