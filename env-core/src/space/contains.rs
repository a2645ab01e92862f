//! `Space::contains`, Gymnasium's membership rules.

use super::{BoxSpace, DType, Space};
use crate::{Tensor, Value};

pub(super) fn contains(space: &Space, value: &Value) -> bool {
    match space {
        Space::Discrete { n, start } => {
            integer_scalar(value)
                // Checked: an adversarial `i64::MAX` must not overflow.
                .and_then(|x| x.checked_sub(*start))
                .is_some_and(|d| d >= 0 && d < *n)
        }
        Space::Box(b) => matches!(value, Value::Tensor(t) if box_contains(b, t)),
        Space::MultiDiscrete { nvec } => match value {
            Value::Tensor(t) if is_integer(t.dtype()) && t.shape() == [nvec.len()] => t
                .to_f64_vec()
                .iter()
                .zip(nvec)
                // Exact: both sides are integers well below 2^53.
                .all(|(&x, &n)| x >= 0.0 && x < n as f64),
            _ => false,
        },
        Space::MultiBinary { shape } => match value {
            Value::Tensor(t)
                if (is_integer(t.dtype()) || t.dtype() == DType::Bool)
                    && t.shape() == shape.as_slice() =>
            {
                t.to_f64_vec().iter().all(|&x| x == 0.0 || x == 1.0)
            }
            _ => false,
        },
        Space::Text {
            min_length,
            max_length,
            charset,
        } => match value {
            Value::Text(s) => {
                let len = s.chars().count();
                len >= *min_length
                    && len <= *max_length
                    && charset
                        .as_ref()
                        .is_none_or(|cs| s.chars().all(|c| cs.contains(c)))
            }
            _ => false,
        },
        Space::Dict(spaces) => match value {
            Value::Dict(items) => {
                items.len() == spaces.len()
                    && spaces.iter().all(|(k, s)| {
                        items
                            .iter()
                            .find(|(ik, _)| ik == k)
                            .is_some_and(|(_, v)| contains(s, v))
                    })
            }
            _ => false,
        },
        Space::Tuple(spaces) => match value {
            Value::List(items) => {
                items.len() == spaces.len() && spaces.iter().zip(items).all(|(s, v)| contains(s, v))
            }
            _ => false,
        },
    }
}

/// A Python-int-like scalar: `Discrete`, a JSON integer, or a 0-d integer tensor.
fn integer_scalar(value: &Value) -> Option<i64> {
    match value {
        Value::Discrete(x) => Some(*x),
        Value::Json(j) => j.as_i64(),
        Value::Tensor(t) if t.shape().is_empty() => match t {
            Tensor::I32(a) => a.iter().next().map(|&x| i64::from(x)),
            Tensor::I64(a) => a.iter().next().copied(),
            Tensor::U8(a) => a.iter().next().map(|&x| i64::from(x)),
            _ => None,
        },
        _ => None,
    }
}

fn is_integer(d: DType) -> bool {
    matches!(d, DType::I32 | DType::I64 | DType::U8)
}

/// numpy's `can_cast(from, to, casting="safe")` over the dtypes here.
pub(crate) fn can_cast(from: DType, to: DType) -> bool {
    use DType::*;
    from == to
        || matches!(
            (from, to),
            (Bool, _) | (U8, I32 | I64 | F32 | F64) | (I32, I64 | F64) | (I64, F64) | (F32, F64)
        )
}

fn box_contains(b: &BoxSpace, t: &Tensor) -> bool {
    can_cast(t.dtype(), b.dtype)
        && t.shape() == b.low.shape()
        && t.to_f64_vec()
            .iter()
            .zip(b.low.iter().zip(b.high.iter()))
            .all(|(&x, (&l, &h))| x >= l && x <= h)
}
