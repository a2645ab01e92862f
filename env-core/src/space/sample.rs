//! `Space::sample`, Gymnasium's sampling rules.

use ndarray::{ArrayD, IxDyn};
use rand::Rng;

use super::{BoxSpace, DEFAULT_TEXT_CHARSET, DType, Space};
use crate::{Tensor, Value};

pub(super) fn sample(space: &Space, rng: &mut impl Rng) -> Value {
    match space {
        Space::Discrete { n, start } => {
            // Gymnasium rejects n <= 0 at construction; here it degrades to `start` instead of a panic.
            Value::Discrete(start.saturating_add(if *n > 0 { rng.random_range(0..*n) } else { 0 }))
        }
        Space::Box(b) => Value::Tensor(sample_box(b, rng)),
        Space::MultiDiscrete { nvec } => {
            let v: Vec<i64> = nvec
                .iter()
                .map(|&n| if n > 0 { rng.random_range(0..n) } else { 0 })
                .collect();
            Value::Tensor(Tensor::I64(ndarray::Array1::from_vec(v).into_dyn()))
        }
        Space::MultiBinary { shape } => {
            let a = ArrayD::from_shape_simple_fn(IxDyn(shape), || u8::from(rng.random::<bool>()));
            Value::Tensor(Tensor::U8(a))
        }
        Space::Text {
            min_length,
            max_length,
            charset,
        } => {
            let chars: Vec<char> = charset
                .as_deref()
                .unwrap_or(DEFAULT_TEXT_CHARSET)
                .chars()
                .collect();
            let len = if chars.is_empty() || max_length < min_length {
                *min_length.min(max_length)
            } else {
                rng.random_range(*min_length..=*max_length)
            };
            let s = if chars.is_empty() {
                String::new()
            } else {
                (0..len)
                    .map(|_| chars[rng.random_range(0..chars.len())])
                    .collect()
            };
            Value::Text(s)
        }
        Space::Dict(spaces) => Value::Dict(
            spaces
                .iter()
                .map(|(k, s)| (k.clone(), sample(s, rng)))
                .collect(),
        ),
        Space::Tuple(spaces) => Value::List(spaces.iter().map(|s| sample(s, rng)).collect()),
    }
}

/// Standard normal by Box-Muller (one draw; the pair's second value is discarded for simplicity).
fn standard_normal(rng: &mut impl Rng) -> f64 {
    // `1 - u` lies in (0, 1], so the logarithm is finite.
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Exponential with rate 1.
fn standard_exponential(rng: &mut impl Rng) -> f64 {
    -(1.0 - rng.random::<f64>()).ln()
}

fn sample_box(b: &BoxSpace, rng: &mut impl Rng) -> Tensor {
    let integer = matches!(b.dtype, DType::I32 | DType::I64 | DType::U8 | DType::Bool);
    let shape = b.low.raw_dim();
    let mut values = ArrayD::<f64>::zeros(shape);
    for ((x, &low), &high) in values.iter_mut().zip(b.low.iter()).zip(b.high.iter()) {
        // Gymnasium samples integer boxes on [low, high + 1) and floors, so `high` is reachable.
        let high_ex = if integer && high.is_finite() {
            high + 1.0
        } else {
            high
        };
        let v = match (low.is_finite(), high.is_finite()) {
            (true, true) => low + (high_ex - low) * rng.random::<f64>(),
            (true, false) => low + standard_exponential(rng),
            (false, true) => high_ex - standard_exponential(rng),
            (false, false) => standard_normal(rng),
        };
        // `max`/`min` rather than `clamp`, which panics on inverted bounds of a hand-built space.
        *x = if integer {
            v.floor().max(low).min(high)
        } else {
            v
        };
    }
    // The `as` casts saturate; values are already within the bounds, which lie within the dtype.
    match b.dtype {
        DType::F32 => Tensor::F32(values.mapv(|x| (x as f32).clamp(f32::MIN, f32::MAX))),
        DType::F64 => Tensor::F64(values),
        DType::I32 => Tensor::I32(values.mapv(|x| x as i32)),
        DType::I64 => Tensor::I64(values.mapv(|x| x as i64)),
        DType::U8 => Tensor::U8(values.mapv(|x| x as u8)),
        DType::Bool => Tensor::Bool(values.mapv(|x| x != 0.0)),
    }
}
