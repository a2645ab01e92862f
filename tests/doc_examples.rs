//! Every example in README.md and `docs/*.md` runs, and a block that is neither run nor marked as
//! not runnable fails the test (the markers are described in `docs/README.md`).
//!
//! The examples run as a reader would run them: `sh` blocks with `bash -e` and the `codegym`
//! binary under test first on `PATH`, `python` blocks in the project's venv (`.venv`, which
//! `tests/all.sh` makes; `CODEGYM_DOC_PYTHON` names another interpreter), against two real
//! `codegym serve` processes standing in for the servers on ports 50051 and 50052 and the fake
//! OpenAI-compatible server (`fake-llm`) standing in for the model endpoint (no network, no key).
//! Each file's blocks run in order in one scratch directory holding the small files the examples
//! name (`tests/doc_examples/` and [`LINKED`]), so a block may use what an earlier one wrote.
//!
//! What a test machine lacks (llama-server and a GGUF model, an OTLP collector, PyPI for AutoCoder's
//! pytest) is only checked for subcommands and flags (`flags-only`): the tests named in each
//! marker's reason run those for real (`tests/real_model.rs` is the local-model quick start).

#[path = "support/codegym_bin.rs"]
mod codegym_bin;
#[path = "support/doc_blocks.rs"]
mod doc_blocks;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use codegym_bin::{BIN, Serve, command, finish};
use doc_blocks::{Block, Marker, blocks, doc_files, repo_root};
use fake_llm::{FakeLlm, FakeScript, Reply, Rule};

/// Files the examples name that live elsewhere in the repository: (name in the scratch dir, path).
const LINKED: &[(&str, &str)] = &[
    ("env-coding", "env-coding"),
    ("tests", "tests"),
    (
        "tasks.jsonl",
        "env-coding/tasks/fixtures/humaneval_mini.jsonl",
    ),
    ("my_tasks.jsonl", "env-coding/tasks/examples.jsonl"),
];

/// What the test does with a block.
#[derive(Debug, PartialEq)]
enum Plan {
    Shell,
    Python,
    ParseJson,
    Serve,
    Config,
    Task,
    /// Compare with what the previous block printed.
    Output,
    FlagsOnly,
    Skip,
}

/// The plan for `block`, or why it has none.
fn plan(block: &Block) -> Result<Plan, String> {
    // Shell blocks may say `sh`, `bash` or `shell`: one meaning, three common spellings.
    let lang = match block.lang.as_str() {
        "bash" | "shell" => "sh",
        other => other,
    };
    match (&block.marker, lang) {
        (Marker::NotRun(_), _) => Ok(Plan::Skip),
        (Marker::FlagsOnly(_), "sh") => Ok(Plan::FlagsOnly),
        (Marker::Serve, "sh") => Ok(Plan::Serve),
        (Marker::Config, "json") => Ok(Plan::Config),
        (Marker::Task, "json") => Ok(Plan::Task),
        (Marker::Output, "text") => Ok(Plan::Output),
        (Marker::None, "sh") => Ok(Plan::Shell),
        (Marker::None, "python") => Ok(Plan::Python),
        (Marker::None, "json") => Ok(Plan::ParseJson),
        (Marker::Unknown(m), _) => Err(format!("unknown marker {m:?} (see docs/README.md)")),
        (marker, lang) => Err(format!(
            "a {lang:?} block with marker {marker:?} is neither run nor marked `not-run (WHY)`"
        )),
    }
}

fn all_blocks() -> Vec<Block> {
    doc_files()
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(repo_root().join(file))
                .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
            blocks(file, &text)
        })
        .collect()
}

