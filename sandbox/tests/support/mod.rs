//! Shared by the sandbox's test binaries (each uses a subset).

#![allow(dead_code)]

pub mod forkserver;
pub mod isolation;
pub mod workspace;
