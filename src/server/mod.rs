//! The gRPC environment server.
