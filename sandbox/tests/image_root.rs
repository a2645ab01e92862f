//! Runs in an image root (`image/root.rs`): workspaces whose runs see an OCI image (a static
//! busybox, built by the test) as their whole filesystem. Many episodes at once try to read a
//! host file, write the image's files, reach the layer store by its path and outlive their
//! runs; none can, and the store's layers are byte-identical after.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use codegym_sandbox::image::LayerStore;
use sha2::{Digest as _, Sha256};

#[path = "support/oci.rs"]
mod oci;
#[path = "support/workspace.rs"]
mod support;
use support::{sandbox, sh};

const EPISODES: usize = 12;

/// Every entry under `dir`: path, type and mode bits, owner, and content (or link target) hash.
fn snapshot(dir: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for p in entries {
        let m = std::fs::symlink_metadata(&p).expect("lstat");
        let content = if m.is_file() {
            std::fs::read(&p).expect("read")
        } else if m.file_type().is_symlink() {
            std::fs::read_link(&p)
                .expect("link")
                .into_os_string()
                .into_encoded_bytes()
        } else {
            Vec::new()
        };
        let hash: String = Sha256::digest(&content)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        out.push(format!(
            "{} {:o} {}:{} {hash}",
            p.display(),
            m.mode(),
            m.uid(),
            m.gid()
        ));
        if m.is_dir() {
            snapshot(&p, out);
        }
    }
}

