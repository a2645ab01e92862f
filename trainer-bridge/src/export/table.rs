//! A small columnar table: the one description of an export's schema, written both as JSON Lines
//! and as Parquet, so the two formats cannot drift apart.

use serde_json::{Map, Value};

/// A chat message as exported: OpenAI/TRL conversational format.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: String,
    /// `None` for assistant messages that only call tools.
    pub content: Option<String>,
    /// The assistant's tool calls as JSON text. A string, not a list: chat templates iterate
    /// `tool_calls` when present, so only a field of another name can carry them losslessly.
    pub tool_calls_json: Option<String>,
    /// For `role: tool`: the call answered.
    pub tool_call_id: Option<String>,
}

/// Per-turn lists (token ids or logprobs); a turn is `None` when the server returned none for it,
/// the whole value is `None` when no turn had any.
pub type TurnLists<T> = Option<Vec<Option<Vec<T>>>>;

/// One column's values, one per row.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnData {
    Str(Vec<String>),
    OptStr(Vec<Option<String>>),
    I64(Vec<i64>),
    F64(Vec<f64>),
    /// Nullable: a masked row's reward and advantage (null, never a stand-in number).
    OptF64(Vec<Option<f64>>),
    Bool(Vec<bool>),
    Messages(Vec<Vec<Message>>),
    OptI64List(Vec<Option<Vec<i64>>>),
    I64Lists(Vec<TurnLists<i64>>),
    F64Lists(Vec<TurnLists<f64>>),
}

impl ColumnData {
    pub fn len(&self) -> usize {
        match self {
            ColumnData::Str(v) => v.len(),
            ColumnData::OptStr(v) => v.len(),
            ColumnData::I64(v) => v.len(),
            ColumnData::F64(v) => v.len(),
            ColumnData::OptF64(v) => v.len(),
            ColumnData::Bool(v) => v.len(),
            ColumnData::Messages(v) => v.len(),
            ColumnData::OptI64List(v) => v.len(),
            ColumnData::I64Lists(v) => v.len(),
            ColumnData::F64Lists(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `i` as JSON (the JSONL form).
    fn json(&self, i: usize) -> Value {
        fn lists<T: Clone + Into<Value>>(v: &TurnLists<T>) -> Value {
            match v {
                None => Value::Null,
                Some(turns) => Value::Array(
                    turns
                        .iter()
                        .map(|t| t.as_ref().map_or(Value::Null, |xs| Value::from(xs.clone())))
                        .collect(),
                ),
            }
        }
        match self {
            ColumnData::Str(v) => Value::from(v[i].clone()),
            ColumnData::OptStr(v) => v[i].clone().map_or(Value::Null, Value::from),
            ColumnData::I64(v) => Value::from(v[i]),
            // JSON has no NaN; the exporters only produce finite floats, this is a guard.
            ColumnData::F64(v) => {
                serde_json::Number::from_f64(v[i]).map_or(Value::Null, Value::Number)
            }
            ColumnData::OptF64(v) => v[i]
                .and_then(serde_json::Number::from_f64)
                .map_or(Value::Null, Value::Number),
            ColumnData::Bool(v) => Value::from(v[i]),
            ColumnData::Messages(v) => Value::Array(v[i].iter().map(message_json).collect()),
            ColumnData::OptI64List(v) => v[i].clone().map_or(Value::Null, Value::from),
            ColumnData::I64Lists(v) => lists(&v[i]),
            ColumnData::F64Lists(v) => lists(&v[i]),
        }
    }
}

fn message_json(m: &Message) -> Value {
    let opt = |s: &Option<String>| s.clone().map_or(Value::Null, Value::from);
    let mut map = Map::new();
    map.insert("role".into(), Value::from(m.role.clone()));
    map.insert("content".into(), opt(&m.content));
    map.insert("tool_calls_json".into(), opt(&m.tool_calls_json));
    map.insert("tool_call_id".into(), opt(&m.tool_call_id));
    Value::Object(map)
}

/// Named columns of equal length.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    pub columns: Vec<(&'static str, ColumnData)>,
}

impl Table {
    pub fn push(&mut self, name: &'static str, data: ColumnData) {
        self.columns.push((name, data));
    }

    pub fn num_rows(&self) -> usize {
        self.columns.first().map_or(0, |(_, c)| c.len())
    }

    /// How many rows of the boolean column `name` are true (0 without such a column).
    pub fn count_true(&self, name: &str) -> usize {
        self.columns
            .iter()
            .find_map(|(n, c)| match c {
                ColumnData::Bool(v) if *n == name => Some(v.iter().filter(|b| **b).count()),
                _ => None,
            })
            .unwrap_or(0)
    }

    /// Writes row `i` as one JSON object with keys in column order (the Parquet order), which a
    /// `serde_json::Map` would sort.
    pub fn write_row_json(&self, i: usize, w: &mut impl std::io::Write) -> std::io::Result<()> {
        w.write_all(b"{")?;
        for (k, (name, col)) in self.columns.iter().enumerate() {
            if k > 0 {
                w.write_all(b",")?;
            }
            serde_json::to_writer(&mut *w, name)?;
            w.write_all(b":")?;
            serde_json::to_writer(&mut *w, &col.json(i))?;
        }
        w.write_all(b"}")
    }

    /// Row `i` as a JSON object.
    pub fn row_json(&self, i: usize) -> Value {
        let mut map = Map::new();
        for (name, col) in &self.columns {
            map.insert((*name).to_string(), col.json(i));
        }
        Value::Object(map)
    }
}
