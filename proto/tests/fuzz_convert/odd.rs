//! Structurally odd messages for `fuzz_convert.rs`, as a foreign or broken peer could send them,
//! and the oracle of which tensors are well formed.

use env_core::{Tensor, Value};
use proptest::prelude::*;
use proto::v1;

/// Whether `==` can compare the value: no NaN in it (a NaN is unequal to itself).
pub fn nan_free(v: &Value) -> bool {
    match v {
        Value::Tensor(Tensor::F32(a)) => a.iter().all(|x| !x.is_nan()),
        Value::Tensor(Tensor::F64(a)) => a.iter().all(|x| !x.is_nan()),
        Value::List(items) => items.iter().all(nan_free),
        Value::Dict(entries) => entries.iter().all(|(_, v)| nan_free(v)),
        _ => true,
    }
}

/// Text that is JSON (an object or not), nearly JSON, or not JSON at all.
fn json_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,10}",
        r#"[\[\]{}:,"0-9a.eE+ -]{0,16}"#,
        prop::sample::select(vec![
            "",
            "{}",
            "[1]",
            r#"{"a":1}"#,
            "null",
            "1e999",
            "{",
            "\"x\"",
            "-0",
            "18446744073709551616",
        ])
        .prop_map(str::to_string),
    ]
}

/// Tensors with any dtype number, shapes up to `u64::MAX` per axis, and data that often fits.
pub fn tensor() -> impl Strategy<Value = v1::Tensor> {
    let dim = prop_oneof![
        4 => 0u64..4,
        1 => prop::sample::select(vec![u32::MAX as u64, 1 << 61, 1 << 62, i64::MAX as u64, u64::MAX]),
    ];
    (
        -2i32..9,
        prop::collection::vec(dim, 0..5),
        prop::collection::vec(any::<u8>(), 0..80),
        any::<bool>(),
    )
        .prop_map(|(dtype, shape, mut data, fit)| {
            if fit && let Some(len) = expected_len(dtype, &shape) {
                data.resize(len.min(4096), 0xA5);
            }
            v1::Tensor { dtype, shape, data }
        })
}

fn width(dtype: i32) -> Option<u128> {
    match dtype {
        1 | 3 => Some(4),
        2 | 4 => Some(8),
        5 | 6 => Some(1),
        _ => None,
    }
}

fn expected_len(dtype: i32, shape: &[u64]) -> Option<usize> {
    let w = width(dtype).unwrap_or(1);
    let n = shape
        .iter()
        .try_fold(1u128, |acc, &d| acc.checked_mul(u128::from(d)))?;
    usize::try_from(n.checked_mul(w)?).ok()
}

/// The oracle: a tensor converts exactly when its dtype is known, its data has the length its
/// shape needs, and the product of its non-empty axes is at most `isize::MAX` (ndarray's bound; an
/// empty tensor may have a huge axis beside one of length 0).
pub fn tensor_verdict(t: &v1::Tensor) -> Result<(), ()> {
    width(t.dtype).ok_or(())?;
    if expected_len(t.dtype, &t.shape) != Some(t.data.len()) {
        return Err(());
    }
    let nonzero = t
        .shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1u128, |acc, &d| acc.checked_mul(u128::from(d)))
        .ok_or(())?;
    if nonzero > isize::MAX as u128 {
        return Err(());
    }
    Ok(())
}

fn odd_output() -> impl Strategy<Value = v1::OutputValue> {
    use v1::output_value::Kind;
    prop::option::of(prop_oneof![
        json_text().prop_map(Kind::Json),
        json_text().prop_map(Kind::Error)
    ])
    .prop_map(|kind| v1::OutputValue { kind })
}

fn odd_execution_fields() -> impl Strategy<Value = v1::ExecutionResult> {
    (
        prop::option::of(json_text()),
        prop::option::of(any::<(String, String, String)>()),
        prop::option::of(json_text()),
        prop::collection::vec(any::<(String, String)>(), 0..2),
        prop::collection::hash_map(json_text(), odd_output(), 0..3),
        any::<(Option<i32>, bool, u64)>(),
    )
        .prop_map(|(rv, unrep, vars, dropped, outputs, (exit_code, b, n))| {
            v1::ExecutionResult {
                exit_code,
                timed_out: b,
                success: !b,
                wall_ms: n,
                return_value_json: rv,
                return_value_unrepresentable: unrep.map(|(type_name, repr, reason)| {
                    v1::UnrepresentableValue {
                        type_name,
                        repr,
                        reason,
                    }
                }),
                variables_json: vars,
                dropped_variables: dropped
                    .into_iter()
                    .map(|(name, reason)| v1::DroppedVariable { name, reason })
                    .collect(),
                outputs,
                ..v1::ExecutionResult::default()
            }
        })
}

fn odd_execution() -> impl Strategy<Value = v1::ExecutionResult> {
    (
        odd_execution_fields(),
        prop::option::of(odd_execution_fields()),
    )
        .prop_map(|(mut e, compile)| {
            e.compile = compile.map(Box::new);
            e
        })
}

/// Messages a peer could send: every kind, and none, with odd contents, nested.
pub fn message() -> impl Strategy<Value = v1::Value> {
    use v1::value::Kind;
    let leaf = prop_oneof![
        Just(v1::Value { kind: None }),
        any::<String>().prop_map(|s| v1::Value {
            kind: Some(Kind::Text(s))
        }),
        tensor().prop_map(|t| v1::Value {
            kind: Some(Kind::Tensor(t))
        }),
        json_text().prop_map(|j| v1::Value {
            kind: Some(Kind::Json(j))
        }),
        odd_execution().prop_map(|e| v1::Value {
            kind: Some(Kind::Execution(e))
        }),
        any::<i64>().prop_map(|i| v1::Value {
            kind: Some(Kind::Discrete(i))
        }),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|items| v1::Value {
                kind: Some(Kind::List(v1::ValueList { items }))
            }),
            (
                prop::collection::vec(any::<String>(), 0..4),
                prop::collection::vec(inner, 0..4)
            )
                .prop_map(|(keys, values)| v1::Value {
                    kind: Some(Kind::Dict(v1::ValueDict { keys, values }))
                }),
        ]
    })
}
