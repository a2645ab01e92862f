//! Shared by the task-loader tests (`contests.rs`, `evalplus.rs`, `multipl_e.rs`): one sandbox per
//! test binary, a task file in a temp dir, and scoring a program with a task's own reward.

// Each test binary compiles this module and uses a subset of it.
#![allow(dead_code)]

use std::sync::OnceLock;

use codegym_sandbox::{Backend, Sandbox, SandboxConfig, SandboxError};
use env_coding::reward::RewardOutcome;
use env_coding::reward::run::{EvalOptions, Program, score_program};
use env_coding::tasks::{Task, TaskSet};

/// The binary's sandbox, started on first use.
pub fn sandbox() -> &'static Sandbox {
    static SB: OnceLock<Sandbox> = OnceLock::new();
    SB.get_or_init(|| Sandbox::new(SandboxConfig::default()).expect("sandbox"))
}

/// The binary's sandbox on the fresh backend (a new interpreter per run), started on first use.
pub fn fresh_sandbox() -> &'static Sandbox {
    static SB: OnceLock<Sandbox> = OnceLock::new();
    SB.get_or_init(|| {
        let config = SandboxConfig {
            backend: Backend::Fresh,
            ..SandboxConfig::default()
        };
        Sandbox::new(config).expect("fresh sandbox")
    })
}

/// `text` as the file `name` in a fresh temp dir (kept while the returned guard lives).
pub fn write(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    (dir, path)
}

/// A task set from JSONL `lines`, through the same loader as a file on disk.
pub fn load(name: &str, lines: &[String]) -> TaskSet {
    let (_dir, path) = write(name, &lines.join("\n"));
    TaskSet::load(&path).unwrap_or_else(|e| panic!("load: {e}"))
}

/// `program` scored by `task`'s reward with default options.
pub async fn scored(task: &Task, program: &Program) -> Result<RewardOutcome, SandboxError> {
    scored_with(task, program, EvalOptions::default()).await
}

/// `program` scored by `task`'s reward under `options` (an env's lower limits).
pub async fn scored_with(
    task: &Task,
    program: &Program,
    options: EvalOptions,
) -> Result<RewardOutcome, SandboxError> {
    scored_on(sandbox(), task, program, options).await
}

/// `program` scored by `task`'s reward in `sandbox` under `options`.
pub async fn scored_on(
    sandbox: &Sandbox,
    task: &Task,
    program: &Program,
    options: EvalOptions,
) -> Result<RewardOutcome, SandboxError> {
    score_program(sandbox, &task.reward, program, None, options).await
}
