//! Property-based fuzzing of `proto::convert`, the one conversion between env-core values and the
//! wire, which every server and client shares.
//!
//! Properties:
//! - every `Value` (each variant, nested; NaN payloads, infinities, subnormals and -0.0 in tensors;
//!   extreme integers, floats and unicode in JSON; execution results with every optional field)
//!   survives value -> message -> bytes -> message -> value bit for bit: the message made from the
//!   result equals the first one (tensor bytes, JSON text), and the values are equal where `==`
//!   can say so (no NaN);
//! - arbitrary bytes decoded as a message, and structurally odd messages built directly (unset
//!   `oneof`s, unknown dtypes, shapes that overflow, data of the wrong length, dicts whose keys and
//!   values differ in number, invalid or non-object JSON), convert to a value or a `ConvertError`,
//!   never a panic; a tensor is accepted exactly when its dtype is known and its data has the length
//!   its shape needs; and whatever is accepted converts back to a message that converts to the same
//!   value.
//!
//! Cases per property: `CODEGYM_FUZZ_CASES` (default 256; see docs/fuzzing.md for the long mode).

use env_core::{
    DroppedVariable, ExecutionResult, OutputValue, ProgramError, ReturnValue, Tensor, Value,
    Variables,
};
use ndarray::{ArrayD, IxDyn};
use proptest::prelude::*;
use prost::Message;
use proto::convert::{ConvertError, value_from_proto, value_to_proto};
use proto::v1;

#[path = "../../tests/support/fuzz_config.rs"]
mod fuzz_config;

fn config(default: u32) -> proptest::test_runner::Config {
    fuzz_config::config(default, "tests/proptest-regressions/fuzz_convert.txt")
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![3 => "\\PC{0,16}", 1 => ".{0,8}", 1 => Just(String::new())]
}

fn json() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value as J;
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        any::<i64>().prop_map(J::from),
        any::<u64>().prop_map(J::from),
        prop::sample::select(vec![i64::MIN, i64::MAX, 0, -1]).prop_map(J::from),
        Just(J::from(u64::MAX)),
        // Every finite float, subnormals and extremes included (JSON has no NaN or infinity).
        any::<u64>()
            .prop_map(f64::from_bits)
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(J::from),
        prop::sample::select(vec![f64::MAX, f64::MIN_POSITIVE, 5e-324, -0.0, 0.1, 1e300])
            .prop_map(J::from),
        text().prop_map(J::String),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(J::Array),
            prop::collection::btree_map(text(), inner, 0..6)
                .prop_map(|m| J::Object(m.into_iter().collect())),
        ]
    })
}

fn json_object() -> impl Strategy<Value = serde_json::Map<String, serde_json::Value>> {
    prop::collection::btree_map(text(), json(), 0..4).prop_map(|m| m.into_iter().collect())
}

fn tensor() -> impl Strategy<Value = Tensor> {
    fn arr<T: std::fmt::Debug + Clone + 'static>(
        elem: impl Strategy<Value = T> + Clone + 'static,
    ) -> impl Strategy<Value = ArrayD<T>> {
        prop::collection::vec(0usize..4, 0..4).prop_flat_map(move |shape| {
            let n: usize = shape.iter().product();
            prop::collection::vec(elem.clone(), n).prop_map(move |data| {
                ArrayD::from_shape_vec(IxDyn(&shape), data).expect("the length fits the shape")
            })
        })
    }
    // Floats from raw bits: NaN payloads, signed zeros, infinities and subnormals.
    prop_oneof![
        arr(any::<u32>().prop_map(f32::from_bits)).prop_map(Tensor::F32),
        arr(any::<u64>().prop_map(f64::from_bits)).prop_map(Tensor::F64),
        arr(any::<i32>()).prop_map(Tensor::I32),
        arr(any::<i64>()).prop_map(Tensor::I64),
        arr(any::<u8>()).prop_map(Tensor::U8),
        arr(any::<bool>()).prop_map(Tensor::Bool),
    ]
}

fn output() -> impl Strategy<Value = OutputValue> {
    prop_oneof![
        json().prop_map(OutputValue::Value),
        text().prop_map(OutputValue::Error)
    ]
}

