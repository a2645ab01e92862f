//! `EnvSpec` and environment ids of the form `ns/Name-vN`.

use serde::{Deserialize, Serialize};

use crate::{EnvError, Result, Space};

/// A parsed environment id: optional namespace, name, optional version.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EnvId {
    pub namespace: Option<String>,
    pub name: String,
    pub version: Option<u32>,
}

impl EnvId {
    /// Parses `[ns/]Name[-vN]`, Gymnasium's grammar: the name may contain letters, digits, `_`, `-`
    /// and `.`; the version is the trailing `-v<digits>`.
    pub fn parse(id: &str) -> Result<Self> {
        let bad = || EnvError::MalformedId(id.to_string());
        let (namespace, rest) = match id.split_once('/') {
            Some((ns, rest)) => {
                if ns.is_empty()
                    || !ns
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
                {
                    return Err(bad());
                }
                (Some(ns.to_string()), rest)
            }
            None => (None, id),
        };
        let (name, version) = match rest.rfind("-v") {
            Some(i) if rest[i + 2..].chars().all(|c| c.is_ascii_digit()) && i + 2 < rest.len() => {
                let v = rest[i + 2..].parse().map_err(|_| bad())?;
                (&rest[..i], Some(v))
            }
            _ => (rest, None),
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
        {
            return Err(bad());
        }
        Ok(EnvId {
            namespace,
            name: name.to_string(),
            version,
        })
    }

    /// `ns/Name` without the version.
    pub fn base(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

impl std::fmt::Display for EnvId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.base())?;
        if let Some(v) = self.version {
            write!(f, "-v{v}")?;
        }
        Ok(())
    }
}

/// Gymnasium's `EnvSpec`: what `make` needs to know about a registered environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvSpec {
    /// `ns/Name-vN`.
    pub id: String,
    pub description: String,
    /// `make` wraps the env in `TimeLimit` with this many steps when set.
    pub max_episode_steps: Option<u32>,
    pub reward_threshold: Option<f64>,
    pub nondeterministic: bool,
    pub observation_space: Space,
    pub action_space: Space,
    /// Default kwargs of the constructor; `make`'s kwargs are merged over them.
    pub default_kwargs: serde_json::Map<String, serde_json::Value>,
    /// How long `make`, `reset`, `step` and `close` may take: whether async callers run them in
    /// place or hand them to a thread that may block (an extension of Gymnasium's spec).
    #[serde(default)]
    pub call_cost: CallCost,
    /// What the env tells clients about itself beyond its spaces (the coding env: its sandbox's
    /// isolation level and layers, and the languages it runs). `ListEnvs` and `Make` carry it.
    #[serde(default)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// How long an environment's calls may take, for callers on an async runtime. Handing a call to a
/// blocking thread costs two thread wake-ups (tens of microseconds on a busy VM), far more than a
/// CartPole step (~0.2 us); running a call that waits on a sandbox in place would stall every task
/// sharing the runtime thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallCost {
    /// Calls may block for milliseconds or more (processes, sandboxes, IO, locks): run them on a
    /// thread that may block. The safe default.
    #[default]
    Blocking,
    /// Calls are pure computation of at most tens of microseconds and never block: run them in
    /// place.
    Cheap,
}
