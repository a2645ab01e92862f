//! The server's Prometheus metrics: their names, labels and the helpers the handlers call.
//!
//! Like every library in the workspace, the server only emits through the `metrics` facade; when no
//! recorder is installed (tests, embedding) each call is a no-op. The binary installs the Prometheus
//! exporter for `codegym serve --metrics-addr` (`src/cli/metrics.rs`). The sandbox's own metrics
//! (executions, run latency, queue depth, fork-server restarts) are named in
//! `codegym_sandbox::metrics`; the rollout engine's in `rollout::metrics`.

use env_core::Step;
use metrics::{counter, describe_counter, describe_gauge, gauge};

/// Sessions open now (unary, stream and HTTP WebSocket): the session cap's used slots.
pub const SESSIONS_OPEN: &str = "codegym_sessions_open";
/// Env steps answered over gRPC (unary `Step` and the `Session` stream; not the HTTP facades), by
/// `outcome`: `running`, `terminated` or `truncated`.
pub const STEPS: &str = "codegym_steps_total";
/// Failed requests, by gRPC `code` (the name, e.g. `RESOURCE_EXHAUSTED`): one per status sent,
/// unary or on a `Session` stream.
pub const GRPC_ERRORS: &str = "codegym_grpc_errors_total";

/// Registers the help texts (shown as `# HELP` lines). Called once by the exporter's installer.
pub fn describe() {
    describe_gauge!(
        SESSIONS_OPEN,
        "Sessions open now (unary, stream, HTTP WebSocket)"
    );
    describe_counter!(STEPS, "Env steps answered, by outcome");
    describe_counter!(GRPC_ERRORS, "Failed requests, by gRPC status code");
    codegym_sandbox::metrics::describe();
}

/// One answered step.
pub fn step<T>(step: &Step<T>) {
    let outcome = if step.terminated {
        "terminated"
    } else if step.truncated {
        "truncated"
    } else {
        "running"
    };
    counter!(STEPS, "outcome" => outcome).increment(1);
}

/// One failed request, answered with `code`.
pub fn grpc_error(code: tonic::Code) {
    counter!(GRPC_ERRORS, "code" => code_name(code)).increment(1);
}

/// A session slot taken (`+1`) or freed (`-1`).
pub(crate) fn session_slots(delta: f64) {
    gauge!(SESSIONS_OPEN).increment(delta);
}

/// gRPC's canonical upper-case code names, as in the protocol spec and grpcurl's output.
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}
