//! Host tools over the `Session` stream (issue 12): the handler the coding env gets at make (see
//! `env_coding::host_tools`; the stream scopes it with `host_tool_calls::with_handler`) sends each
//! call of the program here, the stream's task forwards it to the client as a `tool_call` response
//! and routes the client's `tool_result` back.
//!
//! Everything is per stream: two sessions' tools never share a channel. A client that never
//! answers costs only its own step (the sandbox's per-call timeout and the step's wall clock).

use std::collections::HashMap;

use futures::FutureExt;
use host_tool_calls::{HostToolCall, ToolHandler};
use proto::v1;
use tokio::sync::{mpsc, oneshot};

type Reply = oneshot::Sender<Result<serde_json::Value, String>>;

/// Calls waiting to be forwarded, at most this many at once (the sandbox caps calls per run).
const QUEUE: usize = 256;

/// The stream task's side: calls to forward, and the answers it routes back.
pub(crate) struct Bridge {
    calls: mpsc::Receiver<(HostToolCall, Reply)>,
    waiting: HashMap<u64, Reply>,
    next_id: u64,
}

/// A handler for the env and the bridge its calls arrive at.
pub(crate) fn bridge() -> (ToolHandler, Bridge) {
    let (tx, rx) = mpsc::channel::<(HostToolCall, Reply)>(QUEUE);
    let handler: ToolHandler = std::sync::Arc::new(move |call| {
        let tx = tx.clone();
        async move {
            let (reply, answer) = oneshot::channel();
            tx.send((call, reply))
                .await
                .map_err(|_| "the session's stream has ended".to_string())?;
            answer
                .await
                .map_err(|_| "the client did not answer (its stream ended)".to_string())?
        }
        .boxed()
    });
    let bridge = Bridge {
        calls: rx,
        waiting: HashMap::new(),
        next_id: 0,
    };
    (handler, bridge)
}

impl Bridge {
    /// The next call to forward, as its message (the reply is kept under the call id).
    pub async fn next_call(&mut self) -> Option<v1::ToolCall> {
        let (call, reply) = self.calls.recv().await?;
        self.next_id += 1;
        self.waiting.insert(self.next_id, reply);
        Some(v1::ToolCall {
            call_id: self.next_id,
            name: call.name,
            args_json: serde_json::Value::Array(call.args).to_string(),
            kwargs_json: serde_json::Value::Object(call.kwargs).to_string(),
        })
    }

    /// Routes a client's answer; unknown ids (a call that timed out, a forged id) are dropped.
    pub fn resolve(&mut self, result: v1::ToolResult) {
        let Some(reply) = self.waiting.remove(&result.call_id) else {
            tracing::debug!(call_id = result.call_id, "tool result for no waiting call");
            return;
        };
        let answer = match result.error {
            Some(error) => Err(error),
            None if result.result_json.trim().is_empty() => Ok(serde_json::Value::Null),
            None => serde_json::from_str(&result.result_json)
                .map_err(|e| format!("the client's result is not JSON: {e}")),
        };
        let _ = reply.send(answer);
    }

    /// Forgets calls of a step that ended (their runs are gone).
    pub fn step_ended(&mut self) {
        self.waiting.clear();
    }
}
