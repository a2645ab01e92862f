//! Data context for prompts (issue 13): a compact description of a task's CSV and JSON sample
//! files (columns, inferred types and nullability, basic statistics, a few sample rows), as
//! AutoCoder gives its model. Computed once per task, when the task is parsed ([`DataContext::of`]),
//! capped in size; the env reports it in `reset`'s info as `data_context`, and the rollout
//! engine's task template can include it (`{data_context}`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// Rows read from a file to infer types and statistics.
pub const MAX_ROWS_SCANNED: usize = 10_000;
/// Sample rows shown per file.
pub const SAMPLE_ROWS: usize = 3;
/// Longest context text (the rest is cut with a note).
pub const MAX_CONTEXT_CHARS: usize = 6_000;
/// Longest cell shown in a sample row.
const MAX_CELL_CHARS: usize = 40;

/// The rendered data context of a task's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataContext {
    pub text: String,
}

impl DataContext {
    /// The context of the CSV (`.csv`, `.tsv`) and JSON (`.json`, `.jsonl`) files among `files`;
    /// `None` when there are none.
    pub fn of(files: &BTreeMap<String, Arc<[u8]>>) -> Option<DataContext> {
        let mut text = String::new();
        for (name, bytes) in files {
            let lower = name.to_ascii_lowercase();
            let table = if lower.ends_with(".csv") {
                csv_table(bytes, b',')
            } else if lower.ends_with(".tsv") {
                csv_table(bytes, b'\t')
            } else if lower.ends_with(".jsonl") {
                jsonl_table(bytes)
            } else if lower.ends_with(".json") {
                json_table(bytes)
            } else {
                continue;
            };
            match table {
                Some(t) => describe(&mut text, name, &t),
                None => {
                    let _ = writeln!(text, "File {name}: could not be parsed as a table.\n");
                }
            }
        }
        if text.is_empty() {
            return None;
        }
        if text.chars().count() > MAX_CONTEXT_CHARS {
            text = text.chars().take(MAX_CONTEXT_CHARS).collect();
            text.push_str("\n[data context truncated]\n");
        }
        Some(DataContext {
            text: text.trim_end().to_string(),
        })
    }
}

/// A parsed table: column names, rows of cells (`None`: empty / null), the total row count.
struct Table {
    columns: Vec<String>,
    rows: Vec<Vec<Option<String>>>,
    total_rows: usize,
}

fn csv_table(bytes: &[u8], delimiter: u8) -> Option<Table> {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .flexible(true)
        .from_reader(bytes);
    let columns: Vec<String> = reader.headers().ok()?.iter().map(str::to_string).collect();
    let mut rows = Vec::new();
    let mut total_rows = 0;
    for record in reader.records() {
        let record = record.ok()?;
        total_rows += 1;
        if rows.len() < MAX_ROWS_SCANNED {
            rows.push(
                (0..columns.len())
                    .map(|i| {
                        record
                            .get(i)
                            .map(str::trim)
                            .filter(|c| !c.is_empty() && !is_null_word(c))
                            .map(str::to_string)
                    })
                    .collect(),
            );
        }
    }
    Some(Table {
        columns,
        rows,
        total_rows,
    })
}

fn is_null_word(c: &str) -> bool {
    matches!(
        c.to_ascii_lowercase().as_str(),
        "na" | "n/a" | "nan" | "null" | "none"
    )
}

/// JSON Lines of objects.
fn jsonl_table(bytes: &[u8]) -> Option<Table> {
    let text = std::str::from_utf8(bytes).ok()?;
    let objects = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).ok())
        .collect::<Option<Vec<serde_json::Value>>>()?;
    objects_table(objects)
}

/// A JSON array of objects, or an object holding one such array (its first).
fn json_table(bytes: &[u8]) -> Option<Table> {
    let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let array = match value {
        serde_json::Value::Array(a) => a,
        serde_json::Value::Object(o) => o.into_iter().find_map(|(_, v)| match v {
            serde_json::Value::Array(a) if a.iter().all(|x| x.is_object()) => Some(a),
            _ => None,
        })?,
        _ => return None,
    };
    objects_table(array)
}

fn objects_table(objects: Vec<serde_json::Value>) -> Option<Table> {
    let mut columns: Vec<String> = Vec::new();
    for o in objects.iter().take(MAX_ROWS_SCANNED) {
        for k in o.as_object()?.keys() {
            if !columns.contains(k) {
                columns.push(k.clone());
            }
        }
    }
    let total_rows = objects.len();
    let rows = objects
        .iter()
        .take(MAX_ROWS_SCANNED)
        .map(|o| {
            columns
                .iter()
                .map(|c| match o.get(c) {
                    None | Some(serde_json::Value::Null) => None,
                    Some(serde_json::Value::String(s)) => Some(s.clone()),
                    Some(v) => Some(v.to_string()),
                })
                .collect()
        })
        .collect();
    Some(Table {
        columns,
        rows,
        total_rows,
    })
}

