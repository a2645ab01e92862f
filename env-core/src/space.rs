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
    Discrete { n: i64, start: i64 },
    Box(BoxSpace),
    /// One discrete coordinate per entry, each in `0..nvec[i]`.
    MultiDiscrete { nvec: Vec<i64> },
    /// Binary array of the given shape.
    MultiBinary { shape: Vec<usize> },
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
