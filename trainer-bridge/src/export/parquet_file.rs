//! [`Table`] to Parquet with the low-level column writer: nested lists are encoded by hand as
//! repetition/definition levels, in the standard 3-level LIST layout that pyarrow (and so Hugging
//! Face `datasets`) reads as `list<...>` columns.

use std::io::Write;
use std::ops::Range;
use std::sync::Arc;

use parquet::basic::Compression;
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

use super::table::{ColumnData, Message, Table, TurnLists};

/// Rows per row group: bounds the writer's memory while keeping groups large enough to scan fast.
const ROW_GROUP_ROWS: usize = 4096;

/// Writes `table` to `out` as one Parquet file with `metadata` in the footer's key-value map.
pub fn write<W: Write + Send>(
    table: &Table,
    out: W,
    metadata: Vec<(String, String)>,
) -> parquet::errors::Result<()> {
    let schema = Arc::new(parse_message_type(&schema_text(table))?);
    let kv = metadata
        .into_iter()
        .map(|(k, v)| KeyValue::new(k, v))
        .collect();
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_key_value_metadata(Some(kv))
        .set_created_by(format!(
            "codegym trainer-bridge {}",
            env!("CARGO_PKG_VERSION")
        ))
        .build();
    let mut writer = SerializedFileWriter::new(out, schema, Arc::new(props))?;
    let rows = table.num_rows();
    let mut start = 0;
    // An empty table still gets one (empty) row group so that readers see the schema's columns.
    loop {
        let end = (start + ROW_GROUP_ROWS).min(rows);
        let leaves: Vec<Leaf> = table
            .columns
            .iter()
            .flat_map(|(_, c)| leaves(c, start..end))
            .collect();
        let mut group = writer.next_row_group()?;
        let mut leaves = leaves.into_iter();
        while let Some(mut col) = group.next_column()? {
            let Some(leaf) = leaves.next() else {
                return Err(parquet::errors::ParquetError::General(
                    "schema has more leaves than the table".into(),
                ));
            };
            let (def, rep) = (leaf.def.as_deref(), leaf.rep.as_deref());
            match leaf.values {
                Values::Bytes(v) => col.typed::<ByteArrayType>().write_batch(&v, def, rep)?,
                Values::I64(v) => col.typed::<Int64Type>().write_batch(&v, def, rep)?,
                Values::F64(v) => col.typed::<DoubleType>().write_batch(&v, def, rep)?,
                Values::Bool(v) => col.typed::<BoolType>().write_batch(&v, def, rep)?,
            };
            col.close()?;
        }
        group.close()?;
        start = end;
        if start >= rows {
            break;
        }
    }
    writer.close()?;
    Ok(())
}

fn schema_text(table: &Table) -> String {
    let mut s = String::from("message codegym_export {\n");
    for (name, col) in &table.columns {
        let field = match col {
            ColumnData::Str(_) => format!("required binary {name} (STRING);"),
            ColumnData::OptStr(_) => format!("optional binary {name} (STRING);"),
            ColumnData::I64(_) => format!("required int64 {name};"),
            ColumnData::F64(_) => format!("required double {name};"),
            ColumnData::OptF64(_) => format!("optional double {name};"),
            ColumnData::Bool(_) => format!("required boolean {name};"),
            ColumnData::Messages(_) => format!(
                "required group {name} (LIST) {{ repeated group list {{ required group element {{ \
                 required binary role (STRING); optional binary content (STRING); \
                 optional binary tool_calls_json (STRING); optional binary tool_call_id (STRING); }} }} }}"
            ),
            ColumnData::OptI64List(_) => {
                format!(
                    "optional group {name} (LIST) {{ repeated group list {{ required int64 element; }} }}"
                )
            }
            ColumnData::I64Lists(_) | ColumnData::F64Lists(_) => {
                let t = if matches!(col, ColumnData::I64Lists(_)) {
                    "int64"
                } else {
                    "double"
                };
                format!(
                    "optional group {name} (LIST) {{ repeated group list {{ optional group element (LIST) {{ \
                     repeated group list {{ required {t} element; }} }} }} }}"
                )
            }
        };
        s.push_str("  ");
        s.push_str(&field);
        s.push('\n');
    }
    s.push('}');
    s
}

