//! The hostile suite of `hostile_langs.rs` with `backend: fresh` (issue 14).

#[allow(dead_code)]
const BACKEND: codegym_sandbox::Backend = codegym_sandbox::Backend::Fresh;

#[allow(dead_code)] // the Python suite's helpers this suite does not use
#[path = "hostile/fixture.rs"]
mod fixture;
#[path = "hostile/langs.rs"]
mod langs;
