//! `import_harbor` (`codegym tasks import harbor`) on the Harbor task dirs of
//! `tests/doc_examples/harbor/`, each image built here as its `environment/Dockerfile` says (a
//! busybox + host git and bash rootfs, the dir's files at `/app`, `WORKDIR /app`): the written set
//! is loaded back and every task checks (reference resolves, empty does not), and its audit
//! finds what the importer declared known weak and nothing else; a task whose
//! solution does not solve it fails the import naming the dir, or is skipped and reported; bad
//! inputs (no instruction.md, a bad task.toml, no image for a task) are errors naming the dir or
//! file.

use std::path::{Path, PathBuf};

use env_coding::repo::harbor::{HarborImages, HarborImport, import_harbor};
use env_coding::repo::{audit_repo_tasks, check_repo_tasks};
use env_coding::tasks::RepoTaskSet;

#[path = "support/image.rs"]
mod image_support;
#[path = "../../sandbox/tests/support/podman.rs"]
mod podman;
#[path = "support/repo.rs"]
mod repo_support;

const UIDS: u32 = 3_150_000;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/doc_examples/harbor")
}

fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("codegym-harbor-import-")
        .tempdir()
        .expect("tmp")
}

/// `IMAGES/<name>.tar` for the task dir `task` (`tag` keeps podman's tags of tests apart): its `environment/` files (not the Dockerfile) at
/// `/app`, `WORKDIR /app`.
fn build_image(task: &Path, images: &Path, tag: &str) {
    let name = task.file_name().expect("name").to_string_lossy();
    let mut extra = vec![("app/".to_string(), Vec::new())];
    for entry in std::fs::read_dir(task.join("environment")).expect("environment") {
        let entry = entry.expect("entry");
        let file = entry.file_name().to_string_lossy().into_owned();
        if file != "Dockerfile" {
            extra.push((
                format!("app/{file}"),
                std::fs::read(entry.path()).expect("file"),
            ));
        }
    }
    std::fs::create_dir_all(images).expect("images");
    let rootfs = images.join(format!("{name}.rootfs.tar"));
    image_support::rootfs_tar_with(&rootfs, &["/bin/bash"], &extra);
    podman::save_with(
        &rootfs,
        &images.join(format!("{name}.tar")),
        &format!("harbor-import-{tag}-{name}"),
        "oci-archive",
        &["WORKDIR=/app"],
    );
    std::fs::remove_file(rootfs).expect("rootfs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_task_dirs_import_and_check() {
    let dir = tmp();
    let images = dir.path().join("images");
    let tasks: Vec<PathBuf> = ["fix-calc", "write-greeting"]
        .iter()
        .map(|t| examples().join(t))
        .collect();
    for task in &tasks {
        build_image(task, &images, "examples");
    }
    let scorer = repo_support::scorer(UIDS, 0);
    let import = HarborImport {
        task_dirs: tasks,
        out: dir.path().join("out"),
        images: HarborImages::PerTask(images),
        skip_unresolved: false,
    };
    let done = import_harbor(&scorer, &import).await.expect("import");
    assert_eq!(done.written, ["fix-calc", "write-greeting"], "{done:?}");
    let set = RepoTaskSet::load(&done.path).expect("written set");
    let calc = &set.tasks[0];
    assert_eq!(calc.work_dir.as_deref(), Some("/app"));
    assert_eq!(
        calc.reward_file.as_deref(),
        Some("/logs/verifier/reward.txt")
    );
    assert_eq!(calc.test_command, "bash /tests/test.sh");
    assert_eq!(calc.limits.test_wall_ms, 30_000);
    assert_eq!(calc.limits.memory_mb, 512);
    assert!(calc.problem_statement.contains("/app/calc.sh"), "{calc:?}");
    assert!(
        calc.patch.contains("+add() { echo $(( $1 + $2 )); }"),
        "{}",
        calc.patch
    );
    assert!(
        set.tasks[1].patch.contains("+Hello, world!"),
        "{}",
        set.tasks[1].patch
    );
    for check in check_repo_tasks(&scorer, &set).await {
        assert!(check.passed, "{check:?}");
    }
    // The audit: a planted reward or test script gets nothing; code the tests source can write
    // the reward and end the run, which fix-calc (its tests source calc.sh) declares known weak.
    let audit = audit_repo_tasks(&scorer, &set).await;
    let verdicts: Vec<(&str, &str, bool)> = audit
        .results
        .iter()
        .map(|r| (r.task_id.as_str(), r.attack.as_str(), r.resolved))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("fix-calc", "reward-file-plant", false),
            ("fix-calc", "reward-file-forge", true),
            ("write-greeting", "reward-file-plant", false),
            ("write-greeting", "reward-file-forge", false),
        ],
        "{audit:#?}"
    );
    assert!(!audit.failed(), "{audit:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_solution_that_does_not_solve_fails_the_import_or_is_skipped() {
    let dir = tmp();
    let task = dir.path().join("tasks/fix-calc");
    copy_dir(&examples().join("fix-calc"), &task);
    std::fs::write(
        task.join("solution/solve.sh"),
        "echo '# no fix' >> /app/calc.sh\n",
    )
    .expect("solve");
    build_image(&task, &dir.path().join("images"), "unsolved");
    let scorer = repo_support::scorer(UIDS, 1);
    let mut import = HarborImport {
        task_dirs: vec![task.clone()],
        out: dir.path().join("out"),
        images: HarborImages::PerTask(dir.path().join("images")),
        skip_unresolved: false,
    };
    let err = import_harbor(&scorer, &import)
        .await
        .expect_err("unresolved")
        .to_string();
    assert!(
        err.starts_with(&task.display().to_string())
            && err.contains("the reference patch (solution/solve.sh's diff) does not resolve it"),
        "{err}"
    );
    import.skip_unresolved = true;
    let done = import_harbor(&scorer, &import)
        .await
        .expect("skipping import");
    assert!(done.written.is_empty(), "{done:?}");
    assert_eq!(done.skipped.len(), 1, "{done:?}");
    assert_eq!(done.skipped[0].0, "fix-calc");
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("dir") {
        let entry = entry.expect("entry");
        let dst = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &dst);
        } else {
            std::fs::create_dir_all(to).expect("mkdir");
            std::fs::copy(entry.path(), dst).expect("copy");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_task_dirs_are_errors_naming_the_dir_or_file() {
    let dir = tmp();
    let images = dir.path().join("images");
    std::fs::create_dir_all(&images).expect("images");
    let scorer = repo_support::scorer(UIDS, 2);
    let case = |name: &str, edit: &dyn Fn(&Path)| {
        let task = dir.path().join("tasks").join(name);
        copy_dir(&examples().join("fix-calc"), &task);
        std::fs::write(images.join(format!("{name}.tar")), b"").expect("image");
        edit(&task);
        task
    };
    let no_instruction = case("no-instruction", &|t| {
        std::fs::remove_file(t.join("instruction.md")).expect("rm")
    });
    let bad_toml = case("bad-toml", &|t| {
        std::fs::write(
            t.join("task.toml"),
            "[metadata]\n\n[verifier]\ntimeout_sec = \"soon\"\n",
        )
        .expect("toml")
    });
    let no_image = dir.path().join("tasks/no-image");
    copy_dir(&examples().join("fix-calc"), &no_image);
    let expected = [
        (
            no_instruction.clone(),
            format!("{}: ", no_instruction.join("instruction.md").display()),
        ),
        (
            bad_toml.clone(),
            format!("{}:4: invalid type", bad_toml.join("task.toml").display()),
        ),
        (
            no_image.clone(),
            format!(
                "no image: {} is not a file",
                images.join("no-image.tar").display()
            ),
        ),
    ];
    for (task, message) in expected {
        let import = HarborImport {
            task_dirs: vec![task.clone()],
            out: dir.path().join("out"),
            images: HarborImages::PerTask(images.clone()),
            skip_unresolved: true,
        };
        let err = import_harbor(&scorer, &import)
            .await
            .expect_err("bad")
            .to_string();
        assert!(
            err.starts_with(&format!("{}: ", task.display())) && err.contains(&message),
            "{err}\nwanted: {message}"
        );
    }
}
