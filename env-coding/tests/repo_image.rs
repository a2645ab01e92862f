//! A repository task whose `environment` is an OCI image (task format version 2): podman builds
//! a small image from a rootfs made here (a static busybox and the host's git with its
//! libraries) and saves it as an oci-archive; the task's setup, an episode's commands and
//! scoring then run in that image's filesystem, with no podman process running, and see nothing
//! of the host's. The gold patch resolves the task, the unpatched repository does not.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use env_coding::tasks::RepoTaskSet;

#[path = "support/repo.rs"]
mod repo_support;

const CALC: &str = "add() { echo $(( $1 - $2 )); }\nsub() { echo $(( $1 - $2 )); }\n";

const TEST: &str = r#". ./calc.sh
case_of() {
  if [ "$2" = "$3" ]; then echo "<testcase classname=\"calc\" name=\"$1\"/>"
  else echo "<testcase classname=\"calc\" name=\"$1\"><failure message=\"$2\"/></testcase>"; fi
}
{ echo '<testsuite>'; case_of test_add "$(add 2 3)" 5; case_of test_sub "$(sub 5 3)" 2
  echo '</testsuite>'; } > "$CODEGYM_JUNIT"
"#;

const PATCH: &str = "diff --git a/calc.sh b/calc.sh\n--- a/calc.sh\n+++ b/calc.sh\n@@ -1,2 +1,2 @@\n-add() { echo $(( $1 - $2 )); }\n+add() { echo $(( $1 + $2 )); }\n sub() { echo $(( $1 - $2 )); }\n";

const APPLETS: &[&str] = &[
    "sh", "cat", "ls", "cp", "rm", "mv", "mkdir", "printf", "test", "[", "grep", "head", "wc",
    "id", "touch", "env", "true", "false", "dirname", "basename", "sed",
];

/// The host files git needs: the binary and what `ldd` lists (absolute paths).
#[allow(clippy::disallowed_methods)] // ldd reads the host's git: the test's input
fn git_files() -> Vec<PathBuf> {
    let out = std::process::Command::new("ldd")
        .arg("/usr/bin/git")
        .output()
        .expect("ldd");
    let mut files = vec![PathBuf::from("/usr/bin/git")];
    for word in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        if word.starts_with('/') {
            files.push(PathBuf::from(word));
        }
    }
    files
}

fn rootfs_tar(path: &Path) {
    let mut b = tar::Builder::new(std::fs::File::create(path).expect("rootfs"));
    let mut add = |name: &str, data: &[u8], mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_mtime(1_700_000_000);
        b.append_data(&mut h, name, data).expect("append");
    };
    let busybox =
        std::fs::read("/bin/busybox").expect("/bin/busybox (apt-get install busybox-static)");
    add("bin/busybox", &busybox, 0o755);
    add("etc/os-release", b"ID=codegym-env-test\n", 0o644);
    for file in git_files() {
        let data = std::fs::read(&file).expect("host file");
        add(
            file.to_str().expect("path").trim_start_matches('/'),
            &data,
            0o755,
        );
    }
    for applet in APPLETS {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_mode(0o777);
        b.append_link(&mut h, format!("bin/{applet}"), "busybox")
            .expect("link");
    }
    b.finish().expect("rootfs");
}

/// podman's oci-archive of an image imported from `rootfs`; the image is removed from podman's
/// storage at once (the archive is all the task needs).
#[allow(clippy::disallowed_methods)] // podman builds the task's image: the test's input
fn podman_archive(rootfs: &Path, archive: &Path) {
    let tag = format!("localhost/codegym-repo-image-test:{}", std::process::id());
    let podman = |args: &[&str]| {
        let out = std::process::Command::new("podman")
            .args(args)
            .output()
            .expect("podman");
        assert!(
            out.status.success(),
            "podman {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    podman(&["import", rootfs.to_str().expect("path"), &tag]);
    podman(&[
        "save",
        "--format",
        "oci-archive",
        "-o",
        archive.to_str().expect("path"),
        &tag,
    ]);
    podman(&["rmi", &tag]);
}

fn podman_running() -> bool {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .any(|e| std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "podman"))
}

fn task_set(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir.join("repo")).expect("repo");
    std::fs::write(dir.join("repo/calc.sh"), CALC).expect("calc");
    std::fs::create_dir_all(dir.join("hidden")).expect("hidden");
    std::fs::write(dir.join("hidden/test_calc.sh"), TEST).expect("test");
    std::fs::write(dir.join("fix.diff"), PATCH).expect("patch");
    rootfs_tar(&dir.join("rootfs.tar"));
    podman_archive(&dir.join("rootfs.tar"), &dir.join("image.tar"));
    let line = serde_json::json!({
        "version": 2, "id": "calc/add", "repository": "repo", "environment": "image.tar",
        "setup": ["echo set-up > .setup-done"],
        "problem_statement": "add subtracts", "test_command": "sh test_calc.sh",
        "hidden_tests": "hidden", "fail_to_pass": ["calc::test_add"],
        "pass_to_pass": ["calc::test_sub"], "patch": "fix.diff",
        "limits": {"test_wall_ms": 20000, "setup_wall_ms": 20000}
    });
    let path = dir.join("tasks.jsonl");
    std::fs::write(&path, format!("{line}\n")).expect("tasks");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_with_an_image_environment_is_set_up_run_and_scored_in_it() {
    let dir = tempfile::Builder::new()
        .prefix("codegym-repo-image-")
        .tempdir()
        .expect("tmp");
    let set = RepoTaskSet::load(&task_set(dir.path())).expect("task set");
    assert!(!podman_running(), "podman is still running");
    let scorer = repo_support::scorer(2_900_000, 0);
    let task = Arc::new(set.tasks[0].clone());
    let prepared = scorer.prepare(task.clone()).await.expect("prepare");

    let ws = scorer.episode(&prepared).expect("episode");
    let seen = scorer
        .run(
            &ws,
            &prepared,
            "cat /etc/os-release; cat .setup-done; ls /; pwd; \
             ls /usr/lib/python3* /work 2>/dev/null || echo no-host-files",
            None,
        )
        .await
        .expect("run");
    assert_eq!(
        seen.stdout,
        "ID=codegym-env-test\nset-up\nbin\ncodegym\ndev\netc\nlib\nlib64\nproc\ntmp\nusr\n\
         /codegym/repo\nno-host-files\n",
        "{seen:?}"
    );
    let edit = scorer
        .run(&ws, &prepared, "sed -i '1s/-/+/' calc.sh", None)
        .await
        .expect("edit");
    assert_eq!(edit.exit_code, Some(0), "{edit:?}");
    let diff = scorer
        .diff(&ws, &prepared)
        .await
        .expect("diff")
        .expect("readable diff");
    assert!(diff.contains("+add() { echo $(( $1 + $2 )); }"), "{diff}");

    let fixed = scorer
        .score(&prepared, &diff)
        .await
        .expect("score the episode");
    assert!(fixed.resolved && fixed.reward == 1.0, "{fixed:?}");
    let gold = scorer
        .score(&prepared, &task.patch)
        .await
        .expect("score the gold patch");
    assert!(gold.resolved, "{gold:?}");
    let unpatched = scorer.score(&prepared, "").await.expect("score nothing");
    assert!(
        !unpatched.resolved && unpatched.reward == 0.0,
        "{unpatched:?}"
    );
}
