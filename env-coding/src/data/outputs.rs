//! Typed outputs (issue 13): the types a task may declare, how the file a program wrote to
//! `outputs/<name>` is parsed by its type ([`parse`]), and reading the declared outputs from a
//! finished run's work dir ([`collect`]) with the sandbox's safe file access (`openat2` beneath the
//! work dir, no symlinks, regular single-link files only: the program may have planted anything).
//!
//! Every failure (missing file, wrong type, too large) is an [`OutputValue::Error`]: an outcome of
//! the program, scored as a wrong output, never a server error.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use chrono::{DateTime, NaiveDate, NaiveDateTime};
use env_core::OutputValue;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::OUTPUTS_DIR;

/// Largest output file read back (a `file` output's content travels in the result).
pub const MAX_OUTPUT_BYTES: u64 = 1 << 20;

/// The declared type of an output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputType {
    /// UTF-8 text; one trailing newline is dropped (`print(x, file=f)`).
    Str,
    /// A decimal integer that fits in 64 bits.
    Int,
    /// A finite decimal number (an integer is a float too).
    Float,
    /// `true`/`false`, `True`/`False`, `1`/`0`.
    Bool,
    /// ISO 8601 (`2024-05-01`, `2024-05-01T12:00:00`, with or without an offset); reported as ISO
    /// 8601 text, naive times read as UTC when compared.
    Datetime,
    /// Seconds (`90.5`) or Python's `str(timedelta)` (`1 day, 2:03:04.5`, `0:01:30`); reported
    /// as seconds.
    Timedelta,
    /// Any bytes: reported as `{"size", "text"}` when UTF-8, else `{"size", "base64"}`.
    File,
}

/// An output name: one path component of letters, digits, `_`, `-`, `.` (not `.` or `..`).
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "outputs: {name:?} is not a valid output name ([A-Za-z0-9_.-], at most 64)"
        ))
    }
}

/// The declared outputs, as the reader the sandbox calls after a run.
pub(crate) struct Declared(pub BTreeMap<String, OutputType>);

impl codegym_sandbox::CollectOutputs for Declared {
    fn collect(&self, workdir: &Path) -> BTreeMap<String, OutputValue> {
        collect(workdir, &self.0)
    }
}

/// Reads and parses every declared output of a finished run from `workdir/outputs/`.
pub fn collect(
    workdir: &Path,
    declared: &BTreeMap<String, OutputType>,
) -> BTreeMap<String, OutputValue> {
    declared
        .iter()
        .map(|(name, kind)| {
            let rel = format!("{OUTPUTS_DIR}/{name}");
            let value = match codegym_sandbox::read_beneath(workdir, &rel, MAX_OUTPUT_BYTES) {
                Ok((_, true)) => {
                    OutputValue::Error(format!("{rel}: larger than {MAX_OUTPUT_BYTES} bytes"))
                }
                Ok((bytes, false)) => parse(*kind, &bytes),
                Err(e) if e.contains("ENOENT") => {
                    OutputValue::Error(format!("missing: the program did not write {rel}"))
                }
                Err(e) => OutputValue::Error(e),
            };
            (name.clone(), value)
        })
        .collect()
}

/// Parses one output file by its type.
pub fn parse(kind: OutputType, bytes: &[u8]) -> OutputValue {
    if kind == OutputType::File {
        let size = bytes.len();
        return OutputValue::Value(match std::str::from_utf8(bytes) {
            Ok(t) => json!({"size": size, "text": t}),
            Err(_) => json!({
                "size": size,
                "base64": base64::engine::general_purpose::STANDARD.encode(bytes),
            }),
        });
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return OutputValue::Error(format!("{}: not UTF-8 text", name(kind)));
    };
    let result = match kind {
        OutputType::Str => {
            let t = text.strip_suffix('\n').unwrap_or(text);
            Some(json!(t.strip_suffix('\r').unwrap_or(t)))
        }
        OutputType::Int => text.trim().parse::<i64>().map(|i| json!(i)).ok(),
        OutputType::Float => text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .map(|x| json!(x)),
        OutputType::Bool => match text.trim() {
            "true" | "True" | "1" => Some(json!(true)),
            "false" | "False" | "0" => Some(json!(false)),
            _ => None,
        },
        OutputType::Datetime => parse_datetime(text.trim()).map(|(iso, _)| json!(iso)),
        OutputType::Timedelta => parse_timedelta(text.trim()).map(|s| json!(s)),
        OutputType::File => None, // handled above
    }
    .ok_or(());
    match result {
        Ok(v) => OutputValue::Value(v),
        Err(()) => {
            let shown: String = text.chars().take(80).collect();
            OutputValue::Error(format!("not a valid {}: {shown:?}", name(kind)))
        }
    }
}