fn execution_fields() -> impl Strategy<Value = ExecutionResult> {
    let status = (
        any::<Option<i32>>(),
        any::<Option<i32>>(),
        any::<[bool; 4]>(),
        text(),
        text(),
        any::<[u64; 3]>(),
    );
    let agent = (
        prop::option::of(prop_oneof![
            json().prop_map(|value| ReturnValue::Json { value }),
            (text(), text(), text()).prop_map(|(type_name, repr, reason)| {
                ReturnValue::Unrepresentable {
                    type_name,
                    repr,
                    reason,
                }
            }),
        ]),
        prop::option::of(
            (json_object(), prop::collection::vec((text(), text()), 0..3)).prop_map(
                |(values, dropped)| Variables {
                    values,
                    dropped: dropped
                        .into_iter()
                        .map(|(name, reason)| DroppedVariable { name, reason })
                        .collect(),
                },
            ),
        ),
        prop::option::of(
            (text(), text()).prop_map(|(type_name, message)| ProgramError { type_name, message }),
        ),
        prop::collection::btree_map(text(), output(), 0..3),
    );
    (status, agent).prop_map(|(s, a)| {
        let (exit_code, signal, flags, stdout, stderr, [wall_ms, cpu_ms, peak_rss_bytes]) = s;
        let (return_value, variables, error, outputs) = a;
        ExecutionResult {
            exit_code,
            signal,
            timed_out: flags[0],
            memory_exceeded: flags[1],
            stdout,
            stderr,
            stdout_truncated: flags[2],
            stderr_truncated: flags[3],
            wall_ms,
            cpu_ms,
            peak_rss_bytes,
            compile: None,
            outputs,
            return_value,
            variables: variables.map(Box::new),
            error,
        }
    })
}

fn execution() -> impl Strategy<Value = ExecutionResult> {
    (execution_fields(), prop::option::of(execution_fields())).prop_map(|(mut e, compile)| {
        e.compile = compile.map(Box::new);
        e
    })
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        text().prop_map(Value::Text),
        tensor().prop_map(Value::Tensor),
        json().prop_map(Value::Json),
        execution().prop_map(Value::Execution),
        any::<i64>().prop_map(Value::Discrete),
    ];
    leaf.prop_recursive(4, 48, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::List),
            // Duplicate keys are allowed: the dict is ordered pairs, not a map.
            prop::collection::vec((text(), inner), 0..5).prop_map(Value::Dict),
        ]
    })
}

/// A message as a peer may send it: the whole message re-encoded and decoded, as on the wire.
fn over_the_wire(m: &v1::Value) -> v1::Value {
    v1::Value::decode(m.encode_to_vec().as_slice()).expect("an encoded message decodes")
}

/// Whatever converts is stable: its message converts to the same value (compared as messages, so
/// NaN payloads count).
fn check_accepted(m: v1::Value) -> Result<(), TestCaseError> {
    if let Ok(value) = value_from_proto(m) {
        let again = value_to_proto(&value);
        let back = value_from_proto(again.clone());
        prop_assert!(
            back.is_ok(),
            "an accepted value does not convert back: {:?}",
            back
        );
        prop_assert_eq!(value_to_proto(&back.unwrap()), again);
    }
    Ok(())
}

#[path = "fuzz_convert/odd.rs"]
mod odd;

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn every_value_round_trips_bit_for_bit(v in value()) {
        let wire = value_to_proto(&v);
        let back = value_from_proto(over_the_wire(&wire));
        prop_assert!(back.is_ok(), "{:?} does not convert back: {:?}", v, back);
        let back = back.unwrap();
        prop_assert_eq!(value_to_proto(&back), wire, "not bit for bit");
        if odd::nan_free(&v) {
            prop_assert_eq!(back, v);
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(m) = v1::Value::decode(bytes.as_slice()) {
            check_accepted(m)?;
        }
    }

    #[test]
    fn mutated_encodings_never_panic(
        v in value(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let mut bytes = value_to_proto(&v).encode_to_vec();
        for (at, byte, op) in edits {
            match (op, bytes.is_empty()) {
                (0, false) => { let i = at.index(bytes.len()); bytes[i] = byte; }
                (1, false) => { bytes.truncate(at.index(bytes.len())); }
                _ => { let i = at.index(bytes.len() + 1); bytes.insert(i, byte); }
            }
        }
        if let Ok(m) = v1::Value::decode(bytes.as_slice()) {
            check_accepted(m)?;
        }
    }

    #[test]
    fn odd_tensors_are_accepted_exactly_when_well_formed(t in odd::tensor()) {
        let verdict = odd::tensor_verdict(&t);
        let got = value_from_proto(v1::Value { kind: Some(v1::value::Kind::Tensor(t.clone())) });
        match verdict {
            Ok(()) => prop_assert!(got.is_ok(), "{:?} rejected: {:?}", t, got),
            Err(()) => prop_assert!(
                matches!(got, Err(ConvertError::DType(_) | ConvertError::TensorSize { .. } | ConvertError::TensorShape(_))),
                "{:?} gave {:?}", t, got
            ),
        }
    }

    #[test]
    fn odd_messages_are_values_or_errors(m in odd::message()) {
        let arity_mismatch = matches!(
            &m.kind,
            Some(v1::value::Kind::Dict(d)) if d.keys.len() != d.values.len()
        );
        let missing = m.kind.is_none();
        let got = value_from_proto(over_the_wire(&m));
        if arity_mismatch {
            prop_assert!(matches!(got, Err(ConvertError::DictArity { .. })), "{:?}", got);
        }
        if missing {
            prop_assert_eq!(got, Err(ConvertError::Missing("value.kind")));
        }
        check_accepted(m)?;
    }
}
