//! The report channel of a run (issue 12): how the program's runner inside the sandbox tells the
//! host the value of the last expression, the exception that ended the program and (on request)
//! the top-level variables, and how injected `vars` reach it.
//!
//! A script run gets a private `AF_UNIX` socket pair per run, inherited as a descriptor (no
//! filesystem or abstract name, so no other run can open it): the host writes one frame with the
//! [`ReportSpec`], the runner (`report.py`) answers with one report frame when the program has
//! ended. A session cell's spec and report travel with the cell on the driver's pipes instead.
//! Frames are a u32 little-endian length and JSON.
//!
//! Why not stdout: the program owns its stdout and stderr, so a marker printed there could be
//! faked by printing. The descriptor is reachable by the program only by writing to it on purpose,
//! and then it can change only its own report (like a session cell's exit code); rewards never
//! read these fields, and the kernel's exit status stays the verdict.

use std::time::Duration;

use env_core::{ProgramError, ReturnValue, Variables};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::request::{HostToolCall, ReportSpec, ToolHost, ToolLimits};

/// The runner's Python side, prepended to the fork server, the script bootstrap and the session
/// driver (one definition: the name `_codegym_report`).
pub(crate) const REPORT_PY: &str = include_str!("report.py");

/// Most variables listed (the rest are dropped with a reason).
pub const MAX_VARIABLES: usize = 256;
/// Largest JSON of all listed variables together, in bytes.
pub const MAX_VARIABLES_BYTES: usize = 1 << 20;
/// Largest JSON of a return value, in bytes (larger: unrepresentable, "too large").
pub const MAX_RETURN_BYTES: usize = 256 << 10;
/// Longest `repr` of an unrepresentable value and longest error message, in characters.
pub const MAX_REPR_CHARS: usize = 2000;
/// Largest injected `vars` (their JSON), in bytes, and most names.
pub const MAX_VARS_BYTES: usize = 1 << 20;
pub const MAX_VARS: usize = 256;
/// Largest report frame the host accepts (caps above plus slack); more is dropped unread.
pub(crate) const MAX_FRAME: usize = MAX_VARIABLES_BYTES + MAX_RETURN_BYTES + (256 << 10);

/// What the runner reported. Every field is the program's own business (see the module doc).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Report {
    #[serde(default)]
    pub return_value: Option<ReturnValue>,
    #[serde(default)]
    pub variables: Option<Box<Variables>>,
    #[serde(default)]
    pub error: Option<ProgramError>,
}

impl Report {
    /// A report frame's JSON; `None` if malformed (a program wrote garbage to the descriptor).
    pub fn parse(json: &[u8]) -> Option<Report> {
        match serde_json::from_slice(json) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::debug!(error = %e, "malformed run report ignored");
                None
            }
        }
    }
}

impl ReportSpec {
    /// Checks injected `vars`: identifiers only (not dunder names, not keywords), at most
    /// [`MAX_VARS`] names and [`MAX_VARS_BYTES`] of JSON. The message is the caller's to wrap.
    pub fn check_vars(vars: &serde_json::Map<String, serde_json::Value>) -> Result<(), String> {
        if vars.len() > MAX_VARS {
            return Err(format!(
                "vars: {} names, at most {MAX_VARS} allowed",
                vars.len()
            ));
        }
        for name in vars.keys() {
            if !is_identifier(name) {
                return Err(format!(
                    "vars: {name:?} is not a Python identifier (ASCII letters, digits, _; not a keyword, not a __dunder__)"
                ));
            }
        }
        let size = serde_json::to_vec(vars).map_or(usize::MAX, |v| v.len());
        if size > MAX_VARS_BYTES {
            return Err(format!(
                "vars: {size} bytes of JSON, at most {MAX_VARS_BYTES} allowed"
            ));
        }
        Ok(())
    }

    /// The spec as the runner reads it (the caps ride along, so Python has one source of them).
    pub(crate) fn to_json(&self) -> Vec<u8> {
        self.to_json_value().to_string().into_bytes()
    }

    /// [`ReportSpec::to_json`] naming the host tools to install (a session's cells).
    pub(crate) fn to_json_with_tools(&self, names: &[String]) -> Vec<u8> {
        let mut v = self.to_json_value();
        v["tools"] = serde_json::json!(names);
        v.to_string().into_bytes()
    }

    fn to_json_value(&self) -> serde_json::Value {
        serde_json::json!({
            "vars": self.vars,
            "variables": self.variables,
            "max_variables": MAX_VARIABLES,
            "max_variables_bytes": MAX_VARIABLES_BYTES,
            "max_return_bytes": MAX_RETURN_BYTES,
            "max_repr": MAX_REPR_CHARS,
        })
    }
}