fn name(kind: OutputType) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// An ISO 8601 datetime: its normalised text and its instant in seconds (naive times as UTC).
pub fn parse_datetime(s: &str) -> Option<(String, f64)> {
    let secs = |n: NaiveDateTime| n.and_utc().timestamp_micros() as f64 / 1e6;
    if let Ok(d) = DateTime::parse_from_rfc3339(s) {
        return Some((d.to_rfc3339(), d.timestamp_micros() as f64 / 1e6));
    }
    for fmt in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(n) = NaiveDateTime::parse_from_str(s, fmt) {
            return Some((n.format("%Y-%m-%dT%H:%M:%S%.f").to_string(), secs(n)));
        }
    }
    let d = NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    let n = d.and_hms_opt(0, 0, 0)?;
    Some((n.format("%Y-%m-%dT%H:%M:%S").to_string(), secs(n)))
}

/// Seconds, from a number or Python's `str(timedelta)` (`[-]D day[s], H:MM:SS[.f]`).
pub fn parse_timedelta(s: &str) -> Option<f64> {
    if let Ok(x) = s.parse::<f64>() {
        return x.is_finite().then_some(x);
    }
    let (days, clock) = match s.split_once(", ") {
        Some((d, c)) => {
            let n = d.strip_suffix(" days").or_else(|| d.strip_suffix(" day"))?;
            (n.trim().parse::<i64>().ok()?, c)
        }
        None => (0, s),
    };
    let mut parts = clock.split(':');
    let (h, m, sec) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || m.len() != 2 || !sec.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let h: u64 = h.parse().ok()?;
    let m: u64 = m.parse().ok()?;
    let sec: f64 = sec.parse().ok()?;
    if m >= 60 || !(0.0..60.0).contains(&sec) {
        return None;
    }
    Some(days as f64 * 86_400.0 + (h * 3600 + m * 60) as f64 + sec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(kind: OutputType, s: &str) -> serde_json::Value {
        match parse(kind, s.as_bytes()) {
            OutputValue::Value(v) => v,
            OutputValue::Error(e) => panic!("{s:?}: {e}"),
        }
    }

    fn bad(kind: OutputType, s: &[u8]) -> bool {
        matches!(parse(kind, s), OutputValue::Error(_))
    }

    #[test]
    fn parses_each_type() {
        use OutputType::*;
        assert_eq!(ok(Str, "west\n"), json!("west"));
        assert_eq!(ok(Int, " 42\n"), json!(42));
        assert_eq!(ok(Float, "3.5"), json!(3.5));
        assert_eq!(ok(Float, "7"), json!(7.0));
        assert_eq!(ok(Bool, "True\n"), json!(true));
        assert_eq!(ok(Datetime, "2024-05-01"), json!("2024-05-01T00:00:00"));
        assert_eq!(
            ok(Datetime, "2024-05-01 12:30:00.5"),
            json!("2024-05-01T12:30:00.500")
        );
        assert_eq!(
            ok(Datetime, "2024-05-01T12:00:00+02:00"),
            json!("2024-05-01T12:00:00+02:00")
        );
        assert_eq!(ok(Timedelta, "90.5"), json!(90.5));
        assert_eq!(ok(Timedelta, "0:01:30"), json!(90.0));
        assert_eq!(ok(Timedelta, "2 days, 1:00:00.25"), json!(176_400.25));
        assert_eq!(ok(File, "a,b\n"), json!({"size": 4, "text": "a,b\n"}));
        assert_eq!(
            parse(File, &[0xff]),
            OutputValue::Value(json!({"size": 1, "base64": "/w=="}))
        );
    }

    #[test]
    fn malformed_outputs_are_errors() {
        use OutputType::*;
        assert!(bad(Int, b"4.2"));
        assert!(bad(Int, b"99999999999999999999"));
        assert!(bad(Float, b"nan"));
        assert!(bad(Float, b"12,5"));
        assert!(bad(Bool, b"yes"));
        assert!(bad(Datetime, b"yesterday"));
        assert!(bad(Timedelta, b"1:99:00"));
        assert!(bad(Str, &[0xff, 0xfe]));
    }

    #[test]
    fn names() {
        assert!(check_name("total_revenue.v2").is_ok());
        for bad in ["", ".", "..", "a/b", "a b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