/// A column's inferred type: the narrowest that every non-null cell parses as.
fn infer(cells: &[&str]) -> &'static str {
    let all = |f: &dyn Fn(&str) -> bool| !cells.is_empty() && cells.iter().all(|c| f(c));
    if all(&|c| c.parse::<i64>().is_ok()) {
        "int"
    } else if all(&|c| c.parse::<f64>().is_ok_and(f64::is_finite)) {
        "float"
    } else if all(&|c| matches!(c, "true" | "false" | "True" | "False")) {
        "bool"
    } else if all(&|c| super::outputs::parse_datetime(c).is_some()) {
        "datetime"
    } else {
        "str"
    }
}

fn describe(out: &mut String, name: &str, t: &Table) {
    let _ = writeln!(
        out,
        "File {name}: {} rows, {} columns{}",
        t.total_rows,
        t.columns.len(),
        if t.total_rows > t.rows.len() {
            format!(" (statistics over the first {})", t.rows.len())
        } else {
            String::new()
        }
    );
    for (i, col) in t.columns.iter().enumerate() {
        let cells: Vec<&str> = t
            .rows
            .iter()
            .filter_map(|r| r.get(i).and_then(|c| c.as_deref()))
            .collect();
        let nulls = t.rows.len() - cells.len();
        let kind = infer(&cells);
        let mut line = format!("  - {col}: {kind}");
        line.push_str(if nulls > 0 {
            ", nullable"
        } else {
            ", no nulls"
        });
        if nulls > 0 {
            let _ = write!(line, " ({nulls} null)");
        }
        match kind {
            "int" | "float" => {
                let xs: Vec<f64> = cells.iter().filter_map(|c| c.parse().ok()).collect();
                let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
                let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let mean = xs.iter().sum::<f64>() / xs.len().max(1) as f64;
                let _ = write!(line, ", min {min}, max {max}, mean {mean:.4}");
            }
            "str" | "datetime" => {
                let mut distinct: Vec<&str> = cells.clone();
                distinct.sort_unstable();
                distinct.dedup();
                let _ = write!(line, ", {} distinct", distinct.len());
                if kind == "datetime"
                    && let (Some(first), Some(last)) = (distinct.first(), distinct.last())
                {
                    let _ = write!(line, ", from {first} to {last}");
                }
            }
            _ => {}
        }
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "  sample rows:");
    let _ = writeln!(out, "    {}", t.columns.join(" | "));
    for row in t.rows.iter().take(SAMPLE_ROWS) {
        let cells: Vec<String> = row
            .iter()
            .map(|c| match c {
                Some(s) if s.chars().count() > MAX_CELL_CHARS => {
                    format!("{}…", s.chars().take(MAX_CELL_CHARS).collect::<String>())
                }
                Some(s) => s.clone(),
                None => "<null>".into(),
            })
            .collect();
        let _ = writeln!(out, "    {}", cells.join(" | "));
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(pairs: &[(&str, &str)]) -> BTreeMap<String, Arc<[u8]>> {
        pairs
            .iter()
            .map(|(n, t)| (n.to_string(), Arc::from(t.as_bytes())))
            .collect()
    }

    #[test]
    fn describes_csv_columns_types_nulls_and_samples() {
        let csv = "date,region,units,price\n2024-01-01,west,3,9.5\n2024-01-02,east,,12\n\
                   2024-01-03,west,5,7.25\n2024-01-04,\"north, far\",1,3\n";
        let ctx = DataContext::of(&files(&[("sales.csv", csv), ("notes.txt", "x")])).unwrap();
        let t = &ctx.text;
        assert!(t.contains("File sales.csv: 4 rows, 4 columns"), "{t}");
        assert!(t.contains("- date: datetime, no nulls"), "{t}");
        assert!(t.contains("- region: str, no nulls, 3 distinct"), "{t}");
        assert!(
            t.contains("- units: int, nullable (1 null), min 1, max 5"),
            "{t}"
        );
        assert!(t.contains("- price: float, no nulls, min 3, max 12"), "{t}");
        assert!(t.contains("2024-01-02 | east | <null> | 12"), "{t}");
        assert!(
            !t.contains("north, far"),
            "only {SAMPLE_ROWS} sample rows: {t}"
        );
        assert!(!t.contains("notes.txt"));
    }

    #[test]
    fn describes_json_and_caps_size() {
        let json = r#"{"items": [{"id": 1, "ok": true}, {"id": 2, "ok": false, "tag": "x"}]}"#;
        let ctx = DataContext::of(&files(&[("d.json", json)])).unwrap();
        assert!(ctx.text.contains("- id: int, no nulls"), "{}", ctx.text);
        assert!(ctx.text.contains("- ok: bool"), "{}", ctx.text);
        assert!(
            ctx.text.contains("- tag: str, nullable (1 null)"),
            "{}",
            ctx.text
        );
        assert!(DataContext::of(&files(&[("a.txt", "x")])).is_none());
        let wide: String = (0..2000).map(|i| format!("column_{i},")).collect();
        let big = DataContext::of(&files(&[("w.csv", &format!("{wide}\n"))])).unwrap();
        assert!(big.text.chars().count() <= MAX_CONTEXT_CHARS + 40);
        assert!(big.text.ends_with("[data context truncated]"));
        let broken = DataContext::of(&files(&[("b.json", "{not json")])).unwrap();
        assert!(broken.text.contains("could not be parsed"));
    }
}
