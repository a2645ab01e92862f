//! Benchmark drivers behind `codegym bench`; each returns a Markdown table for `BENCHMARKS.md`.
//!
//! Benchmarks, not tests, own every speed claim: tests never assert wall-clock times.

pub mod exec;
pub mod grpc;
mod grpc_coding;
pub mod rollout;

/// Latency summary of one run.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
}

impl Latency {
    /// Percentiles of samples in microseconds (sorted in place).
    pub fn from_micros(samples: &mut [f64]) -> Latency {
        samples.sort_by(f64::total_cmp);
        let pick = |q: f64| {
            if samples.is_empty() {
                return f64::NAN;
            }
            let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
            samples[i]
        };
        Latency {
            p50_us: pick(0.50),
            p99_us: pick(0.99),
        }
    }
}
