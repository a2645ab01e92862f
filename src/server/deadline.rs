//! Client deadlines (`grpc-timeout`).
//!
//! tonic's transport answers CANCELLED when a client's deadline passes; the gRPC contract (and our
//! clients) expect DEADLINE_EXCEEDED. Handlers therefore race their work against the deadline
//! themselves and must finish before tonic's own timer.
//!
//! tonic starts its timer when the request arrives, while a unary handler only runs once the body
//! has been received and decoded, which on a loaded machine can take longer than any fixed margin.
//! So the deadline is measured from the arrival stamp that [`stamp_arrival`] puts on every request
//! before tonic's timer starts, never from the moment the handler happens to run.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::status::ServerError;

/// How much earlier than tonic's timer our own fires (tokio timers have 1 ms resolution).
const MARGIN: Duration = Duration::from_millis(2);

/// When a request reached the server (a request extension).
#[derive(Debug, Clone, Copy)]
struct Arrival(Instant);

/// Interceptor for the whole server: runs as the request arrives, before its body is read.
#[allow(clippy::result_large_err)] // the interceptor signature is tonic's
pub fn stamp_arrival(mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    req.extensions_mut().insert(Arrival(Instant::now()));
    Ok(req)
}

/// A client's deadline: the budget it asked for and the instant it runs out.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    budget: Duration,
    at: Instant,
}

/// The client's deadline from the `grpc-timeout` header, if any and well-formed.
pub fn from_request<T>(req: &tonic::Request<T>) -> Option<Deadline> {
    let value = req.metadata().get("grpc-timeout")?.to_str().ok()?;
    let budget = parse(value)?;
    let arrived = req
        .extensions()
        .get::<Arrival>()
        .map_or_else(Instant::now, |a| a.0);
    Some(Deadline {
        budget,
        at: arrived + budget,
    })
}

/// Parses the gRPC wire format: up to 8 digits and a unit (H, M, S, m, u, n).
fn parse(value: &str) -> Option<Duration> {
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Runs `work` within the deadline (no deadline: unbounded).
pub async fn within<T>(
    deadline: Option<Deadline>,
    work: impl Future<Output = Result<T, ServerError>>,
) -> Result<T, ServerError> {
    match deadline {
        None => work.await,
        Some(d) => {
            let fire = d.at.checked_sub(MARGIN).unwrap_or(d.at);
            tokio::time::timeout_at(fire, work)
                .await
                .unwrap_or(Err(ServerError::DeadlineExceeded(d.budget)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_grpc_timeout_units() {
        assert_eq!(parse("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse("10u"), Some(Duration::from_micros(10)));
        assert_eq!(parse("S"), None);
        assert_eq!(parse("12x"), None);
        assert_eq!(parse("123456789S"), None);
    }
}
