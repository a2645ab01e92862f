//! What produced a reward (verdict provenance), and what a rescoring of a recorded step found.
//!
//! The coding env's scoring engine makes a [`Provenance`] for every verdict (`env_coding::Scorer`)
//! and reports it in the step's `info["provenance"]`; the rollout engine records it typed in
//! [`EnvStepRecord::provenance`](super::EnvStepRecord::provenance), the export carries it, and
//! `codegym rescore` compares a recorded one with a new one ([`Provenance::drift`]) to say why a
//! reward changed. The type lives here, below both the env and the readers of datasets, because
//! the trainer bridge reads it without depending on the env.

use serde::{Deserialize, Serialize};

/// Everything a verdict depended on besides the program itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// `sha256:` of the task's canonical JSON (its native form, keys sorted): prompt, reward spec,
    /// data, language, metadata. Any change of the task changes it.
    pub task_hash: String,
    /// `sha256:` of the reward spec's canonical JSON alone.
    pub reward_spec_hash: String,
    /// The reward spec's format version (`RewardSpec::version`).
    pub reward_spec_version: u32,
    /// The limits every run of the verdict had.
    pub limits: ProvenanceLimits,
    /// How the sandbox started Python programs (`warm fork` or `fresh`).
    pub sandbox_backend: String,
    /// The isolation level the sandbox reached (`strict`, `standard`, `basic`).
    pub isolation_level: String,
    /// The program's language (SandboxFusion's names).
    pub language: String,
    /// The language's toolchain version, as its tool prints it (`Python 3.11.7`,
    /// `gcc (Debian 12.2.0-14) 12.2.0`).
    pub toolchain: String,
    /// The version of codegym that scored.
    pub codegym_version: String,
}

/// The limits of a verdict's runs (the sandbox's, or the env's tightened ones).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvenanceLimits {
    pub cpu_ms: u64,
    pub wall_ms: u64,
    pub memory_bytes: u64,
    pub max_processes: u32,
    pub max_file_bytes: u64,
    pub stdout_cap: u64,
    pub stderr_cap: u64,
    /// Wall-clock budget of each unit test inside the harness (0: none).
    pub per_test_timeout_ms: u64,
}

/// Why a rescored reward differs from the recorded one, or why a step could not be rescored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftReason {
    /// The reward spec (its hash or format version) differs.
    RewardSpecChanged,
    /// The task differs (prompt, data, metadata...) with the same reward spec.
    TaskChanged,
    /// The language's toolchain version differs.
    ToolchainChanged,
    /// The runs' limits differ.
    LimitsChanged,
    /// The sandbox's backend or isolation level differs.
    SandboxChanged,
    /// A different codegym scored (the scoring code itself may have changed).
    CodegymVersionChanged,
    /// Nothing recorded changed: the verdict differs on the same inputs (non-determinism).
    SameInputs,
    /// The recorded step carries no provenance (a file written before it existed).
    NoProvenanceRecorded,
    /// Not rescored: the step's task is not in the current task set.
    TaskMissing,
    /// Not rescored: the episode's mode cannot be replayed (program-of-thought, AutoCoder).
    NotReplayable,
    /// Not rescored: the env refused the replay or the machinery failed (see `error`).
    ReplayFailed,
}

impl DriftReason {
    /// The snake_case name used in JSON and the summary.
    pub fn as_str(self) -> &'static str {
        match self {
            DriftReason::RewardSpecChanged => "reward_spec_changed",
            DriftReason::TaskChanged => "task_changed",
            DriftReason::ToolchainChanged => "toolchain_changed",
            DriftReason::LimitsChanged => "limits_changed",
            DriftReason::SandboxChanged => "sandbox_changed",
            DriftReason::CodegymVersionChanged => "codegym_version_changed",
            DriftReason::SameInputs => "same_inputs",
            DriftReason::NoProvenanceRecorded => "no_provenance_recorded",
            DriftReason::TaskMissing => "task_missing",
            DriftReason::NotReplayable => "not_replayable",
            DriftReason::ReplayFailed => "replay_failed",
        }
    }
}

impl Provenance {
    /// What differs from `recorded` to `self` (empty when nothing does). A changed reward spec
    /// changes the task's hash too: it is reported as [`DriftReason::RewardSpecChanged`] alone.
    pub fn drift(&self, recorded: &Provenance) -> Vec<DriftReason> {
        let mut reasons = Vec::new();
        if self.reward_spec_hash != recorded.reward_spec_hash
            || self.reward_spec_version != recorded.reward_spec_version
        {
            reasons.push(DriftReason::RewardSpecChanged);
        } else if self.task_hash != recorded.task_hash {
            reasons.push(DriftReason::TaskChanged);
        }
        if self.toolchain != recorded.toolchain || self.language != recorded.language {
            reasons.push(DriftReason::ToolchainChanged);
        }
        if self.limits != recorded.limits {
            reasons.push(DriftReason::LimitsChanged);
        }
        if self.sandbox_backend != recorded.sandbox_backend
            || self.isolation_level != recorded.isolation_level
        {
            reasons.push(DriftReason::SandboxChanged);
        }
        if self.codegym_version != recorded.codegym_version {
            reasons.push(DriftReason::CodegymVersionChanged);
        }
        reasons
    }
}

/// What `codegym rescore` found for one env step: the step's `reward` and `provenance` are then
/// the new ones, and this keeps the recorded ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRescore {
    /// The reward the rollout recorded.
    pub recorded_reward: f64,
    /// The provenance the rollout recorded (absent in files written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_provenance: Option<Provenance>,
    /// Whether the new reward differs from the recorded one.
    pub changed: bool,
    /// Why it changed, or what else differs in the provenance (empty: nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<DriftReason>,
    /// With `--repeat N`: the reward of each of the N runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeat_rewards: Vec<f64>,
    /// The step could not be rescored (the task is missing, the sandbox failed...): its reward
    /// is the recorded one, never a zero standing for a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `codegym rescore` changed in a record: the record's own outcome fields before it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RecordRescore {
    pub recorded_final_reward: f64,
    pub recorded_total_reward: f64,
    pub recorded_solved: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provenance() -> Provenance {
        Provenance {
            task_hash: "sha256:t".into(),
            toolchain: "Python 3.11.7".into(),
            ..Provenance::default()
        }
    }

    #[test]
    fn drift_names_each_difference_and_a_new_spec_once() {
        let old = provenance();
        assert!(old.drift(&old).is_empty());
        let mut new = provenance();
        new.task_hash = "sha256:t2".into();
        assert_eq!(new.drift(&old), [DriftReason::TaskChanged]);
        new.reward_spec_version = 2;
        assert_eq!(new.drift(&old), [DriftReason::RewardSpecChanged]);
        new.limits.cpu_ms = 1;
        new.isolation_level = "basic".into();
        new.toolchain = "Python 3.12.0".into();
        new.codegym_version = "0.2.0".into();
        assert_eq!(
            new.drift(&old),
            [
                DriftReason::RewardSpecChanged,
                DriftReason::ToolchainChanged,
                DriftReason::LimitsChanged,
                DriftReason::SandboxChanged,
                DriftReason::CodegymVersionChanged
            ]
        );
        let all: Vec<DriftReason> = serde_json::from_str(
            r#"["reward_spec_changed", "task_changed", "toolchain_changed", "limits_changed",
                "sandbox_changed", "codegym_version_changed", "same_inputs",
                "no_provenance_recorded", "task_missing", "not_replayable", "replay_failed"]"#,
        )
        .unwrap();
        for reason in all {
            assert_eq!(serde_json::to_value(reason).unwrap(), reason.as_str());
        }
    }
}
