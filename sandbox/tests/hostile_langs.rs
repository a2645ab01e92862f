//! Hostile programs in every compiled or non-Python language (issue 14): C, C++, Rust, Go, Java,
//! JavaScript and Bash each try a fork bomb, a memory bomb, the network, host files and the host's
//! secret, writing outside the work dir, outliving the step, flooding the output and killing their
//! parent. Each must end in a safe outcome with nothing surviving (the hostile fixture checks no
//! process of the sandbox's uids and no work dir is left after every run, and that the host secret
//! never appears in the output).
//!
//! This binary uses the warm-fork backend's sandbox (other languages start fresh under it, with
//! the same layers); `hostile_langs_fresh.rs` runs the same suite with `backend: fresh`.

#[allow(dead_code)]
const BACKEND: codegym_sandbox::Backend = codegym_sandbox::Backend::WarmFork;

#[allow(dead_code)] // the Python suite's helpers this suite does not use
#[path = "hostile/fixture.rs"]
mod fixture;
#[path = "hostile/langs.rs"]
mod langs;
