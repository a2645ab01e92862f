//! Client deadlines (`grpc-timeout`).
//!
//! tonic's transport answers CANCELLED when a client's deadline passes; the gRPC contract (and our
//! clients) expect DEADLINE_EXCEEDED. Handlers therefore race their work against the deadline
//! themselves, finishing a hair before tonic's own timer.

use std::future::Future;
use std::time::Duration;

use super::status::ServerError;

/// How much earlier than tonic's timer our own fires.
const MARGIN: Duration = Duration::from_millis(2);

/// The client's deadline from the `grpc-timeout` header, if any and well-formed.
pub fn from_request<T>(req: &tonic::Request<T>) -> Option<Duration> {
    let value = req.metadata().get("grpc-timeout")?.to_str().ok()?;
    parse(value)
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
    deadline: Option<Duration>,
    work: impl Future<Output = Result<T, ServerError>>,
) -> Result<T, ServerError> {
    match deadline {
        None => work.await,
        Some(d) => tokio::time::timeout(d.saturating_sub(MARGIN), work)
            .await
            .unwrap_or(Err(ServerError::DeadlineExceeded(d))),
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
