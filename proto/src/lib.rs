//! The `codegym.v1` protocol: messages, the `EnvService` client and server stubs, the encoded file
//! descriptor set for gRPC server reflection, and conversions to and from env-core's types.
//!
//! Generated at build time from `proto/codegym/v1/env.proto` (protox + tonic-prost-build); the `.proto`
//! file is the source of truth and the contract with non-Rust clients.

pub mod convert;

/// Version 1 of the protocol (`package codegym.v1`).
pub mod v1 {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("codegym.v1");

    /// The encoded `FileDescriptorSet` of `codegym/v1/env.proto`, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/codegym_v1_descriptor.bin"));
}