enum Values {
    Bytes(Vec<ByteArray>),
    I64(Vec<i64>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
}

/// One leaf column's values with its levels (`None` for required, non-repeated leaves).
struct Leaf {
    values: Values,
    def: Option<Vec<i16>>,
    rep: Option<Vec<i16>>,
}

fn bytes(s: &str) -> ByteArray {
    ByteArray::from(s.as_bytes().to_vec())
}

fn leaves(col: &ColumnData, rows: Range<usize>) -> Vec<Leaf> {
    let flat = |values| Leaf {
        values,
        def: None,
        rep: None,
    };
    match col {
        ColumnData::Str(v) => vec![flat(Values::Bytes(
            v[rows].iter().map(|s| bytes(s)).collect(),
        ))],
        ColumnData::I64(v) => vec![flat(Values::I64(v[rows].to_vec()))],
        ColumnData::F64(v) => vec![flat(Values::F64(v[rows].to_vec()))],
        ColumnData::Bool(v) => vec![flat(Values::Bool(v[rows].to_vec()))],
        ColumnData::OptStr(v) => {
            let v = &v[rows];
            let def = v.iter().map(|s| i16::from(s.is_some())).collect();
            let values = v.iter().flatten().map(|s| bytes(s)).collect();
            vec![Leaf {
                values: Values::Bytes(values),
                def: Some(def),
                rep: None,
            }]
        }
        ColumnData::OptF64(v) => {
            let v = &v[rows];
            vec![Leaf {
                values: Values::F64(v.iter().flatten().copied().collect()),
                def: Some(v.iter().map(|x| i16::from(x.is_some())).collect()),
                rep: None,
            }]
        }
        ColumnData::Messages(v) => {
            let v = &v[rows];
            vec![
                message_leaf(v, |m| Some(m.role.as_str()), false),
                message_leaf(v, |m| m.content.as_deref(), true),
                message_leaf(v, |m| m.tool_calls_json.as_deref(), true),
                message_leaf(v, |m| m.tool_call_id.as_deref(), true),
            ]
        }
        ColumnData::OptI64List(v) => {
            let (mut values, mut def, mut rep) = (Vec::new(), Vec::new(), Vec::new());
            for row in &v[rows] {
                match row {
                    None => {
                        def.push(0);
                        rep.push(0);
                    }
                    Some(xs) if xs.is_empty() => {
                        def.push(1);
                        rep.push(0);
                    }
                    Some(xs) => {
                        for (j, x) in xs.iter().enumerate() {
                            values.push(*x);
                            def.push(2);
                            rep.push(i16::from(j > 0));
                        }
                    }
                }
            }
            vec![Leaf {
                values: Values::I64(values),
                def: Some(def),
                rep: Some(rep),
            }]
        }
        ColumnData::I64Lists(v) => {
            let (values, def, rep) = nested(&v[rows]);
            vec![Leaf {
                values: Values::I64(values),
                def: Some(def),
                rep: Some(rep),
            }]
        }
        ColumnData::F64Lists(v) => {
            let (values, def, rep) = nested(&v[rows]);
            vec![Leaf {
                values: Values::F64(values),
                def: Some(def),
                rep: Some(rep),
            }]
        }
    }
}

/// One field of `list<struct>`: max definition level 1 (list entry) or 2 (optional field set).
fn message_leaf(
    rows: &[Vec<Message>],
    field: impl Fn(&Message) -> Option<&str>,
    optional: bool,
) -> Leaf {
    let (mut values, mut def, mut rep) = (Vec::new(), Vec::new(), Vec::new());
    for messages in rows {
        if messages.is_empty() {
            def.push(0);
            rep.push(0);
        }
        for (j, m) in messages.iter().enumerate() {
            rep.push(i16::from(j > 0));
            match field(m) {
                Some(s) => {
                    values.push(bytes(s));
                    def.push(if optional { 2 } else { 1 });
                }
                None => def.push(1),
            }
        }
    }
    Leaf {
        values: Values::Bytes(values),
        def: Some(def),
        rep: Some(rep),
    }
}

/// Levels of `optional list<optional list<required T>>`: definition 0 null, 1 empty, 2 null
/// turn, 3 empty turn, 4 value; repetition 0 new row, 1 new turn, 2 next value of a turn.
fn nested<T: Copy>(rows: &[TurnLists<T>]) -> (Vec<T>, Vec<i16>, Vec<i16>) {
    let (mut values, mut def, mut rep) = (Vec::new(), Vec::new(), Vec::new());
    for row in rows {
        let Some(turns) = row else {
            def.push(0);
            rep.push(0);
            continue;
        };
        if turns.is_empty() {
            def.push(1);
            rep.push(0);
        }
        for (i, turn) in turns.iter().enumerate() {
            let first = i16::from(i > 0);
            match turn {
                None => {
                    def.push(2);
                    rep.push(first);
                }
                Some(xs) if xs.is_empty() => {
                    def.push(3);
                    rep.push(first);
                }
                Some(xs) => {
                    for (j, x) in xs.iter().enumerate() {
                        values.push(*x);
                        def.push(4);
                        rep.push(if j == 0 { first } else { 2 });
                    }
                }
            }
        }
    }
    (values, def, rep)
}
