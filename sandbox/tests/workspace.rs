//! Copy-on-write workspaces (`workspace.rs`): a repository imported once as a read-only layer, one
//! workspace per episode over it. Many episodes at once, each attacking the others and the layer
//! from inside its runs: the layer stays unchanged, an episode's changes persist from run to run
//! and are its own, and dropping a workspace removes its upper dir.

mod support;

use std::path::PathBuf;
use std::sync::Arc;

use codegym_sandbox::Workspace;
use support::workspace::{HOST_SECRET, repository, sandbox, sh};

const EPISODES: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn episodes_change_their_own_copy_and_nothing_else() {
    let (sandbox, root) = sandbox("cow");
    let layer = sandbox
        .import_layer(&repository(&root))
        .await
        .expect("import");
    let lower_a = layer.path().join("tree/a.txt");
    let workspaces: Vec<Arc<Workspace>> = (0..EPISODES)
        .map(|_| {
            Arc::new(
                sandbox
                    .workspace(vec![layer.clone()], None)
                    .expect("workspace"),
            )
        })
        .collect();
    let uppers: Vec<PathBuf> = workspaces.iter().map(|w| w.upper()).collect();
    let mut tasks = Vec::new();
    for (i, ws) in workspaces.iter().enumerate() {
        let ws = ws.clone();
        let lower_a = lower_a.clone();
        let neighbour = uppers[(i + 1) % EPISODES].clone();
        tasks.push(tokio::spawn(async move {
            // Step 1: the prepared state, then changes (an edit, a deletion, a new file) and
            // attacks on the layer and a neighbour's upper dir by their host paths.
            let first = sh(
                &ws,
                format!(
                    "cat a.txt; echo episode-{i} > a.txt; rm sub/b.txt; echo new-{i} > n.txt; \
                     echo evil > {lower} && echo LOWER-WRITTEN; \
                     cat {lower} && echo LOWER-READ; \
                     echo evil > {nb}/n.txt && echo NEIGHBOUR-WRITTEN; \
                     ls {nb} && echo NEIGHBOUR-LISTED; \
                     ln -s {nb} escape; ls escape/ && echo SYMLINK-FOLLOWED; \
                     mount -t tmpfs none sub 2>/dev/null && echo REMOUNTED; \
                     echo {i} >> /proc/self/cwd/../../ws-probe && echo ESCAPED-CWD; true",
                    lower = lower_a.display(),
                    nb = neighbour.display(),
                ),
            )
            .await;
            // Step 2: the changes of step 1 are still there, and only this episode's.
            let second = sh(&ws, "cat a.txt n.txt; ls sub; ls; cat link".into()).await;
            (i, first, second)
        }));
    }
    for t in tasks {
        let (i, first, second) = t.await.expect("episode");
        let (out, err) = (first.stdout.as_str(), first.stderr.as_str());
        assert!(out.starts_with("base\n"), "episode {i} saw {out:?} / {err}");
        for marker in [
            "LOWER-WRITTEN",
            "LOWER-READ",
            "NEIGHBOUR-WRITTEN",
            "NEIGHBOUR-LISTED",
            "SYMLINK-FOLLOWED",
            "REMOUNTED",
            "ESCAPED-CWD",
        ] {
            assert!(!out.contains(marker), "episode {i}: {marker}\n{out}\n{err}");
        }
        assert!(
            !second.stdout.contains(HOST_SECRET),
            "episode {i} read the host file behind the repository's link"
        );
        assert_eq!(
            second.stdout.as_str(),
            format!("episode-{i}\nnew-{i}\na.txt\nescape\nlink\nn.txt\nsub\n"),
            "episode {i}: {}",
            second.stderr.as_str()
        );
    }
    assert_eq!(
        std::fs::read_to_string(&lower_a).expect("lower"),
        "base\n",
        "the layer changed"
    );
    assert!(layer.path().join("tree/sub/b.txt").exists());
    for (i, upper) in uppers.iter().enumerate() {
        assert_eq!(
            std::fs::read_to_string(upper.join("n.txt")).expect("upper"),
            format!("new-{i}\n")
        );
    }
    // A later episode over the same layer starts from the prepared state again.
    let fresh = sandbox
        .workspace(vec![layer.clone()], None)
        .expect("workspace");
    let out = sh(&fresh, "cat a.txt sub/b.txt; ls".into()).await;
    assert_eq!(out.stdout.as_str(), "base\nbee\na.txt\nlink\nsub\n");
    // The link was imported as a link (never followed on the host), dangling in the run.
    assert!(layer.path().join("tree/link").is_symlink());
    drop(workspaces);
    for upper in &uppers {
        assert!(
            !upper.exists(),
            "{} survived its workspace",
            upper.display()
        );
    }
    drop(fresh);
    let layer_dir = layer.path().to_path_buf();
    drop(layer);
    assert!(!layer_dir.exists(), "the layer survived its last holder");
    drop(sandbox);
    let _ = std::fs::remove_dir_all(&root);
}

/// A setup's result read back through a new workspace: its deletions (whiteouts), a dir it
/// replaced (opaque: nothing of the old one shows through), its links and its modes. The setup's
/// upper dir lies on its quota's tmpfs, so freezing copies it out to another file system.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_setup_is_a_layer_with_its_deletions() {
    let (sandbox, root) = sandbox("freeze");
    let base = sandbox
        .import_layer(&repository(&root))
        .await
        .expect("import");
    let setup = sandbox.workspace(vec![base.clone()], None).expect("setup");
    let out = sh(
        &setup,
        "rm a.txt && rm -r sub && mkdir sub && echo fresh > sub/c.txt && \
         echo built > built.txt && chmod 600 built.txt && ln -s built.txt blink && \
         printf '#!/bin/sh\necho ran\n' > run.sh && chmod 755 run.sh"
            .into(),
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{}", out.stderr.as_str());
    let prepared = setup.freeze().await.expect("freeze");
    // Another uid than the setup's edits what the setup wrote (600 before sealing).
    let ws = sandbox
        .workspace(vec![base.clone(), prepared.clone()], None)
        .expect("episode");
    let out = sh(
        &ws,
        "ls; ls sub; ./run.sh; readlink blink; cat blink; echo more >> built.txt && cat built.txt"
            .into(),
    )
    .await;
    assert_eq!(
        out.stdout.as_str(),
        "blink\nbuilt.txt\nlink\nrun.sh\nsub\nc.txt\nran\nbuilt.txt\nbuilt\nbuilt\nmore\n",
        "{}",
        out.stderr.as_str()
    );
    drop((ws, prepared, base, sandbox));
    let _ = std::fs::remove_dir_all(&root);
}
