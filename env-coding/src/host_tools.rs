//! Host tools declared at `make` (issue 12): the `tools` kwarg (name, description, JSON-schema
//! parameters) and the handler that answers the calls, which whoever serves the session (the
//! server's `Session` stream task, the rollout engine) provides around `make` with
//! [`host_tool_calls::with_handler`]: env-core's generic API knows nothing of tools.
//!
//! Calls from the program travel over its run's private channel (`sandbox/report.rs`: the report
//! socket of a script run, a session's own tool socket); the handler forwards them to whoever serves
//! the session (the gRPC client). Only the step's own run has tools: scoring runs never call the
//! host.

use serde::Deserialize;

use codegym_sandbox::{ReportSpec, ToolHost, ToolLimits};

/// Most tools one env may declare.
pub const MAX_TOOLS: usize = 64;

/// One declared tool (the `tools` kwarg's entries).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDecl {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// A JSON Schema of the arguments (informational: the client validates its own tools).
    #[serde(default)]
    pub parameters: serde_json::Value,
}

/// The tools of an env made with `decls`: checked names, and the handler of the surrounding
/// [`host_tool_calls::with_handler`]. No handler (a unary `Make`, an HTTP facade): an error naming the stream.
pub(crate) fn host(
    decls: &[ToolDecl],
    limits: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<Option<ToolHost>, String> {
    if decls.is_empty() {
        return Ok(None);
    }
    if decls.len() > MAX_TOOLS {
        return Err(format!(
            "tools: {} declared, at most {MAX_TOOLS}",
            decls.len()
        ));
    }
    let mut names: Vec<String> = Vec::with_capacity(decls.len());
    for d in decls {
        let probe = serde_json::Map::from_iter([(d.name.clone(), serde_json::Value::Null)]);
        ReportSpec::check_vars(&probe)
            .map_err(|e| format!("tools: {}", e.trim_start_matches("vars: ")))?;
        if names.contains(&d.name) {
            return Err(format!("tools: {:?} declared twice", d.name));
        }
        names.push(d.name.clone());
    }
    let handler = host_tool_calls::current_handler().ok_or_else(|| {
        "tools: host tools are served only over the Session stream (EnvService/Session), which forwards the calls to the client"
            .to_string()
    })?;
    Ok(Some(ToolHost {
        names,
        handler,
        limits: tool_limits(limits)?,
    }))
}

/// The defaults, lowered by the `tool_limits` kwarg (never raised: the server's caps).
fn tool_limits(
    over: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<ToolLimits, String> {
    let mut l = ToolLimits::default();
    for (key, value) in over.into_iter().flatten() {
        let v = value
            .as_u64()
            .ok_or_else(|| format!("tool_limits: {key} must be a non-negative integer"))?;
        let (slot, ceiling) = match key.as_str() {
            "call_timeout_ms" => (&mut l.call_timeout_ms as &mut dyn SetU64, 30_000),
            "max_calls" => (&mut l.max_calls as &mut dyn SetU64, 256),
            "max_arg_bytes" => (&mut l.max_arg_bytes as &mut dyn SetU64, 1 << 20),
            "max_result_bytes" => (&mut l.max_result_bytes as &mut dyn SetU64, 1 << 20),
            other => return Err(format!("tool_limits: unknown field {other:?}")),
        };
        if v == 0 || v > ceiling {
            return Err(format!(
                "tool_limits: {key} = {v} must be between 1 and {ceiling}"
            ));
        }
        slot.set(v);
    }
    Ok(l)
}

/// One setter for the differently typed caps.
trait SetU64 {
    fn set(&mut self, v: u64);
}

impl SetU64 for u64 {
    fn set(&mut self, v: u64) {
        *self = v;
    }
}

impl SetU64 for u32 {
    fn set(&mut self, v: u64) {
        *self = u32::try_from(v).unwrap_or(u32::MAX);
    }
}

impl SetU64 for usize {
    fn set(&mut self, v: u64) {
        *self = usize::try_from(v).unwrap_or(usize::MAX);
    }
}
