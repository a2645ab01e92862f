//! Python values as the differential runner reports them, decoded on the host.
//!
//! The runner (`runner.py`) copies every value a function returns into a tagged JSON form that
//! keeps Python's types apart (a tuple is not a list, `True` is not `1`): the host compares these,
//! never objects of the candidate's making. Integers travel as decimal text (no size limit), floats
//! as their IEEE-754 bits (exact, NaN and infinities included), anything that is not plain builtin
//! data as an opaque `{"o": type name}` that equals nothing.

use std::collections::BTreeMap;

use serde_json::Value;

/// One decoded Python value.
#[derive(Debug, Clone, PartialEq)]
pub enum PyVal {
    None,
    Bool(bool),
    /// Decimal digits with an optional leading `-` (canonical: no leading zeros, no `-0`).
    Int(String),
    Float(f64),
    Complex(f64, f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<PyVal>),
    Tuple(Vec<PyVal>),
    /// `set` or `frozenset` (Python compares them with each other).
    Set {
        frozen: bool,
        items: Vec<PyVal>,
    },
    Dict(Vec<(PyVal, PyVal)>),
    /// A value that is not plain builtin data (its type's name): equal to nothing.
    Opaque(String),
}

/// Deepest nesting decoded (the runner refuses deeper values first).
const MAX_DEPTH: usize = 256;

impl PyVal {
    /// Decodes the runner's tagged form.
    pub fn decode(v: &Value) -> Result<PyVal, String> {
        Self::decode_at(v, 0)
    }

    fn decode_at(v: &Value, depth: usize) -> Result<PyVal, String> {
        if depth > MAX_DEPTH {
            return Err("value nested too deeply".into());
        }
        let obj = match v {
            Value::Null => return Ok(PyVal::None),
            Value::Bool(b) => return Ok(PyVal::Bool(*b)),
            Value::Object(o) if o.len() == 1 => o,
            other => return Err(format!("malformed value {}", short(other))),
        };
        let (tag, body) = obj.iter().next().ok_or("empty value")?;
        let items = |body: &Value| -> Result<Vec<PyVal>, String> {
            body.as_array()
                .ok_or_else(|| format!("{tag}: expected an array"))?
                .iter()
                .map(|x| Self::decode_at(x, depth + 1))
                .collect()
        };
        let bits = |x: &Value| -> Result<f64, String> {
            x.as_str()
                .and_then(|s| s.parse::<u64>().ok())
                .map(f64::from_bits)
                .ok_or_else(|| format!("{tag}: expected float bits"))
        };
        Ok(match tag.as_str() {
            "i" => {
                let s = body.as_str().ok_or("i: expected digits")?;
                PyVal::Int(canonical_int(s).ok_or_else(|| format!("i: bad digits {s:?}"))?)
            }
            "f" => PyVal::Float(bits(body)?),
            "c" => match body.as_array().map(Vec::as_slice) {
                Some([re, im]) => PyVal::Complex(bits(re)?, bits(im)?),
                _ => return Err("c: expected [re, im]".into()),
            },
            "s" => PyVal::Str(body.as_str().ok_or("s: expected a string")?.to_string()),
            "b" => PyVal::Bytes(hex(body.as_str().ok_or("b: expected hex")?)?),
            "l" => PyVal::List(items(body)?),
            "t" => PyVal::Tuple(items(body)?),
            "S" | "F" => PyVal::Set {
                frozen: tag == "F",
                items: items(body)?,
            },
            "d" => PyVal::Dict(
                body.as_array()
                    .ok_or("d: expected pairs")?
                    .iter()
                    .map(|p| match p.as_array().map(Vec::as_slice) {
                        Some([k, v]) => Ok((
                            Self::decode_at(k, depth + 1)?,
                            Self::decode_at(v, depth + 1)?,
                        )),
                        _ => Err("d: expected [key, value] pairs".to_string()),
                    })
                    .collect::<Result<_, _>>()?,
            ),
            "o" => PyVal::Opaque(body.as_str().unwrap_or("?").to_string()),
            other => return Err(format!("unknown value tag {other:?}")),
        })
    }

    /// The Python type's name (`type(x).__name__`).
    pub fn type_name(&self) -> &str {
        match self {
            PyVal::None => "NoneType",
            PyVal::Bool(_) => "bool",
            PyVal::Int(_) => "int",
            PyVal::Float(_) => "float",
            PyVal::Complex(..) => "complex",
            PyVal::Str(_) => "str",
            PyVal::Bytes(_) => "bytes",
            PyVal::List(_) => "list",
            PyVal::Tuple(_) => "tuple",
            PyVal::Set { frozen: false, .. } => "set",
            PyVal::Set { frozen: true, .. } => "frozenset",
            PyVal::Dict(_) => "dict",
            PyVal::Opaque(t) => t,
        }
    }

    /// The type name of an opaque value in this one, if any (a reference returning one cannot
    /// define an expected output).
    pub fn opaque_part(&self) -> Option<&str> {
        match self {
            PyVal::Opaque(t) => Some(t),
            PyVal::List(x) | PyVal::Tuple(x) | PyVal::Set { items: x, .. } => {
                x.iter().find_map(PyVal::opaque_part)
            }
            PyVal::Dict(pairs) => pairs
                .iter()
                .find_map(|(k, v)| k.opaque_part().or_else(|| v.opaque_part())),
            _ => None,
        }
    }

    /// The value as a number (bool, int, float), when it is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            PyVal::Bool(b) => Some(f64::from(u8::from(*b))),
            PyVal::Int(s) => s.parse().ok(),
            PyVal::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// A short, capped rendering for verdict messages (Python-like).
    pub fn render(&self) -> String {
        let mut s = String::new();
        self.render_into(&mut s);
        if s.len() > 200 {
            let mut end = 200;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s.truncate(end);
            s.push_str("...");
        }
        s
    }

