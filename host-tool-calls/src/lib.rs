//! Host tools at the protocol level (issue 12): what a program's call of a host tool is
//! ([`HostToolCall`]), what answers it ([`ToolHandler`]), and how the one who serves a session hands
//! its handler to the envs it makes ([`with_handler`], read back by [`current_handler`]).
//!
//! Three parties meet here and know nothing else of each other: the coding env's sandbox runs the
//! calls (it reads the handler at `make`), the server's `Session` stream forwards them to its
//! client, and the rollout engine answers them itself for envs it runs in process. The handler
//! travels as a task-local rather than a `make` argument because env-core's generic `make` API
//! knows nothing of tools; this crate is what keeps the engine from depending on the coding env
//! just to name these types.

use futures::future::BoxFuture;

/// A call of a host tool from inside the sandbox: positional and keyword arguments as JSON. On the
/// wire (a `Session` stream) it is the `codegym.v1.ToolCall` message; it is not the model's chat
/// tool call (`trajectory::record::ChatToolCall`).
#[derive(Debug, Clone, PartialEq)]
pub struct HostToolCall {
    pub name: String,
    pub args: Vec<serde_json::Value>,
    pub kwargs: serde_json::Map<String, serde_json::Value>,
}

/// Answers tool calls: the JSON result, or an error message the program sees as an exception.
pub type ToolHandler = std::sync::Arc<
    dyn Fn(HostToolCall) -> BoxFuture<'static, Result<serde_json::Value, String>> + Send + Sync,
>;

tokio::task_local! {
    static HANDLER: ToolHandler;
}

/// Runs `make` (or any future) with `handler` answering the tool calls of the envs it makes.
pub async fn with_handler<F: std::future::Future>(handler: ToolHandler, f: F) -> F::Output {
    HANDLER.scope(handler, f).await
}

/// The handler of the surrounding [`with_handler`], if any. Task-local: a task spawned inside the
/// scope does not inherit it.
pub fn current_handler() -> Option<ToolHandler> {
    HANDLER.try_with(ToolHandler::clone).ok()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures::FutureExt;

    use super::*;

    fn echo() -> ToolHandler {
        Arc::new(|call: HostToolCall| async move { Ok(serde_json::json!(call.name)) }.boxed())
    }

    fn call(name: &str) -> HostToolCall {
        HostToolCall {
            name: name.into(),
            args: vec![],
            kwargs: serde_json::Map::new(),
        }
    }

    #[tokio::test]
    async fn the_scope_hands_over_exactly_its_handler_and_ends_with_it() {
        assert!(current_handler().is_none());
        let h = echo();
        let seen = with_handler(h.clone(), async { current_handler() }).await;
        let seen = seen.expect("inside the scope");
        assert!(Arc::ptr_eq(&seen, &h));
        assert_eq!(seen(call("x")).await, Ok(serde_json::json!("x")));
        assert!(current_handler().is_none(), "nothing leaks past the scope");
    }

    #[tokio::test]
    async fn an_inner_scope_shadows_the_outer_one_and_spawned_tasks_get_none() {
        let (outer, inner) = (echo(), echo());
        with_handler(outer.clone(), async {
            let got = with_handler(inner.clone(), async { current_handler() }).await;
            assert!(Arc::ptr_eq(&got.unwrap(), &inner));
            assert!(Arc::ptr_eq(&current_handler().unwrap(), &outer));
            let spawned = tokio::spawn(async { current_handler().is_none() });
            assert!(spawned.await.unwrap(), "a spawned task has no handler");
        })
        .await;
    }
}
