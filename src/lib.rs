//! The `codegym` package: the gRPC environment server (`server`) and the benchmark drivers (`bench`)
//! behind the `codegym` binary. The binary's `cli` module only parses arguments and calls into here and
//! into the workspace crates.

pub mod bench;
pub mod server;