#[test]
fn every_block_is_run_or_marked_not_runnable() {
    let blocks = all_blocks();
    assert!(blocks.len() > 20, "found only {} blocks", blocks.len());
    let problems: Vec<String> = blocks
        .iter()
        .filter_map(|b| plan(b).err().map(|e| format!("{}: {e}", b.place())))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The live stand-ins the examples talk to.
struct World {
    model: FakeLlm,
    /// The servers on "port 50051" and "port 50052".
    servers: [Serve; 2],
    path: String,
    python: PathBuf,
}

impl World {
    /// The example's text with the documented addresses replaced by the live ones.
    fn localize(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (port, server) in [("50051", &self.servers[0]), ("50052", &self.servers[1])] {
            for host in ["127.0.0.1", "localhost", "0.0.0.0"] {
                out = out.replace(&format!("{host}:{port}"), &server.addr);
            }
        }
        // A rollout's own metrics listener: any free port, not the documented one.
        replace_flag_value(&out, "--metrics-addr", "127.0.0.1:0")
    }
}

/// `text` with the value after every `flag ` replaced by `value`.
fn replace_flag_value(text: &str, flag: &str, value: &str) -> String {
    let needle = format!("{flag} ");
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(&needle) {
        let start = at + needle.len();
        out.push_str(&rest[..start]);
        out.push_str(value);
        let after = &rest[start..];
        rest = &after[after.find(char::is_whitespace).unwrap_or(after.len())..];
    }
    out.push_str(rest);
    out
}

/// The fake model: a correct answer for the task the quick starts use, a wrong program otherwise.
fn model_script() -> FakeScript {
    FakeScript {
        rules: vec![Rule {
            prompt_contains: Some("sum of the squares".into()),
            turn: None,
            reply: Reply::Code("print(f\"Result: {sum(i * i for i in range(1, 101))}\")".into()),
        }],
        default_reply: Reply::Code("print('not yet')".into()),
        support_token_ids: true,
        support_logprobs: true,
        ..FakeScript::default()
    }
}

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("CODEGYM_DOC_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = repo_root().join(".venv/bin/python");
    assert!(
        venv.exists(),
        "the Python examples run in {} (tests/all.sh makes it; or set CODEGYM_DOC_PYTHON to an \
         interpreter with the codegym package)",
        venv.display()
    );
    venv
}

/// A scratch directory with the example files.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("scratch dir");
    copy_dir(&repo_root().join("tests/doc_examples"), dir.path());
    for (name, target) in LINKED {
        std::os::unix::fs::symlink(repo_root().join(target), dir.path().join(name))
            .expect("link an example file");
    }
    std::fs::create_dir(dir.path().join("datasets")).expect("datasets/");
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("read tests/doc_examples") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            std::fs::create_dir_all(&target).expect("mkdir");
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy an example file");
        }
    }
}

/// Runs `program args` in `dir` with the examples' environment; panics with `place` and the
/// output unless it exits 0.
#[allow(clippy::disallowed_methods)] // the test runs the documented commands
async fn run_ok(world: &World, place: &str, dir: &Path, program: &Path, args: &[&str]) -> String {
    let mut cmd = command(program.to_str().expect("utf-8 path"), args);
    cmd.current_dir(dir)
        .env("PATH", &world.path)
        .env("CODEGYM_BIN", BIN)
        .env("OPENAI_BASE_URL", world.model.base_url())
        .env("OPENAI_API_KEY", "doc-examples")
        .env_remove("HF_TOKEN")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    let (code, stdout, stderr) = finish(cmd.spawn().expect("spawn an example")).await;
    assert_eq!(
        code, 0,
        "{place}: the example failed\nstdout: {stdout}\nstderr: {stderr}"
    );
    stdout
}

/// Starts the block's server (the documented addresses replaced by free ports, a drain shortened
/// to 1 s), waits for `listening on`, stops it with SIGTERM and expects a clean exit.
async fn serve(place: &str, dir: &Path, args: Vec<String>) {
    let mut args = args;
    for i in 1..args.len() {
        match args[i - 1].as_str() {
            "--addr" | "--http" | "--metrics-addr" => args[i] = "127.0.0.1:0".into(),
            "--drain-secs" => args[i] = "1".into(),
            _ => {}
        }
    }
    let server = Serve::start_in(dir, &args).await;
    server.signal(nix::sys::signal::Signal::SIGTERM);
    let (code, _, stderr) = finish(server.child).await;
    assert_eq!(code, 0, "{place}: serve {args:?} stopped badly: {stderr}");
}