const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
        && !KEYWORDS.contains(&name)
}

/// A length-prefixed frame.
pub(crate) fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 4);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The last complete frame in `bytes` that parses as a report.
pub(crate) fn last_report(mut bytes: &[u8]) -> Option<Report> {
    let mut last = None;
    while bytes.len() >= 4 {
        let n = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        let Some(body) = bytes.get(4..4 + n) else {
            break;
        };
        if let Some(r) = Report::parse(body) {
            last = Some(r);
        }
        bytes = &bytes[4 + n..];
    }
    last
}

/// The spec as the runner reads it: [`ReportSpec`]'s fields and the names of the run's host tools.
pub(crate) fn spec_json(spec: &ReportSpec, tools: Option<&ToolHost>) -> serde_json::Value {
    let mut json = spec.to_json_value();
    if let Some(t) = tools {
        json["tools"] = serde_json::json!(t.names);
    }
    json
}

/// The host's end of a script run's report socket, with the spec still to send and the run's
/// host tools (issue 12).
pub(crate) struct Channel {
    pub sock: std::os::unix::net::UnixStream,
    /// What of the spec is still to send first (empty: all of it already is, or a session's tool
    /// channel, which has none).
    pub spec: Vec<u8>,
    pub tools: Option<ToolHost>,
    /// Tool calls counted against the cap (a session resets it per cell).
    pub calls_made: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl Channel {
    /// A socket pair for one run: the host's channel and the descriptor the child inherits.
    /// `spec`: the run's, sent first (`None`: a session's tool channel, whose cells carry their
    /// specs elsewhere).
    pub fn pair(
        spec: Option<&ReportSpec>,
        tools: Option<ToolHost>,
    ) -> std::io::Result<(Channel, std::os::fd::OwnedFd)> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        let mut spec = match spec {
            Some(spec) => frame(spec_json(spec, tools.as_ref()).to_string().as_bytes()),
            None => Vec::new(),
        };
        // Issue 17: the spec goes into the socket's buffer now, before the run starts, so that
        // the child does not wait for the host to start serving the channel (a round trip on the
        // run's critical path). Never blocks: what does not fit is sent by `serve`.
        ours.set_nonblocking(true)?;
        match std::io::Write::write(&mut &ours, &spec) {
            Ok(n) => {
                spec.drain(..n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        Ok((
            Channel {
                sock: ours,
                spec,
                tools,
                calls_made: Default::default(),
            },
            theirs.into(),
        ))
    }

    /// Sends the spec, answers tool calls, and collects the other frames (reports) until every
    /// copy of the runner's end is closed (the run's processes are all gone), capped at
    /// [`MAX_FRAME`] bytes each. Returns the report frames, framed again, in order.
    pub async fn serve(self) -> Vec<u8> {
        let Ok(()) = self.sock.set_nonblocking(true) else {
            return Vec::new();
        };
        let Ok(sock) = tokio::net::UnixStream::from_std(self.sock) else {
            return Vec::new();
        };
        let (mut rd, mut wr) = sock.into_split();
        // Replies (and first the spec) go out through one writer task, in order.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
        if !self.spec.is_empty() {
            let _ = tx.send(self.spec);
        }
        let writer = tokio::spawn(async move {
            while let Some(bytes) = rx.recv().await {
                if wr.write_all(&bytes).await.is_err() {
                    break;
                }
            }
        });
        let mut calls = tokio::task::JoinSet::new();
        let mut reports = Vec::new();
        let mut buf: Vec<u8> = Vec::new();
        let mut scratch = vec![0u8; crate::prepare::SCRATCH];
        'read: loop {
            let n = match rd.read(&mut scratch).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            buf.extend_from_slice(&scratch[..n]);
            while buf.len() >= 4 {
                let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                if len > MAX_FRAME {
                    tracing::debug!(len, "oversized frame on a report channel; channel dropped");
                    break 'read;
                }
                if buf.len() < 4 + len {
                    break;
                }
                let body: Vec<u8> = buf.drain(..4 + len).skip(4).collect();
                match (&self.tools, call_of(&body)) {
                    (Some(tools), Some((id, call))) => {
                        let made = self
                            .calls_made
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                            + 1;
                        let reply = tx.clone();
                        let refusal = if made > tools.limits.max_calls {
                            Some(format!(
                                "too many tool calls: at most {} per run",
                                tools.limits.max_calls
                            ))
                        } else if body.len() > tools.limits.max_arg_bytes {
                            Some(format!(
                                "tool call of {} bytes is over the cap of {} bytes",
                                body.len(),
                                tools.limits.max_arg_bytes
                            ))
                        } else {
                            None
                        };
                        match (refusal, call) {
                            (Some(why), _) | (None, Err(why)) => {
                                let _ = reply.send(reply_frame(id, Err(why)));
                            }
                            (None, Ok(call)) => {
                                let handler = tools.handler.clone();
                                let limits = tools.limits;
                                calls.spawn(async move {
                                    let answer = answer(handler, call, limits).await;
                                    let _ = reply.send(reply_frame(id, answer));
                                });
                            }
                        }
                    }
                    _ => reports.extend(frame(&body)),
                }
            }
        }
        // The run is over: calls still running are abandoned, with the writer.
        calls.abort_all();
        writer.abort();
        reports
    }
}

/// A call frame's id and call (or why it is malformed); `None` for other frames.
fn call_of(body: &[u8]) -> Option<(u64, Result<HostToolCall, String>)> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    if v.get("op").and_then(|o| o.as_str()) != Some("call") {
        return None;
    }
    let id = v.get("id").and_then(|i| i.as_u64())?;
    let call = (|| {
        let name = v
            .get("tool")
            .and_then(|t| t.as_str())
            .ok_or("tool name missing")?;
        let args = v
            .get("args")
            .and_then(|a| a.as_array())
            .cloned()
            .unwrap_or_default();
        let kwargs = v
            .get("kwargs")
            .and_then(|k| k.as_object())
            .cloned()
            .unwrap_or_default();
        Ok(HostToolCall {
            name: name.to_string(),
            args,
            kwargs,
        })
    })();
    Some((id, call))
}

/// Runs the handler under the per-call timeout and the result cap.
async fn answer(
    handler: super::request::ToolHandler,
    call: HostToolCall,
    limits: ToolLimits,
) -> Result<serde_json::Value, String> {
    let name = call.name.clone();
    let timeout = Duration::from_millis(limits.call_timeout_ms.max(1));
    let result = match tokio::time::timeout(timeout, handler(call)).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(format!(
                "tool {name} did not answer within {} ms",
                limits.call_timeout_ms
            ));
        }
    };
    let size = serde_json::to_vec(&result).map_or(usize::MAX, |v| v.len());
    if size > limits.max_result_bytes {
        return Err(format!(
            "tool {name} returned {size} bytes, over the cap of {} bytes",
            limits.max_result_bytes
        ));
    }
    Ok(result)
}

