//! Which failures are retried and how long to wait: the convention of the official OpenAI SDKs
//! (retry connect errors, timeouts, 408, 409, 429 and 5xx; honour `x-should-retry`, then
//! `retry-after-ms`, then `retry-after`; otherwise exponential backoff with full jitter and a cap).

use std::time::{Duration, SystemTime};

use rand::Rng;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;

use trajectory::record::ErrorKind;

/// Classifies an HTTP error response. `body` is the (possibly truncated) response text.
pub fn classify_status(status: StatusCode, body: &str) -> ErrorKind {
    let lower = body.to_ascii_lowercase();
    match status.as_u16() {
        400 | 413 | 422 if is_context_length(&lower) => ErrorKind::ContextLength,
        401 | 403 => ErrorKind::Auth,
        404 => ErrorKind::NotFound,
        429 if lower.contains("insufficient_quota")
            || lower.contains("billing")
            || lower.contains("exceeded your current quota") =>
        {
            ErrorKind::QuotaExceeded
        }
        429 => ErrorKind::RateLimited,
        408 | 409 => ErrorKind::ServerError,
        s if s >= 500 => ErrorKind::ServerError,
        _ => ErrorKind::BadRequest,
    }
}

/// Phrases servers use for prompts that do not fit (OpenAI, vLLM, TGI, SGLang, Anthropic-style).
fn is_context_length(lower: &str) -> bool {
    [
        "context_length_exceeded",
        "context length",
        "maximum context",
        "context window",
        "prompt is too long",
        "too many tokens",
        "input is too long",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

/// Whether an error of this kind is worth another attempt, before headers are considered.
pub fn is_retryable(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Connect
            | ErrorKind::RequestTimeout
            | ErrorKind::RateLimited
            | ErrorKind::ServerError
    )
}

/// The server's explicit verdict in `x-should-retry`, when present and readable.
pub fn should_retry_header(headers: &HeaderMap) -> Option<bool> {
    match headers.get("x-should-retry")?.to_str().ok()?.trim() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// The delay the server asked for: `retry-after-ms` (milliseconds, fractional allowed), then
/// `retry-after` (seconds or an HTTP date). Delays beyond `cap` are ignored (the SDKs do the same
/// with their 60 s cap), so a misbehaving server cannot park an episode for hours.
pub fn server_delay(headers: &HeaderMap, cap: Duration) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let delay = if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        duration_from_secs(ms / 1000.0)
    } else {
        let v = text("retry-after")?;
        match v.parse::<f64>() {
            Ok(secs) => duration_from_secs(secs),
            Err(_) => httpdate::parse_http_date(v).ok().map(|at| {
                at.duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO)
            }),
        }
    }?;
    (delay <= cap).then_some(delay)
}

fn duration_from_secs(secs: f64) -> Option<Duration> {
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

/// Full-jitter exponential backoff: uniform in `[0, min(cap, initial * 2^(attempt-1))]`.
pub fn backoff(attempt: u32, initial: Duration, cap: Duration) -> Duration {
    let exp = initial.saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
    let ceiling = exp.min(cap);
    let ms = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(rand::rng().random_range(0..=ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn classifies_statuses_like_the_sdks() {
        let c = |s: u16, b: &str| classify_status(StatusCode::from_u16(s).unwrap(), b);
        assert_eq!(
            c(400, "This model's maximum context length is 8192 tokens"),
            ErrorKind::ContextLength
        );
        assert_eq!(c(400, "bad field"), ErrorKind::BadRequest);
        assert_eq!(c(401, ""), ErrorKind::Auth);
        assert_eq!(c(404, ""), ErrorKind::NotFound);
        assert_eq!(c(429, "slow down"), ErrorKind::RateLimited);
        assert_eq!(
            c(429, r#"{"error":{"code":"insufficient_quota"}}"#),
            ErrorKind::QuotaExceeded
        );
        assert_eq!(c(408, ""), ErrorKind::ServerError);
        assert_eq!(c(503, ""), ErrorKind::ServerError);
        assert!(!is_retryable(ErrorKind::QuotaExceeded));
        assert!(is_retryable(ErrorKind::RateLimited));
    }

    #[test]
    fn reads_retry_headers() {
        let cap = Duration::from_secs(60);
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(server_delay(&h, cap), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(server_delay(&h, cap), Some(Duration::from_millis(150)));
        let mut far = HeaderMap::new();
        far.insert("retry-after", HeaderValue::from_static("3600"));
        assert_eq!(server_delay(&far, cap), None);
        let mut date = HeaderMap::new();
        let past = httpdate::fmt_http_date(SystemTime::now() - Duration::from_secs(5));
        date.insert("retry-after", HeaderValue::from_str(&past).unwrap());
        assert_eq!(server_delay(&date, cap), Some(Duration::ZERO));
        h.insert("x-should-retry", HeaderValue::from_static("false"));
        assert_eq!(should_retry_header(&h), Some(false));
    }

    #[test]
    fn backoff_stays_under_its_ceiling() {
        let (i, cap) = (Duration::from_millis(100), Duration::from_millis(1_000));
        for attempt in 1..40 {
            let ceiling = (i * 2u32.pow(attempt.min(20) - 1)).min(cap);
            assert!(backoff(attempt, i, cap) <= ceiling);
        }
    }
}