    fn render_into(&self, out: &mut String) {
        if out.len() > 200 {
            return;
        }
        let seq = |out: &mut String, open: &str, items: &[PyVal], close: &str| {
            out.push_str(open);
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                x.render_into(out);
            }
            out.push_str(close);
        };
        match self {
            PyVal::None => out.push_str("None"),
            PyVal::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
            PyVal::Int(s) => out.push_str(s),
            PyVal::Float(f) => out.push_str(&format!("{f:?}")),
            PyVal::Complex(r, i) => out.push_str(&format!("({r:?}{i:+?}j)")),
            PyVal::Str(s) => out.push_str(&format!("{s:?}")),
            PyVal::Bytes(b) => out.push_str(&format!("b{:?}", String::from_utf8_lossy(b))),
            PyVal::List(x) => seq(out, "[", x, "]"),
            PyVal::Tuple(x) => seq(out, "(", x, ")"),
            PyVal::Set { items, .. } => seq(out, "{", items, "}"),
            PyVal::Dict(pairs) => {
                out.push('{');
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    k.render_into(out);
                    out.push_str(": ");
                    v.render_into(out);
                }
                out.push('}');
            }
            PyVal::Opaque(t) => out.push_str(&format!("<{t} object>")),
        }
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(60) {
        Some((end, _)) => format!("{}...", &s[..end]),
        None => s,
    }
}

fn hex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return Err("b: odd hex".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| format!("b: {e}")))
        .collect()
}

/// `s` as canonical decimal digits, if it is an integer.
fn canonical_int(s: &str) -> Option<String> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = digits.trim_start_matches('0');
    Some(match (digits.is_empty(), neg) {
        (true, _) => "0".into(),
        (false, true) => format!("-{digits}"),
        (false, false) => digits.to_string(),
    })
}

/// A number as Python's numeric tower sees it, for `==` across bool, int, float and complex.
#[derive(Debug, PartialEq)]
enum Num {
    /// An integral value: canonical decimal digits (floats that are whole numbers land here).
    Int(String),
    /// A finite non-integral float, an infinity or NaN.
    Real(f64),
    /// A complex number with a non-zero imaginary part.
    Complex(f64, f64),
}

fn num(v: &PyVal) -> Option<Num> {
    let real = |f: f64| {
        if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e300 {
            Num::Int(canonical_int(&format!("{f:.0}")).unwrap_or_default())
        } else {
            Num::Real(f)
        }
    };
    match v {
        PyVal::Bool(b) => Some(Num::Int(if *b { "1" } else { "0" }.into())),
        PyVal::Int(s) => Some(Num::Int(s.clone())),
        PyVal::Float(f) => Some(real(*f)),
        PyVal::Complex(r, i) if *i == 0.0 => Some(real(*r)),
        PyVal::Complex(r, i) => Some(Num::Complex(*r, *i)),
        _ => None,
    }
}

/// Python's `a == b` for plain data (NaN is unequal to itself; a list never equals a tuple; sets
/// and dicts compare without order).
pub fn py_eq(a: &PyVal, b: &PyVal) -> bool {
    if let (Some(x), Some(y)) = (num(a), num(b)) {
        return x == y;
    }
    match (a, b) {
        (PyVal::None, PyVal::None) => true,
        (PyVal::Str(x), PyVal::Str(y)) => x == y,
        (PyVal::Bytes(x), PyVal::Bytes(y)) => x == y,
        (PyVal::List(x), PyVal::List(y)) | (PyVal::Tuple(x), PyVal::Tuple(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| py_eq(p, q))
        }
        (PyVal::Set { items: x, .. }, PyVal::Set { items: y, .. }) => same_keys(x, y),
        (PyVal::Dict(x), PyVal::Dict(y)) => {
            if x.len() != y.len() {
                return false;
            }
            let index: BTreeMap<String, &PyVal> = y.iter().map(|(k, v)| (key(k), v)).collect();
            x.iter()
                .all(|(k, v)| index.get(&key(k)).is_some_and(|w| py_eq(v, w)))
        }
        _ => false,
    }
}

/// Whether two collections hold the same elements as sets (by hashable-value identity).
pub fn same_keys(x: &[PyVal], y: &[PyVal]) -> bool {
    let a: std::collections::BTreeSet<String> = x.iter().map(key).collect();
    let b: std::collections::BTreeSet<String> = y.iter().map(key).collect();
    a == b
}

/// A canonical text for a hashable value, equal for values Python deems equal (`1`, `1.0`,
/// `True`), so sets and dict keys compare in `O(n log n)`.
fn key(v: &PyVal) -> String {
    if let Some(n) = num(v) {
        return match n {
            Num::Int(s) => format!("i{s}"),
            Num::Real(f) => format!("f{}", f.to_bits()),
            Num::Complex(r, i) => format!("c{},{}", r.to_bits(), i.to_bits()),
        };
    }
    match v {
        PyVal::None => "N".into(),
        PyVal::Str(s) => format!("s{}:{s}", s.len()),
        PyVal::Bytes(b) => format!("b{}:{}", b.len(), String::from_utf8_lossy(b)),
        PyVal::Tuple(x) => format!(
            "t{}({})",
            x.len(),
            x.iter().map(key).collect::<Vec<_>>().join(",")
        ),
        PyVal::Set { items, .. } => {
            let mut keys: Vec<String> = items.iter().map(key).collect();
            keys.sort();
            format!("S{}({})", keys.len(), keys.join(","))
        }
        // Unhashable in Python (lists, dicts) or opaque: unique per occurrence in practice.
        other => format!("?{}", other.render()),
    }
}
