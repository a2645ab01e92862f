//! Prepared states persisted in the sandbox's store (`coding.prepared`): a task is prepared once
//! per store and reused by a later scorer (a restarted process), any change to an input prepares
//! anew, concurrent preparations end with one entry, a broken entry is prepared anew, a full disk
//! fails the preparation, and eviction never takes a state in use. Real sandbox, real git and
//! pytest. Each test has a store of its own; every prepare is a new `Scorer` (a new sandbox), as a
//! new process would make.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use codegym_sandbox::{PreparedConfig, PreparedStore};
use env_coding::Scorer;
use env_coding::repo::{Prepared, RepoScorer};
use env_coding::tasks::{RepoTask, RepoTaskSet};

#[path = "support/repo.rs"]
mod repo_support;

/// The setup every test's task runs: a timestamp in the committed state, which only a setup run
/// can change.
const STAMP: &str = "date +%s%N > .codegym-stamp";

fn scorer(n: u32, store: &Path, max_bytes: u64) -> RepoScorer {
    let mut config = repo_support::config(3_500_000, n);
    config.prepared = PreparedConfig {
        dir: store.to_path_buf(),
        max_bytes,
        ..PreparedConfig::default()
    };
    RepoScorer::of(&Scorer::new(&config).unwrap_or_else(|e| panic!("scorer: {e}")))
}

fn task() -> RepoTask {
    let set = RepoTaskSet::load(&repo_support::shipped()).unwrap_or_else(|e| panic!("{e}"));
    let mut task = set.tasks[0].clone();
    task.setup.push(STAMP.into());
    task
}

async fn prepare(repo: &RepoScorer, task: &RepoTask) -> Arc<Prepared> {
    repo.prepare(Arc::new(task.clone()))
        .await
        .unwrap_or_else(|e| panic!("prepare: {e}"))
}

/// The setup's timestamp in the prepared state.
async fn stamp(repo: &RepoScorer, prepared: &Prepared) -> String {
    let ws = repo.episode(prepared).expect("episode");
    let r = repo
        .run(&ws, prepared, "cat .codegym-stamp", None)
        .await
        .expect("run");
    assert_eq!(r.exit_code, Some(0), "{}", r.stderr);
    r.stdout.trim().to_string()
}

