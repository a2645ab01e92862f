//! The page: one HTML file with its style, script and data inline. The data is JSON escaped for a
//! `<script type="application/json">` block, and the Content-Security-Policy admits the page's own
//! script by its SHA-256 and nothing else (no connections, no other scripts), so even text that
//! slipped through as markup could neither run nor fetch.

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::ReportData;

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("report.js");
const STYLE: &str = include_str!("report.css");

/// The whole page for `data`.
pub fn render(data: &ReportData) -> String {
    let json = serde_json::to_string(data).expect("report data serializes");
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(SCRIPT.as_bytes()));
    fill(
        PAGE,
        &[
            ("SCRIPT_HASH", &format!("sha256-{hash}")),
            ("TITLE", &escape_html(&data.title)),
            ("STYLE", STYLE),
            ("DATA", &escape_json_for_script(&json)),
            ("SCRIPT", SCRIPT),
        ],
    )
}

/// Replaces each `{{KEY}}` of `template` once, in one pass: inserted text is never scanned again,
/// so a value containing `{{DATA}}` stays literal.
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out =
        String::with_capacity(template.len() + values.iter().map(|v| v.1.len()).sum::<usize>());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}").and_then(|end| {
            let key = &after[..end];
            values
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (end, *v))
        }) {
            Some((end, value)) => {
                out.push_str(value);
                rest = &after[end + 2..];
            }
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Text for an HTML text node or a quoted attribute.
fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON that cannot end its `<script>` block or open a comment: `<`, `>` and `&` only occur inside
/// JSON strings, where `\u003c`-style escapes mean the same characters to `JSON.parse`; U+2028 and
/// U+2029 are escaped as well for older JavaScript parsers.
fn escape_json_for_script(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_cannot_close_the_data_block() {
        let json = serde_json::to_string(&serde_json::json!({
            "m": "</script><script>alert(1)</script><!-- \u{2028}"
        }))
        .unwrap();
        let safe = escape_json_for_script(&json);
        assert!(!safe.contains('<') && !safe.contains('>') && !safe.contains('\u{2028}'));
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["m"], "</script><script>alert(1)</script><!-- \u{2028}");
    }

    #[test]
    fn placeholders_in_values_stay_literal() {
        let out = fill(
            "<t>{{TITLE}}</t>{{DATA}}{{NOPE}}",
            &[("TITLE", "{{DATA}}"), ("DATA", "d")],
        );
        assert_eq!(out, "<t>{{DATA}}</t>d{{NOPE}}");
        assert_eq!(
            escape_html("<a href='x'>&\""),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;"
        );
    }
}
