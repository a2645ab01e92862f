//! Driving the async sandbox from the synchronous `Env` API.
//!
//! `Env::step` runs on blocking threads (the server's `spawn_blocking`, rayon). The handle captured at
//! `register` time (or a small private runtime, created once) runs the sandbox futures from there.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::{Handle, Runtime, RuntimeFlavor};

/// The private runtime used when `register` is called outside any runtime. Never dropped: dropping a
/// runtime from async code panics, and it costs two idle threads.
static PRIVATE: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// The ambient runtime's handle when it is multi-threaded, else the private runtime's.
///
/// A current-thread runtime (e.g. `#[tokio::test]`) only makes progress while its one thread polls
/// it, so blocking callers could starve it; the private runtime has threads of its own.
pub(crate) fn capture() -> Result<Handle, std::io::Error> {
    if let Ok(h) = Handle::try_current()
        && h.runtime_flavor() == RuntimeFlavor::MultiThread
    {
        return Ok(h);
    }
    let rt = PRIVATE.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("codegym-env")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    });
    match rt {
        Ok(rt) => Ok(rt.handle().clone()),
        Err(e) => Err(std::io::Error::other(e.clone())),
    }
}

/// Runs `fut` to completion from synchronous code.
///
/// From a plain thread this is `Handle::block_on`. On a multi-thread runtime's thread (a
/// `spawn_blocking` thread, or a worker in async code that should have used `spawn_blocking`) it goes
/// through `block_in_place`. Under a current-thread runtime tokio cannot tell a blocking-pool thread
/// from async code, where `block_on` would panic, so the future is driven from a scoped helper thread
/// instead (a thread spawn, only in that configuration).
pub(crate) fn block_on<F>(handle: &Handle, fut: F) -> Result<F::Output, String>
where
    F: Future + Send,
    F::Output: Send,
{
    match Handle::try_current() {
        Err(_) => Ok(handle.block_on(fut)),
        Ok(current) if current.runtime_flavor() == RuntimeFlavor::MultiThread => {
            Ok(tokio::task::block_in_place(|| handle.block_on(fut)))
        }
        Ok(_) => std::thread::scope(|scope| {
            scope
                .spawn(|| handle.block_on(fut))
                .join()
                .map_err(|_| "the sandbox future panicked".to_string())
        }),
    }
}
