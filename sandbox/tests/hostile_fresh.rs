//! The hostile suite of `hostile.rs` again, with a fresh interpreter per execution (the backend
//! used where the warm-fork server cannot run, and by `backend: "fresh"`).

#[path = "hostile.rs"]
mod suite;

/// The backend every fixture of this binary uses.
const BACKEND: codegym_sandbox::Backend = codegym_sandbox::Backend::Fresh;