/// Removes a host file when the test ends, passed or not.
struct Remove(PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Host processes whose command line contains `token`.
fn processes_with(token: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(token) {
                found.push(cmd);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runs_in_an_image_root_see_the_image_and_nothing_of_the_host() {
    let (sandbox, root) = sandbox("hostile");
    let t = tempfile::Builder::new()
        .prefix("codegym-img-")
        .tempdir()
        .expect("tempdir");
    // A host file every run of the host's root could read (Landlock grants `/usr`).
    let marker = PathBuf::from(format!(
        "/usr/local/share/codegym-image-marker-{}",
        std::process::id()
    ));
    std::fs::write(&marker, "HOST-MARKER").expect("marker");
    let _remove = Remove(marker.clone());
    let layout = t.path().join("layout");
    oci::write_layout(&layout, &[(oci::TAR_GZ, oci::busybox_layer().gzip())]);
    let store = LayerStore::open(t.path().join("store")).expect("store");
    let image = store.import(&layout).expect("import");
    let mut before = Vec::new();
    snapshot(store.root(), &mut before);
    let image_root = sandbox.image_root(&image).expect("image root");
    let repo = t.path().join("repo");
    std::fs::create_dir(&repo).expect("repo");
    std::fs::write(repo.join("hello.txt"), "hello repo\n").expect("repo file");
    let layer = sandbox.import_layer(&repo).await.expect("repo layer");
    let sleeper = format!("{}", 900_000 + std::process::id() % 90_000);

    let mut tasks = Vec::new();
    for i in 0..EPISODES {
        let ws = Arc::new(
            sandbox
                .workspace_in(vec![layer.clone()], image_root.clone(), None)
                .expect("workspace"),
        );
        let (marker, store_root, sleeper) = (
            marker.display().to_string(),
            store.root().display().to_string(),
            sleeper.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let first = sh(
                &ws,
                "cat /etc/image-file; cat hello.txt; pwd; echo $HOME; ls /; \
                 echo hi > /dev/null && head -c 5 /dev/urandom | wc -c; id -u; \
                 cat /proc/self/mountinfo >&2; wc -l < /proc/self/mountinfo"
                    .into(),
            )
            .await;
            let hostile = sh(
                &ws,
                format!(
                    "cat {marker} && echo READ-MARKER; \
                     echo x > /etc/image-file && echo WROTE-IMAGE; \
                     touch /bin/new && echo WROTE-BIN; rm /bin/cat && echo REMOVED-BIN; \
                     ls {store_root} && echo SAW-STORE; ls /usr && echo SAW-USR; \
                     echo episode-{i} > hello.txt; echo tmp > /tmp/x && cat /tmp/x; \
                     sleep {sleeper} & echo started"
                ),
            )
            .await;
            let after = sh(
                &ws,
                "cat hello.txt; cat /tmp/x 2>&1; cat /etc/image-file".into(),
            )
            .await;
            (i, first, hostile, after)
        }));
    }
    for task in tasks {
        let (i, first, hostile, after) = task.await.expect("episode");
        let out = first.stdout.lines().collect::<Vec<_>>();
        assert_eq!(first.exit_code, Some(0), "{first:?}");
        assert_eq!(
            out[..4],
            ["from the image", "hello repo", "/codegym/repo", "/codegym"],
            "{first:?}"
        );
        let listing: Vec<&str> = out[4..out.len() - 3].to_vec();
        assert_eq!(
            listing,
            ["bin", "codegym", "dev", "etc", "proc", "tmp"],
            "{first:?}"
        );
        assert_eq!(out[out.len() - 3], "5", "{first:?}");
        assert_ne!(out[out.len() - 2], "0", "runs as root: {first:?}");
        // The image, /proc, /dev, /tmp, the work dir and its repository: no mount of the host's.
        assert_eq!(out[out.len() - 1], "6", "{first:?}");
        for bad in [
            "READ-MARKER",
            "HOST-MARKER",
            "WROTE-IMAGE",
            "WROTE-BIN",
            "REMOVED-BIN",
            "SAW-STORE",
            "SAW-USR",
        ] {
            assert!(
                !hostile.stdout.contains(bad),
                "episode {i}: {bad}: {hostile:?}"
            );
        }
        assert!(
            hostile.stdout.contains("tmp\nstarted"),
            "episode {i}: {hostile:?}"
        );
        let out = after.stdout.lines().collect::<Vec<_>>();
        assert_eq!(out[0], format!("episode-{i}"), "{after:?}");
        assert!(
            !after.stdout.contains("\ntmp\n"),
            "a run's /tmp outlived it: {after:?}"
        );
        assert_eq!(out.last().copied(), Some("from the image"), "{after:?}");
    }
    let left = processes_with(&format!("sleep {sleeper}"));
    assert!(left.is_empty(), "processes outlived their runs: {left:?}");
    let mut after = Vec::new();
    snapshot(store.root(), &mut after);
    assert_eq!(before, after, "the image's layers changed");
    drop(image_root);
    drop(sandbox);
    let _ = std::fs::remove_dir_all(root);
}

/// An image whose mount points are symlinks out of it (`tmp -> HOST_DIR`, `dev -> /etc`, ...):
/// the generated layer's dirs win over them, so every mount lands in the image root, and the run
/// starts in its own work dir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_images_symlinked_mount_points_are_the_generated_layers_dirs() {
    let (sandbox, root) = sandbox("links");
    let t = tempfile::Builder::new()
        .prefix("codegym-img-")
        .tempdir()
        .expect("tempdir");
    let host = t.path().join("host-dir");
    std::fs::create_dir(&host).expect("host dir");
    let host_s = host.display().to_string();
    let mut layer = oci::busybox_layer();
    for (name, target) in [
        ("tmp", host_s.as_str()),
        ("dev", "/etc"),
        ("proc", "/"),
        ("codegym", host_s.as_str()),
    ] {
        layer = layer.entry(name, tar::EntryType::Symlink, 0o777, b"", target);
    }
    let layout = t.path().join("layout");
    oci::write_layout(&layout, &[(oci::TAR, layer.bytes())]);
    let store = LayerStore::open(t.path().join("store")).expect("store");
    let image = store.import(&layout).expect("import");
    let image_root = sandbox.image_root(&image).expect("image root");
    let repo = t.path().join("repo");
    std::fs::create_dir(&repo).expect("repo");
    std::fs::write(repo.join("f"), "repo\n").expect("repo file");
    let layer = sandbox.import_layer(&repo).await.expect("repo layer");
    let ws = sandbox
        .workspace_in(vec![layer], image_root, None)
        .expect("workspace");
    let r = sh(
        &ws,
        "cat f; pwd; echo t > /tmp/t && cat /tmp/t; ls /dev; ls /proc/1/ >/dev/null && echo proc"
            .into(),
    )
    .await;
    assert_eq!(
        r.stdout, "repo\n/codegym/repo\nt\nfull\nnull\nrandom\nurandom\nzero\nproc\n",
        "{r:?}"
    );
    let left: Vec<_> = std::fs::read_dir(&host).expect("host dir").collect();
    assert!(
        left.is_empty(),
        "written through the image's link: {left:?}"
    );
    drop(ws);
    drop(sandbox);
    let _ = std::fs::remove_dir_all(root);
}

