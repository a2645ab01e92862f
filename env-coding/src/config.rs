//! Configuration: [`CodingConfig`] (server-wide) and the per-env `make` kwargs.

use code_extract::ExtractMode;
use serde::{Deserialize, Serialize};

use codegym_sandbox::{Limits, SandboxConfig};

/// How steps execute (the `mode` kwarg).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// A fresh sandboxed process per step; every action is a whole program.
    #[default]
    Script,
    /// One persistent sandboxed interpreter per episode: variables, imports and files survive across
    /// steps. Rewards still run in fresh processes (the accumulated program plus the tests).
    Session,
}

/// Configuration of the coding environments, shared by every env made from one [`crate::register`].
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CodingConfig {
    pub sandbox: SandboxConfig,
    /// Default task file (path or `builtin:examples`) when `make` gets no `tasks` kwarg.
    pub tasks: String,
    /// Directories whose task files a `make` kwarg `tasks` may name. `make` comes from remote
    /// clients: without this list they could make the server open any file it can read. The
    /// default task set and `builtin:` sets are always allowed.
    pub task_dirs: Vec<std::path::PathBuf>,
    pub mode: Mode,
    pub extract: ExtractMode,
    /// The spec's `max_episode_steps` (turns per episode).
    pub max_episode_steps: u32,
    /// Wall-clock budget of each unit test in the harness, in ms (`0`: only the run's limits).
    pub per_test_timeout_ms: u64,
    /// Memory for `Evaluate`'s shared verdicts, in MiB (`0`: every item runs its own program).
    /// Identical (task, program, limits) items are scored once; see `verdicts.rs`.
    pub verdict_cache_mib: u64,
    /// Data tasks (issue 13): whether and which task requirements are installed, and the cache.
    pub packages: codegym_sandbox::packages::PackagesConfig,
    /// Re-running a timeout whose CPU time was under the limit (the machine was busy): on by
    /// default; see `timeouts.rs`.
    pub timeout_rerun: crate::timeouts::RerunPolicy,
    /// Repository tasks' prepared states kept on disk, shared by every process of the machine
    /// and across restarts (on by default; `enabled: false` prepares per process).
    pub prepared: codegym_sandbox::PreparedConfig,
}

impl Default for CodingConfig {
    fn default() -> Self {
        CodingConfig {
            sandbox: SandboxConfig::default(),
            tasks: crate::tasks::BUILTIN_EXAMPLES_NAME.to_string(),
            task_dirs: Vec::new(),
            mode: Mode::Script,
            extract: ExtractMode::Auto,
            max_episode_steps: 4,
            per_test_timeout_ms: 3_000,
            verdict_cache_mib: 64,
            packages: codegym_sandbox::packages::PackagesConfig::default(),
            timeout_rerun: crate::timeouts::RerunPolicy::default(),
            prepared: codegym_sandbox::PreparedConfig::default(),
        }
    }
}

/// The `make` kwargs of `codegym/Code-v0`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnvKwargs {
    pub tasks: Option<String>,
    pub mode: Option<Mode>,
    pub extract: Option<ExtractMode>,
    /// Partial override of the sandbox's limits (missing fields keep the configured values). Overrides
    /// may only tighten: `make` comes from remote clients, and the operator's limits are the ceiling.
    pub limits: Option<serde_json::Map<String, serde_json::Value>>,
    /// Normally consumed by the registry's `make` (TimeLimit); honoured here when the creator is
    /// called directly.
    pub max_episode_steps: Option<u32>,
    /// Issue 12: report the program's top-level variables with every run (an action may override).
    pub variables: Option<bool>,
    /// Issue 12: `false` makes an ungraded episode (a code environment for agents): nothing is
    /// scored, the reward is 0, episodes end only by truncation. Default `true`.
    pub grade: Option<bool>,
    /// `false`: a script-mode step returns the verdict without running the program for its
    /// observation (the observation is an empty execution): the program runs only as the reward
    /// needs it (a unit-test task: once, under its tests), for the same reward. For callers that
    /// read rewards only (a trainer's reward function). Default `true`.
    pub observe: Option<bool>,
    /// Issue 12: host tools the program may call (served over the `Session` stream).
    #[serde(default)]
    pub tools: Vec<crate::host_tools::ToolDecl>,
    /// Issue 12: lower caps on tool calls (`call_timeout_ms`, `max_calls`, `max_arg_bytes`,
    /// `max_result_bytes`); the defaults are the ceiling.
    pub tool_limits: Option<serde_json::Map<String, serde_json::Value>>,
}

