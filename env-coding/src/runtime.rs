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

/// The ambient runtime's handle, else the private runtime's.
pub(crate) fn capture() -> Result<Handle, std::io::Error> {
    if let Ok(h) = Handle::try_current() {
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
/// From a plain thread this is `Handle::block_on`. Called on a multi-thread runtime's worker (async
/// code that should have used `spawn_blocking`), it still works through `block_in_place`; on a
/// current-thread runtime it cannot, and reports an error instead of panicking.
pub(crate) fn block_on<F: Future>(handle: &Handle, fut: F) -> Result<F::Output, String> {
    match Handle::try_current() {
        Err(_) => Ok(handle.block_on(fut)),
        Ok(current) if current.runtime_flavor() == RuntimeFlavor::MultiThread => {
            Ok(tokio::task::block_in_place(|| handle.block_on(fut)))
        }
        Ok(_) => Err(
            "Env::step/reset called from async code on a current-thread tokio runtime; \
                      call it from spawn_blocking"
                .into(),
        ),
    }
}