/// A workspace in an image root has the same hard disk quota as one over the host's root: the
/// repository (the workspace's upper dir) and the run's work dir stop at it, and deleting frees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_in_an_image_has_its_disk_quota() {
    const QUOTA_MIB: u64 = 8;
    let (sandbox, root) = sandbox("quota");
    let t = tempfile::tempdir().expect("tempdir");
    let layout = t.path().join("layout");
    oci::write_layout(&layout, &[(oci::TAR, oci::busybox_layer().bytes())]);
    let store = LayerStore::open(t.path().join("store")).expect("store");
    let image = store.import(&layout).expect("import");
    let image_root = sandbox.image_root(&image).expect("image root");
    let repo = t.path().join("repo");
    std::fs::create_dir(&repo).expect("repo");
    std::fs::write(repo.join("f"), "repo\n").expect("repo file");
    let layer = sandbox.import_layer(&repo).await.expect("repo layer");
    let ws = sandbox
        .workspace_in(vec![layer], image_root, Some(QUOTA_MIB))
        .expect("workspace");
    // Twice the quota, in the repository and in the work dir (`$HOME`); `ls -s` gives KiB used.
    let r = sh(
        &ws,
        "dd if=/dev/zero of=big bs=1M count=16 2>/dev/null; echo repo=$?; \
         dd if=/dev/zero of=$HOME/big bs=1M count=16 2>/dev/null; echo home=$?; \
         ls -s big $HOME/big"
            .into(),
    )
    .await;
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(
        lines.len() == 4 && lines[0] != "repo=0" && lines[1] != "home=0",
        "writes past the quota succeeded: {r:?}"
    );
    for line in &lines[2..] {
        let kib: u64 = line
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("ls -s: {r:?}"));
        assert!(kib <= QUOTA_MIB << 10, "{line}: more than the quota: {r:?}");
    }
    let r = sh(
        &ws,
        "rm big && dd if=/dev/zero of=small bs=1M count=2 2>/dev/null && echo again".into(),
    )
    .await;
    assert_eq!(r.stdout, "again\n", "{r:?}");
    drop(ws);
    drop(sandbox);
    let _ = std::fs::remove_dir_all(root);
}

/// A run in an image root has the image config's environment (its `PATH`, where an image's tools
/// are), except what the sandbox decides (`HOME`, `TMPDIR`); a malformed `Env` fails the import.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_have_the_images_environment() {
    let (sandbox, root) = sandbox("env");
    let t = tempfile::tempdir().expect("tempdir");
    let layout = t.path().join("layout");
    let env = serde_json::json!(["PATH=/bin:/opt/tool/bin", "FOO=from-image", "HOME=/root"]);
    oci::write_layout_with_env(&layout, &[(oci::TAR, oci::busybox_layer().bytes())], env);
    let store = LayerStore::open(t.path().join("store")).expect("store");
    let image = store.import(&layout).expect("import");
    let image_root = sandbox.image_root(&image).expect("image root");
    let repo = t.path().join("repo");
    std::fs::create_dir(&repo).expect("repo");
    let layer = sandbox.import_layer(&repo).await.expect("repo layer");
    let ws = sandbox
        .workspace_in(vec![layer], image_root, None)
        .expect("workspace");
    let r = sh(&ws, "echo \"$PATH|$FOO|$HOME|$TMPDIR\"".into()).await;
    assert_eq!(
        r.stdout, "/bin:/opt/tool/bin|from-image|/codegym|/tmp\n",
        "{r:?}"
    );
    for bad in [
        serde_json::json!(["=x"]),
        serde_json::json!(["A B=1"]),
        serde_json::json!([3]),
        serde_json::json!("PATH=/bin"),
    ] {
        let layout = t.path().join("bad");
        let _ = std::fs::remove_dir_all(&layout);
        oci::write_layout_with_env(
            &layout,
            &[(oci::TAR, oci::busybox_layer().bytes())],
            bad.clone(),
        );
        let err = store.import(&layout).expect_err("a malformed Env");
        assert!(err.to_string().contains("config.Env"), "{bad}: {err}");
    }
    drop(ws);
    drop(sandbox);
    let _ = std::fs::remove_dir_all(root);
}
