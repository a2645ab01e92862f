//! A repository verdict's provenance: what produced its reward besides the patch, in the coding
//! envs' type ([`Provenance`]), so that a rollout records it on the submit step and `codegym
//! rescore` says why a rescored reward changed ([`Provenance::drift`]). Made once per prepared
//! state and reported with every verdict scored from it.
//!
//! - `task_hash`: the prepared state's key (the repository's content, commit, setup,
//!   requirements, environment image, test patch: [`super::prepared`]) with what scoring reads
//!   besides it (the test command, the hidden tests' bytes, the listed tests, the image paths).
//! - `reward_spec_hash` and `_version`: the verdict rule (a JUnit report or a reward file), at
//!   [`VERDICT_RULE_VERSION`].
//! - `limits`: the test command's; `language`: `repository`; `toolchain`: the environment image's
//!   manifest digest, or `host` (the host's root filesystem, whose tools are not versioned here).

use std::collections::BTreeMap;

use serde_json::json;
use sha2::{Digest as _, Sha256};
use trajectory::record::Provenance;

use crate::provenance::{CODEGYM_VERSION, hash_json, provenance_limits};
use crate::tasks::RepoTask;
use codegym_sandbox::Sandbox;
use codegym_sandbox::image::Digest;

/// The version of how a verdict is judged from a test run (bumped when the rule changes).
pub const VERDICT_RULE_VERSION: u32 = 1;

/// The provenance of every verdict of `task`'s prepared state `state_key`.
pub(super) fn provenance(
    sandbox: &Sandbox,
    task: &RepoTask,
    state_key: &str,
    image: Option<&Digest>,
) -> Provenance {
    let hidden: BTreeMap<&str, String> = task
        .hidden_tests
        .iter()
        .map(|(path, bytes)| {
            let hex: String = Sha256::digest(bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            (path.as_str(), hex)
        })
        .collect();
    let scored = json!({
        "prepared": state_key,
        "test_command": task.test_command,
        "hidden_tests": hidden,
        "fail_to_pass": task.fail_to_pass,
        "pass_to_pass": task.pass_to_pass,
        "work_dir": task.work_dir,
        "tests_dir": task.tests_dir,
        "reward_file": task.reward_file,
    });
    let rule = match &task.reward_file {
        Some(_) => "reward_file",
        None => "junit",
    };
    let limits = super::command_limits(task);
    let info = sandbox.info();
    Provenance {
        task_hash: hash_json(&scored),
        reward_spec_hash: hash_json(&json!({ "verdict": rule })),
        reward_spec_version: VERDICT_RULE_VERSION,
        limits: provenance_limits(&limits, 0),
        sandbox_backend: info.backend.to_string(),
        isolation_level: info.isolation_level.to_string(),
        language: "repository".into(),
        toolchain: image.map_or_else(|| "host".to_string(), Digest::to_string),
        codegym_version: CODEGYM_VERSION.to_string(),
    }
}