/// The logical command lines of a shell block: continuations joined, comments dropped.
fn command_lines(body: &str) -> Vec<Vec<String>> {
    let joined = body.replace("\\\n", " ");
    joined
        .lines()
        .map(|l| l.split(" #").next().unwrap_or("").trim())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// `codegym ARGS` or `cargo run --release -- ARGS`: ARGS.
fn codegym_args(words: &[String]) -> Option<&[String]> {
    let heads: Vec<&str> = words.iter().take(4).map(String::as_str).collect();
    match heads.as_slice() {
        ["codegym", ..] => Some(&words[1..]),
        ["cargo", "run", "--release", "--"] => Some(&words[4..]),
        _ => None,
    }
}

/// Every `codegym` command of the block names real subcommands and flags its `--help` lists.
async fn check_flags(world: &World, place: &str, dir: &Path, body: &str) {
    let mut checked = 0;
    for words in command_lines(body) {
        let Some(args) = codegym_args(&words) else {
            continue;
        };
        let subcommands: Vec<&str> = args
            .iter()
            .take_while(|a| !a.starts_with('-'))
            .take(3)
            .map(String::as_str)
            .filter(|a| a.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
            .collect();
        let mut help_args = subcommands.clone();
        help_args.push("--help");
        let help = run_ok(world, place, dir, Path::new(BIN), &help_args).await;
        for flag in args.iter().filter(|a| a.starts_with("--")) {
            let flag = flag.split('=').next().unwrap_or(flag);
            assert!(
                help.split(|c: char| c.is_whitespace() || c == ',' || c == '[')
                    .any(|w| w == flag),
                "{place}: `codegym {}` has no flag {flag}",
                subcommands.join(" ")
            );
        }
        checked += 1;
    }
    assert!(
        checked > 0,
        "{place}: a flags-only block without a codegym command"
    );
}

/// Runs `block` in `dir`; what it printed, for an `output` block after it.
async fn run_block(world: &World, dir: &Path, block: &Block, printed: &str) -> String {
    let place = block.place();
    let plan = plan(block).unwrap_or_else(|e| panic!("{place}: {e}"));
    match plan {
        Plan::Skip => {}
        Plan::Shell => {
            let script = world.localize(&block.body);
            let args = ["-e", "-o", "pipefail", "-c", &script];
            return run_ok(world, &place, dir, Path::new("bash"), &args).await;
        }
        Plan::Python => {
            let program = dir.join("doc_example.py");
            std::fs::write(&program, world.localize(&block.body)).expect("write the example");
            let path = program.to_str().expect("utf-8 path");
            return run_ok(world, &place, dir, &world.python, &[path]).await;
        }
        Plan::Output => {
            let lines: Vec<&str> = printed.lines().map(str::trim_end).collect();
            for want in block.body.lines().filter(|l| !l.trim().is_empty()) {
                assert!(
                    lines.contains(&want.trim_end()),
                    "{place}: the block before did not print {want:?}; it printed:\n{printed}"
                );
            }
        }
        Plan::ParseJson => {
            serde_json::from_str::<serde_json::Value>(&block.body)
                .unwrap_or_else(|e| panic!("{place}: not JSON: {e}"));
        }
        Plan::Task => {
            let task: serde_json::Value = serde_json::from_str(&block.body)
                .unwrap_or_else(|e| panic!("{place}: not JSON: {e}"));
            std::fs::write(dir.join("doc_task.jsonl"), format!("{task}\n"))
                .expect("write the task");
            run_ok(
                world,
                &place,
                dir,
                Path::new(BIN),
                &["tasks", "list", "doc_task.jsonl"],
            )
            .await;
        }
        Plan::Config => {
            std::fs::write(dir.join("doc_config.json"), &block.body).expect("write the config");
            let args = ["--config", "doc_config.json", "--addr", "127.0.0.1:0"];
            serve(&place, dir, args.map(String::from).to_vec()).await;
        }
        Plan::Serve => {
            let lines = command_lines(&block.body);
            let [words] = lines.as_slice() else {
                panic!("{place}: a serve block holds one command");
            };
            let args = codegym_args(words)
                .filter(|a| a.first().is_some_and(|s| s == "serve"))
                .unwrap_or_else(|| panic!("{place}: a serve block runs `codegym serve`"));
            assert!(
                !block.body.contains(['"', '\'', '$']),
                "{place}: a serve block is plain words (no quoting or expansion)"
            );
            serve(&place, dir, args[1..].to_vec()).await;
        }
        Plan::FlagsOnly => check_flags(world, &place, dir, &block.body).await,
    }
    String::new()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_runs() {
    let bin_dir = Path::new(BIN)
        .parent()
        .expect("bin dir")
        .display()
        .to_string();
    let world = World {
        model: FakeLlm::start(model_script())
            .await
            .expect("fake model server"),
        servers: [
            Serve::start(["--addr", "127.0.0.1:0"]).await,
            Serve::start(["--addr", "127.0.0.1:0"]).await,
        ],
        path: format!("{bin_dir}:{}", std::env::var("PATH").unwrap_or_default()),
        python: python(),
    };
    let mut by_file: BTreeMap<PathBuf, Vec<Block>> = BTreeMap::new();
    for block in all_blocks() {
        by_file.entry(block.file.clone()).or_default().push(block);
    }
    for (file, blocks) in &by_file {
        let dir = scratch();
        let mut printed = String::new();
        for block in blocks {
            let started = std::time::Instant::now();
            printed = run_block(&world, dir.path(), block, &printed).await;
            eprintln!("{} ok in {:?}", block.place(), started.elapsed());
        }
        eprintln!("{}: {} blocks", file.display(), blocks.len());
    }
}
