//! Benchmarks behind `codegym bench`.
