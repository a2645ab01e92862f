//! Round trips of every value, space and result through the messages, and malformed messages.

use super::*;

#[test]
fn tensors_round_trip_bit_exact() {
    let a = ArrayD::from_shape_vec(IxDyn(&[2, 2]), vec![1.5f32, -0.0, f32::MAX, 1e-30]).unwrap();
    let t = Tensor::F32(a);
    assert_eq!(tensor_from_proto(tensor_to_proto(&t)).unwrap(), t);
    let b = Tensor::Bool(ArrayD::from_shape_vec(IxDyn(&[3]), vec![true, false, true]).unwrap());
    assert_eq!(tensor_from_proto(tensor_to_proto(&b)).unwrap(), b);
}

#[test]
fn tensor_with_wrong_length_is_rejected() {
    let bad = v1::Tensor {
        dtype: v1::Dtype::Float64 as i32,
        shape: vec![3],
        data: vec![0; 16],
    };
    assert!(matches!(
        tensor_from_proto(bad),
        Err(ConvertError::TensorSize {
            expected: 24,
            actual: 16,
            ..
        })
    ));
    let huge = v1::Tensor {
        dtype: v1::Dtype::Float64 as i32,
        shape: vec![u64::MAX, 4],
        data: vec![],
    };
    assert!(tensor_from_proto(huge).is_err());
    let unspecified = v1::Tensor {
        dtype: 0,
        shape: vec![],
        data: vec![],
    };
    assert_eq!(tensor_from_proto(unspecified), Err(ConvertError::DType(0)));
}

#[test]
fn nested_values_round_trip() {
    let v = Value::Dict(vec![
        (
            "a".into(),
            Value::List(vec![Value::Discrete(3), Value::Text("x".into())]),
        ),
        ("b".into(), Value::Json(serde_json::json!({"k": [1, 2]}))),
    ]);
    assert_eq!(value_from_proto(value_to_proto(&v)).unwrap(), v);
    assert_eq!(
        value_from_proto(v1::Value { kind: None }),
        Err(ConvertError::Missing("value.kind"))
    );
}

/// Issue 12: return values (both forms), variables and errors survive the wire; a malformed
/// JSON field is an error, not a panic.
#[test]
fn execution_agent_fields_round_trip() {
    let base = ExecutionResult {
        exit_code: Some(0),
        ..ExecutionResult::default()
    };
    let cases = [
        ExecutionResult {
            return_value: Some(ReturnValue::Json {
                value: serde_json::json!({"a": [1, null]}),
            }),
            variables: Some(Box::new(Variables {
                values: serde_json::json!({"x": 1})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                dropped: vec![DroppedVariable {
                    name: "f".into(),
                    reason: "function is not JSON-serializable".into(),
                }],
            })),
            ..base.clone()
        },
        ExecutionResult {
            return_value: Some(ReturnValue::Unrepresentable {
                type_name: "K".into(),
                repr: "<K>".into(),
                reason: "not JSON-serializable".into(),
            }),
            error: Some(ProgramError {
                type_name: "ValueError".into(),
                message: "boom".into(),
            }),
            ..base.clone()
        },
        base.clone(),
    ];
    for e in cases {
        let wire = execution_to_proto(&e);
        assert_eq!(wire.success, e.success());
        assert_eq!(execution_from_proto(wire).ok(), Some(e));
    }
    let mut bad = execution_to_proto(&base);
    bad.return_value_json = Some("{nope".into());
    assert!(execution_from_proto(bad).is_err());
    let mut bad = execution_to_proto(&base);
    bad.variables_json = Some("[1]".into());
    assert!(execution_from_proto(bad).is_err());
}

#[test]
fn typed_outputs_round_trip() {
    // Issue 13: outputs travel as JSON text or an error; a foreign sender's bad JSON is an error.
    use env_core::OutputValue;
    let mut e = ExecutionResult::default();
    e.outputs
        .insert("rows".into(), OutputValue::Value(serde_json::json!(2)));
    e.outputs.insert(
        "file".into(),
        OutputValue::Value(serde_json::json!({"size": 1, "text": "x"})),
    );
    e.outputs
        .insert("bad".into(), OutputValue::Error("missing".into()));
    assert_eq!(execution_from_proto(execution_to_proto(&e)), Ok(e.clone()));
    let mut wire = execution_to_proto(&e);
    wire.outputs.insert(
        "x".into(),
        v1::OutputValue {
            kind: Some(v1::output_value::Kind::Json("{".into())),
        },
    );
    wire.outputs
        .insert("y".into(), v1::OutputValue { kind: None });
    let back = execution_from_proto(wire).unwrap();
    assert!(matches!(back.outputs["x"], OutputValue::Error(_)));
    assert!(matches!(back.outputs["y"], OutputValue::Error(_)));
}

#[test]
fn json_objects_are_validated() {
    assert!(json_object("", "kwargs_json").unwrap().is_empty());
    assert_eq!(json_object(r#"{"a":1}"#, "kwargs_json").unwrap()["a"], 1);
    assert!(matches!(
        json_object("[1]", "kwargs_json"),
        Err(ConvertError::Json { .. })
    ));
    assert!(matches!(
        json_object("{", "kwargs_json"),
        Err(ConvertError::Json { .. })
    ));
}

/// JSON floats keep their bits across the wire: serde_json's default float parser can be one ulp
/// off, so the workspace enables its `float_roundtrip` feature (found by `tests/fuzz_convert.rs`).
#[test]
fn json_floats_round_trip_bit_exact() {
    for f in [2.0053923654085196e-13, 5e-324, f64::MAX, 0.1, -0.0] {
        let v = Value::Json(serde_json::json!({"x": [f]}));
        let back = value_from_proto(value_to_proto(&v)).unwrap();
        let Value::Json(j) = back else {
            panic!("not JSON: {back:?}")
        };
        let got = j["x"][0].as_f64().unwrap();
        assert_eq!(got.to_bits(), f.to_bits(), "{f:e} came back as {got:e}");
    }
}
