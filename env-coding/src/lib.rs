//! Coding environments (`codegym/Python-v0`): every step runs LLM-written Python in a real sandbox and
//! computes an honest reward from the exit code and the output.

pub mod sandbox;