fn entries(store: &Path) -> Vec<String> {
    let mut keys: Vec<String> = std::fs::read_dir(store.join("states"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    keys.sort();
    keys
}

/// A way to break a stored entry (given its dir).
type Break = fn(&Path);

fn store_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("codegym-prepared-test")
        .tempdir_in("/var/tmp")
        .expect("tempdir")
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir").flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().expect("type").is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_scorer_reuses_the_stored_state_and_scores_alike() {
    let store = store_dir();
    let task = task();
    let first = scorer(0, store.path(), 0);
    let cold = prepare(&first, &task).await;
    let cold_stamp = stamp(&first, &cold).await;
    let cold_verdict = first.score(&cold, &task.patch).await.expect("score");
    drop((cold, first));

    let second = scorer(1, store.path(), 0);
    let warm = prepare(&second, &task).await;
    assert_eq!(
        stamp(&second, &warm).await,
        cold_stamp,
        "the second prepare ran the setup again"
    );
    let warm_verdict = second.score(&warm, &task.patch).await.expect("score");
    assert!(cold_verdict.resolved && warm_verdict.resolved);
    assert_eq!(cold_verdict.fail_to_pass, warm_verdict.fail_to_pass);
    assert_eq!(cold_verdict.pass_to_pass, warm_verdict.pass_to_pass);
    assert_eq!(entries(store.path()).len(), 1);
    // The entry outlives every layer of the process that made it and the one that used it.
    drop((warm, second));
    assert_eq!(entries(store.path()).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_input_prepares_anew() {
    let store = store_dir();
    let base = task();
    let repo = scorer(2, store.path(), 0);
    let original = prepare(&repo, &base).await;
    let original_stamp = stamp(&repo, &original).await;

    let copy = store.path().join("repo-copy");
    copy_tree(&base.repository, &copy);
    let readme = std::fs::read_dir(&copy)
        .expect("copy")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_file())
        .expect("a file in the repository");
    let mut bytes = std::fs::read(&readme).expect("read");
    bytes.push(b'\n');
    std::fs::write(&readme, bytes).expect("write");

    let mut changes: Vec<(&str, RepoTask)> = Vec::new();
    let mut t = base.clone();
    t.repository = copy.clone();
    changes.push(("a byte of the repository", t));
    let mut t = base.clone();
    t.setup.push("true".into());
    changes.push(("a setup command", t));
    let mut t = base.clone();
    t.test_patch =
        Some("--- /dev/null\n+++ b/test_extra.py\n@@ -0,0 +1 @@\n+def test_x(): pass\n".into());
    changes.push(("the test patch", t));
    let mut t = base.clone();
    t.limits.setup_wall_ms += 1;
    changes.push(("the setup's limits", t));
    for (i, (what, changed)) in changes.iter().enumerate() {
        let p = prepare(&repo, changed).await;
        assert_ne!(
            stamp(&repo, &p).await,
            original_stamp,
            "{what} changed and the stored state was used"
        );
        assert_eq!(entries(store.path()).len(), i + 2, "{what}");
    }
    // The unchanged task still finds its own state.
    let again = prepare(&repo, &base).await;
    assert_eq!(stamp(&repo, &again).await, original_stamp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_prepares_store_one_state() {
    let store = store_dir();
    let task = task();
    let (a, b) = (scorer(3, store.path(), 0), scorer(4, store.path(), 0));
    let (pa, pb) = tokio::join!(
        a.prepare(Arc::new(task.clone())),
        b.prepare(Arc::new(task.clone()))
    );
    let (pa, pb) = (pa.expect("a"), pb.expect("b"));
    assert_eq!(
        pa.base_commit, pb.base_commit,
        "both use the one stored state"
    );
    assert_eq!(stamp(&a, &pa).await, stamp(&b, &pb).await);
    assert_eq!(entries(store.path()).len(), 1);
    let tmp: Vec<_> = std::fs::read_dir(store.path().join("tmp"))
        .expect("tmp")
        .collect();
    assert!(tmp.is_empty(), "left in tmp/: {tmp:?}");
    for (repo, p) in [(&a, &pa), (&b, &pb)] {
        let v = repo.score(p, &task.patch).await.expect("score");
        assert!(v.resolved, "{:?}", v.reason);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_entry_is_prepared_anew() {
    let store = store_dir();
    let task = task();
    let first = scorer(5, store.path(), 0);
    let p = prepare(&first, &task).await;
    let mut last = stamp(&first, &p).await;
    drop((p, first));
    let entry = store.path().join("states").join(&entries(store.path())[0]);
    let breaks: [(&str, Break); 3] = [
        ("a layer dir deleted", |e| {
            std::fs::remove_dir_all(e.join("layers/1")).expect("rm")
        }),
        ("the state file truncated", |e| {
            let state = e.join("state");
            let text = std::fs::read_to_string(&state).expect("state");
            std::fs::write(&state, &text[..text.len() / 2]).expect("truncate")
        }),
        ("the entry's mode opened", |e| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(e, std::fs::Permissions::from_mode(0o755)).expect("chmod")
        }),
    ];
    for (i, (what, break_it)) in breaks.iter().enumerate() {
        break_it(&entry);
        let repo = scorer(6 + i as u32, store.path(), 0);
        let p = prepare(&repo, &task).await;
        let now = stamp(&repo, &p).await;
        assert_ne!(now, last, "{what}: the broken entry was used");
        let v = repo.score(&p, &task.patch).await.expect("score");
        assert!(v.resolved, "{what}: {:?}", v.reason);
        assert_eq!(entries(store.path()).len(), 1, "{what}");
        last = now;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_and_eviction_never_take_a_state_in_use() {
    let store = store_dir();
    let (a, mut b, mut c) = (task(), task(), task());
    b.setup.push("echo b > b".into());
    c.setup.push("echo c > c".into());
    // A cap of one byte: every store evicts whatever it may.
    let repo = scorer(9, store.path(), 1);
    let held = prepare(&repo, &a).await;
    let held_stamp = stamp(&repo, &held).await;
    let pb = prepare(&repo, &b).await;
    assert_eq!(entries(store.path()).len(), 2, "a in use, b just stored");
    drop(pb);
    let _pc = prepare(&repo, &c).await;
    assert_eq!(entries(store.path()).len(), 2, "b evicted, a in use");
    assert_eq!(stamp(&repo, &held).await, held_stamp, "a's layers intact");

    // `tasks prune --keep` finds a task's entry by the key `prepare` stored it under.
    let a_key = repo
        .key_of(&Arc::new(a.clone()))
        .await
        .expect("key")
        .expect("a store");
    assert!(entries(store.path()).contains(&a_key), "{a_key} not stored");
    let s = PreparedStore::new(store.path(), 0);
    let report = s.prune(|_| false).expect("prune");
    assert_eq!((report.removed, report.in_use), (0, 2), "{report:?}");
    drop(_pc);
    let report = s.prune(|_| false).expect("prune");
    assert_eq!((report.removed, report.in_use), (1, 1), "{report:?}");
    assert_eq!(entries(store.path()).len(), 1);
    drop(held);
    let keep = entries(store.path())[0].clone();
    assert_eq!(keep, a_key, "the state in use is the one left");
    let report = s.prune(|k| k == keep).expect("prune");
    assert_eq!((report.removed, report.kept), (0, 1), "{report:?}");
    let report = s.prune(|_| false).expect("prune");
    assert_eq!(report.removed, 1, "{report:?}");
    assert!(entries(store.path()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_store_fails_the_preparation() {
    let store = store_dir();
    let root = store.path().join("full");
    std::fs::create_dir(&root).expect("mkdir");
    nix::mount::mount(
        Some("tmpfs"),
        &root,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=64k"),
    )
    .expect("mount a small tmpfs");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
        }
    }
    let _unmount = Unmount(root.clone());
    let repo = scorer(10, &root.join("store"), 0);
    let err = repo
        .prepare(Arc::new(task()))
        .await
        .expect_err("a store without room must fail the preparation");
    let text = err.to_string();
    assert!(
        text.contains("prepared-state store") && text.contains("No space left on device"),
        "{text}"
    );
    assert!(entries(&root.join("store")).is_empty());
    let tmp: Vec<_> = std::fs::read_dir(root.join("store/tmp"))
        .expect("tmp")
        .collect();
    assert!(tmp.is_empty(), "left in tmp/: {tmp:?}");
}

/// Every file of a tree with its bytes (links as their targets), in name order.
fn snapshot(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read_dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    paths.sort();
    for p in paths {
        let meta = std::fs::symlink_metadata(&p).expect("meta");
        if meta.is_dir() {
            out.push((p.clone(), Vec::new()));
            snapshot(&p, out);
        } else if meta.is_symlink() {
            let target = std::fs::read_link(&p).expect("link");
            out.push((p, target.as_os_str().as_encoded_bytes().to_vec()));
        } else {
            out.push((p.clone(), std::fs::read(&p).expect("read")));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_episode_never_changes_the_stored_state() {
    let store = store_dir();
    let task = task();
    let repo = scorer(11, store.path(), 0);
    let prepared = prepare(&repo, &task).await;
    let original = stamp(&repo, &prepared).await;
    let entry = store.path().join("states").join(&entries(store.path())[0]);
    let mut before = Vec::new();
    snapshot(&entry.join("layers"), &mut before);
    let ws = repo.episode(&prepared).expect("episode");
    let r = repo
        .run(
            &ws,
            &prepared,
            &format!(
                "echo forged > .codegym-stamp; rm -rf inflection; echo x > new.py; \\
                 git add -A; git commit -qm x; \\
                 if ls {0} || ls {0}/layers/1/tree; then echo SEES-STORE; fi",
                entry.display()
            ),
            None,
        )
        .await
        .expect("run");
    assert_eq!(r.exit_code, Some(0), "{}", r.stderr);
    assert!(!r.stdout.contains("SEES-STORE"), "{}", r.stdout);
    drop(ws);
    let mut after = Vec::new();
    snapshot(&entry.join("layers"), &mut after);
    assert!(before == after, "an episode changed a stored layer");
    // A later process's prepared state is the stored one, untouched.
    let later = scorer(12, store.path(), 0);
    let p = prepare(&later, &task).await;
    assert_eq!(stamp(&later, &p).await, original);
    let v = later.score(&p, &task.patch).await.expect("score");
    assert!(v.resolved, "{:?}", v.reason);
}