fn reply_frame(id: u64, answer: Result<serde_json::Value, String>) -> Vec<u8> {
    let body = match answer {
        Ok(result) => serde_json::json!({"id": id, "result": result}),
        Err(error) => serde_json::json!({"id": id, "error": error}),
    };
    frame(body.to_string().as_bytes())
}

/// Waits for a report collected by [`Channel::serve`], at most `grace` after the run ended (a
/// descendant the kill missed must not hold the step).
pub(crate) async fn collect(
    task: Option<tokio::task::JoinHandle<Vec<u8>>>,
    grace: Duration,
) -> Option<Report> {
    let mut task = task?;
    match tokio::time::timeout(grace, &mut task).await {
        Ok(Ok(bytes)) => last_report(&bytes),
        _ => {
            task.abort();
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn vars_names_and_caps() {
        let ok = json!({"x": 1, "_y": [1, 2], "ctx2": {"a": "b"}});
        assert!(ReportSpec::check_vars(ok.as_object().unwrap()).is_ok());
        for bad in ["1x", "a-b", "", "__builtins__", "class", "é"] {
            let m = serde_json::Map::from_iter([(bad.to_string(), json!(1))]);
            let err = ReportSpec::check_vars(&m).unwrap_err();
            assert!(err.contains("identifier"), "{bad}: {err}");
        }
        let big = serde_json::Map::from_iter([("x".into(), json!("a".repeat(MAX_VARS_BYTES)))]);
        assert!(ReportSpec::check_vars(&big).unwrap_err().contains("bytes"));
        let many = (0..=MAX_VARS)
            .map(|i| (format!("v{i}"), json!(i)))
            .collect();
        assert!(ReportSpec::check_vars(&many).unwrap_err().contains("names"));
    }

    #[test]
    fn last_complete_valid_frame_wins() {
        let mut bytes = frame(br#"{"return_value": {"kind": "json", "value": 1}}"#);
        bytes.extend(frame(b"garbage"));
        bytes.extend(frame(br#"{"return_value": {"kind": "json", "value": 2}}"#));
        bytes.extend_from_slice(&[200, 0, 0, 0, b'{']); // torn
        let r = last_report(&bytes).unwrap();
        assert_eq!(r.return_value, Some(ReturnValue::Json { value: json!(2) }));
        assert!(last_report(&frame(b"\"text\"")).is_none());
    }
}
