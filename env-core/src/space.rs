//! Gymnasium's spaces: Discrete, Box, MultiDiscrete, MultiBinary, Text, Dict, Tuple.

use ndarray::ArrayD;
use serde::{Deserialize, Serialize};

/// Element type of a `Box` space (and of a [`crate::Tensor`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    F64,
    I32,
    I64,
    U8,
    Bool,
}

/// A (possibly unbounded) box in R^n; bounds are stored as `f64` whatever the dtype.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxSpace {
    pub low: ArrayD<f64>,
    pub high: ArrayD<f64>,
    pub dtype: DType,
}

/// A set of valid observations or actions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Space {
    /// `{start, ..., start + n - 1}`.
    Discrete {
        n: i64,
        start: i64,
    },
    Box(BoxSpace),
    /// One discrete coordinate per entry, each in `0..nvec[i]`.
    MultiDiscrete {
        nvec: Vec<i64>,
    },
    /// Binary array of the given shape.
    MultiBinary {
        shape: Vec<usize>,
    },
    /// Strings of `min_length..=max_length` characters drawn from `charset` (`None`: any).
    Text {
        min_length: usize,
        max_length: usize,
        charset: Option<String>,
    },
    /// Named sub-spaces, in definition order.
    Dict(Vec<(String, Space)>),
    Tuple(Vec<Space>),
}

mod contains;
mod sample;

/// Alphanumeric characters, Gymnasium's default `Text` charset; `sample` draws from it when the
/// space's charset is `None`.
pub const DEFAULT_TEXT_CHARSET: &str =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

impl BoxSpace {
    /// A box with per-element bounds; fails with [`crate::EnvError::InvalidKwargs`] when the shapes
    /// differ or some `low > high` (or is NaN).
    pub fn new(low: ArrayD<f64>, high: ArrayD<f64>, dtype: DType) -> crate::Result<Self> {
        if low.shape() != high.shape() {
            return Err(crate::EnvError::InvalidKwargs(format!(
                "Box bounds have different shapes {:?} and {:?}",
                low.shape(),
                high.shape()
            )));
        }
        // `!(l <= h)` rather than `l > h` so that NaN bounds are rejected too.
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        if low.iter().zip(high.iter()).any(|(l, h)| !(l <= h)) {
            return Err(crate::EnvError::InvalidKwargs(
                "Box bounds need low <= high everywhere".into(),
            ));
        }
        Ok(Self { low, high, dtype })
    }

    /// A box whose every element lies in `[low, high]` (infinite bounds allowed).
    pub fn uniform(low: f64, high: f64, shape: &[usize], dtype: DType) -> crate::Result<Self> {
        Self::new(
            ArrayD::from_elem(shape, low),
            ArrayD::from_elem(shape, high),
            dtype,
        )
    }

    pub fn shape(&self) -> &[usize] {
        self.low.shape()
    }

    /// Whether every element has finite bounds on both sides.
    pub fn is_bounded(&self) -> bool {
        self.low
            .iter()
            .chain(self.high.iter())
            .all(|x| x.is_finite())
    }
}

impl Space {
    /// `Discrete(n)`: `{0, ..., n - 1}`.
    pub fn discrete(n: i64) -> Self {
        Space::Discrete { n, start: 0 }
    }

    /// `Box` with scalar bounds broadcast to `shape`.
    pub fn bounded_box(low: f64, high: f64, shape: &[usize], dtype: DType) -> crate::Result<Self> {
        Ok(Space::Box(BoxSpace::uniform(low, high, shape, dtype)?))
    }

    pub fn multi_discrete(nvec: Vec<i64>) -> Self {
        Space::MultiDiscrete { nvec }
    }

    pub fn multi_binary(shape: Vec<usize>) -> Self {
        Space::MultiBinary { shape }
    }

    /// Strings of `min_length..=max_length` characters from any charset.
    pub fn text(min_length: usize, max_length: usize) -> Self {
        Space::Text {
            min_length,
            max_length,
            charset: None,
        }
    }

    /// Whether `value` is an element of this space (Gymnasium's `contains`).
    ///
    /// Tensors must have the space's shape and a dtype that converts to the space's without loss
    /// (numpy's safe casting, as Gymnasium's `Box.contains` checks).
    pub fn contains(&self, value: &crate::Value) -> bool {
        contains::contains(self, value)
    }

    /// A random element (Gymnasium's `sample`): `Box` is uniform where bounded on both sides, normal
    /// where unbounded, shifted exponential where bounded on one side; integer boxes are floored.
    pub fn sample(&self, rng: &mut impl rand::Rng) -> crate::Value {
        sample::sample(self, rng)
    }
}