impl EnvKwargs {
    /// The name of every kwarg above (`rescore` replays old records whose kwargs may include
    /// names the env no longer takes); a test proves it equal to the struct's fields.
    pub const NAMES: &[&str] = &[
        "tasks",
        "mode",
        "extract",
        "limits",
        "max_episode_steps",
        "variables",
        "grade",
        "observe",
        "tools",
        "tool_limits",
    ];

    pub fn parse(kwargs: &serde_json::Map<String, serde_json::Value>) -> Result<Self, String> {
        // The path names the kwarg a type error is about (`observe: invalid type: ...`).
        let kw: EnvKwargs = serde_path_to_error::deserialize(serde_json::Value::Object(
            kwargs.clone(),
        ))
        .map_err(|e| match e.path().to_string().as_str() {
            "." => e.inner().to_string(),
            path => format!("{path}: {}", e.inner()),
        })?;
        if kw.max_episode_steps == Some(0) {
            return Err("max_episode_steps must be positive".into());
        }
        Ok(kw)
    }

    /// The configured limits with this override applied.
    pub fn limits(&self, base: &Limits) -> Result<Option<Limits>, String> {
        let Some(over) = &self.limits else {
            return Ok(None);
        };
        let mut merged = match serde_json::to_value(base) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => return Err("cannot serialize the base limits".into()),
        };
        for (key, value) in over {
            let (Some(asked), Some(ceiling)) =
                (value.as_u64(), merged.get(key).and_then(|v| v.as_u64()))
            else {
                continue; // unknown keys and non-numbers are reported by the typed parse below
            };
            if asked > ceiling {
                return Err(format!(
                    "limits: {key} = {asked} exceeds the server's limit of {ceiling}; overrides may only lower limits"
                ));
            }
        }
        merged.extend(over.iter().map(|(k, v)| (k.clone(), v.clone())));
        let limits: Limits = serde_json::from_value(serde_json::Value::Object(merged))
            .map_err(|e| format!("limits: {e}"))?;
        if limits.cpu_ms == 0 || limits.wall_ms == 0 || limits.memory_bytes == 0 {
            return Err("limits: cpu_ms, wall_ms and memory_bytes must be positive".into());
        }
        Ok(Some(limits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn kwargs_parse_and_reject_unknown() {
        let kw = EnvKwargs::parse(&map(json!({"mode": "session", "extract": "raw"}))).unwrap();
        assert_eq!(kw.mode, Some(Mode::Session));
        assert_eq!(kw.extract, Some(ExtractMode::Raw));
        assert!(EnvKwargs::parse(&map(json!({"mdoe": "session"}))).is_err());
        assert!(EnvKwargs::parse(&map(json!({"mode": "notebook"}))).is_err());
        assert!(EnvKwargs::parse(&map(json!({"max_episode_steps": 0}))).is_err());
    }

    #[test]
    fn the_list_of_names_is_the_structs_fields() {
        // serde names every field it expects when it meets an unknown one.
        let e = EnvKwargs::parse(&map(json!({"no such kwarg": 1}))).unwrap_err();
        let listed: Vec<&str> = e.split('`').skip(3).step_by(2).collect();
        assert_eq!(listed, EnvKwargs::NAMES, "{e}");
    }

    #[test]
    fn limits_override_is_partial() {
        let base = Limits {
            cpu_ms: 1234,
            ..Limits::default()
        };
        let kw = EnvKwargs::parse(&map(json!({"limits": {"wall_ms": 99}}))).unwrap();
        let l = kw.limits(&base).unwrap().unwrap();
        assert_eq!((l.cpu_ms, l.wall_ms), (1234, 99));
        let bad = EnvKwargs::parse(&map(json!({"limits": {"cpu_ms": "x"}}))).unwrap();
        assert!(bad.limits(&base).is_err());
        let unknown = EnvKwargs::parse(&map(json!({"limits": {"gpus": 1}}))).unwrap();
        assert!(unknown.limits(&base).is_err());
        let raise = EnvKwargs::parse(&map(json!({"limits": {"cpu_ms": 1235}}))).unwrap();
        let err = raise.limits(&base).unwrap_err();
        assert!(err.contains("cpu_ms") && err.contains("1234"), "{err}");
        assert_eq!(EnvKwargs::default().limits(&base), Ok(None));
    }

    #[test]
    fn config_defaults_and_unknown_fields() {
        let c: CodingConfig = serde_json::from_value(json!({"mode": "session"})).unwrap();
        assert_eq!(c.mode, Mode::Session);
        assert_eq!(c.tasks, "builtin:examples");
        assert!(serde_json::from_value::<CodingConfig>(json!({"bogus": 1})).is_err());
    }
}
