//! `Space::contains` and `Space::sample` for every space.

use env_core::{BoxSpace, DType, Space, Tensor, Value, seeded_rng};
use ndarray::{ArrayD, IxDyn, arr0, arr1};

fn t_f32(v: &[f32]) -> Value {
    Value::Tensor(Tensor::F32(arr1(v).into_dyn()))
}

fn t_i64(v: &[i64]) -> Value {
    Value::Tensor(Tensor::I64(arr1(v).into_dyn()))
}

/// Samples `n` values and checks each is contained.
fn sample_all(space: &Space, n: usize) -> Vec<Value> {
    let mut rng = seeded_rng(7);
    (0..n)
        .map(|_| {
            let v = space.sample(&mut rng);
            assert!(
                space.contains(&v),
                "{space:?} does not contain its sample {v:?}"
            );
            v
        })
        .collect()
}

#[test]
fn discrete() {
    let s = Space::Discrete { n: 3, start: -1 };
    assert!(s.contains(&Value::Discrete(-1)) && s.contains(&Value::Discrete(1)));
    assert!(!s.contains(&Value::Discrete(2)) && !s.contains(&Value::Discrete(-2)));
    assert!(s.contains(&Value::Json(serde_json::json!(0))));
    assert!(s.contains(&Value::Tensor(Tensor::I32(arr0(0).into_dyn()))));
    assert!(!s.contains(&Value::Tensor(Tensor::F32(arr0(0.0).into_dyn()))));
    assert!(!s.contains(&t_i64(&[0])), "a 1-d tensor is not a scalar");
    assert!(!s.contains(&Value::Discrete(i64::MAX)) && !s.contains(&Value::Discrete(i64::MIN)));
    let wide = Space::Discrete {
        n: 2,
        start: i64::MIN,
    };
    assert!(
        wide.contains(&Value::Discrete(i64::MIN)) && !wide.contains(&Value::Discrete(i64::MAX))
    );
    let mut seen: Vec<i64> = sample_all(&s, 200)
        .into_iter()
        .map(|v| match v {
            Value::Discrete(x) => x,
            other => panic!("{other:?}"),
        })
        .collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen, vec![-1, 0, 1]);
    assert_eq!(Space::discrete(4), Space::Discrete { n: 4, start: 0 });
}

#[test]
fn bounded_box() {
    let s = Space::bounded_box(-1.0, 2.0, &[3], DType::F32).unwrap();
    assert!(s.contains(&t_f32(&[-1.0, 0.0, 2.0])));
    assert!(!s.contains(&t_f32(&[-1.5, 0.0, 0.0])));
    assert!(!s.contains(&t_f32(&[0.0, 0.0])), "wrong shape");
    assert!(!s.contains(&t_f32(&[f32::NAN, 0.0, 0.0])));
    assert!(
        !s.contains(&Value::Tensor(Tensor::F64(
            arr1(&[0.0, 0.0, 0.0]).into_dyn()
        ))),
        "f64 does not cast to f32"
    );
    assert!(
        s.contains(&Value::Tensor(Tensor::U8(arr1(&[0, 1, 2]).into_dyn()))),
        "u8 casts safely to f32"
    );
    assert!(!s.contains(&Value::Text("x".into())));
    let samples = sample_all(&s, 500);
    let xs: Vec<f64> = samples
        .iter()
        .flat_map(|v| match v {
            Value::Tensor(t) => t.to_f64_vec(),
            _ => vec![],
        })
        .collect();
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    assert!(
        (mean - 0.5).abs() < 0.15,
        "uniform on [-1, 2] has mean 0.5, got {mean}"
    );
}

#[test]
fn integer_box_reaches_both_bounds() {
    let s = Space::bounded_box(0.0, 2.0, &[4], DType::I64).unwrap();
    let xs: Vec<i64> = sample_all(&s, 100)
        .iter()
        .flat_map(|v| match v {
            Value::Tensor(Tensor::I64(a)) => a.iter().copied().collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        })
        .collect();
    for k in 0..=2 {
        assert!(xs.contains(&k), "{k} never sampled");
    }
    assert!(s.contains(&t_i64(&[0, 1, 2, 2])) && !s.contains(&t_i64(&[0, 1, 2, 3])));
}

#[test]
fn unbounded_and_half_bounded_boxes() {
    let low = arr1(&[f64::NEG_INFINITY, 0.0, f64::NEG_INFINITY]).into_dyn();
    let high = arr1(&[f64::INFINITY, f64::INFINITY, 5.0]).into_dyn();
    let s = Space::Box(BoxSpace::new(low, high, DType::F64).unwrap());
    let samples = sample_all(&s, 2000);
    let col = |i: usize| -> Vec<f64> {
        samples
            .iter()
            .map(|v| match v {
                Value::Tensor(t) => t.to_f64_vec()[i],
                _ => f64::NAN,
            })
            .collect()
    };
    let (normal, expo, neg_expo) = (col(0), col(1), col(2));
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    assert!(mean(&normal).abs() < 0.15, "normal mean {}", mean(&normal));
    assert!(normal.iter().any(|&x| x < -1.0) && normal.iter().any(|&x| x > 1.0));
    assert!(
        (mean(&expo) - 1.0).abs() < 0.15,
        "exponential + 0 has mean 1, got {}",
        mean(&expo)
    );
    assert!(
        (mean(&neg_expo) - 4.0).abs() < 0.15,
        "5 - exponential has mean 4, got {}",
        mean(&neg_expo)
    );
    assert!(matches!(&s, Space::Box(b) if !b.is_bounded()));
}

#[test]
fn box_constructor_validates() {
    let a = ArrayD::<f64>::zeros(IxDyn(&[2]));
    let b = ArrayD::<f64>::zeros(IxDyn(&[3]));
    assert!(BoxSpace::new(a.clone(), b, DType::F32).is_err());
    assert!(BoxSpace::uniform(1.0, 0.0, &[2], DType::F32).is_err());
    assert!(BoxSpace::uniform(f64::NAN, 0.0, &[2], DType::F32).is_err());
    assert!(
        BoxSpace::new(a.clone(), a, DType::F32)
            .unwrap()
            .is_bounded()
    );
}

#[test]
fn multi_discrete() {
    let s = Space::multi_discrete(vec![2, 3]);
    assert!(s.contains(&t_i64(&[1, 2])));
    assert!(
        !s.contains(&t_i64(&[2, 0])) && !s.contains(&t_i64(&[0, -1])) && !s.contains(&t_i64(&[0]))
    );
    assert!(!s.contains(&t_f32(&[0.0, 0.0])));
    let samples = sample_all(&s, 100);
    assert!(samples.iter().any(|v| i64_vec(v)[1] == 2));
}

fn i64_vec(v: &Value) -> Vec<i64> {
    match v {
        Value::Tensor(t) => t.to_f64_vec().iter().map(|&x| x as i64).collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn multi_binary() {
    let s = Space::multi_binary(vec![2, 2]);
    let m = |v: Vec<u8>| {
        Value::Tensor(Tensor::U8(
            ArrayD::from_shape_vec(IxDyn(&[2, 2]), v).unwrap(),
        ))
    };
    assert!(s.contains(&m(vec![0, 1, 1, 0])));
    assert!(!s.contains(&m(vec![0, 2, 1, 0])));
    assert!(
        !s.contains(&Value::Tensor(Tensor::U8(arr1(&[0, 1, 1, 0]).into_dyn()))),
        "wrong shape"
    );
    let ones: i64 = sample_all(&s, 100)
        .iter()
        .map(|v| i64_vec(v).iter().sum::<i64>())
        .sum();
    assert!(
        (100..300).contains(&ones),
        "about half of 400 bits set, got {ones}"
    );
}

#[test]
fn text() {
    let s = Space::Text {
        min_length: 1,
        max_length: 4,
        charset: Some("ab".into()),
    };
    assert!(s.contains(&Value::Text("abba".into())));
    assert!(!s.contains(&Value::Text("".into())) && !s.contains(&Value::Text("abbab".into())));
    assert!(!s.contains(&Value::Text("abc".into())));
    sample_all(&s, 100);
    let any = Space::text(0, 3);
    assert!(any.contains(&Value::Text("ü€!".into())));
    let lens: Vec<usize> = sample_all(&any, 100)
        .iter()
        .map(|v| match v {
            Value::Text(t) => t.len(),
            _ => 99,
        })
        .collect();
    assert!(lens.contains(&0) && lens.contains(&3));
}

#[test]
fn dict_and_tuple() {
    let s = Space::Dict(vec![
        ("a".into(), Space::discrete(2)),
        (
            "b".into(),
            Space::Tuple(vec![Space::discrete(3), Space::text(0, 2)]),
        ),
    ]);
    let good = Value::Dict(vec![
        (
            "b".into(),
            Value::List(vec![Value::Discrete(2), Value::Text("hi".into())]),
        ),
        ("a".into(), Value::Discrete(1)),
    ]);
    assert!(s.contains(&good), "key order does not matter");
    let missing = Value::Dict(vec![("a".into(), Value::Discrete(1))]);
    let extra = Value::Dict(vec![
        ("a".into(), Value::Discrete(1)),
        (
            "b".into(),
            Value::List(vec![Value::Discrete(2), Value::Text("hi".into())]),
        ),
        ("c".into(), Value::Discrete(0)),
    ]);
    let short_tuple = Value::Dict(vec![
        ("a".into(), Value::Discrete(1)),
        ("b".into(), Value::List(vec![Value::Discrete(2)])),
    ]);
    for bad in [missing, extra, short_tuple, Value::Discrete(0)] {
        assert!(!s.contains(&bad), "{bad:?}");
    }
    let samples = sample_all(&s, 20);
    assert!(matches!(&samples[0], Value::Dict(kv) if kv[0].0 == "a" && kv[1].0 == "b"));
}

#[test]
fn sampling_is_reproducible_from_a_seed() {
    let s = Space::Tuple(vec![
        Space::bounded_box(0.0, 1.0, &[3], DType::F64).unwrap(),
        Space::discrete(10),
    ]);
    let draw = |seed| {
        let mut rng = seeded_rng(seed);
        (0..5).map(|_| s.sample(&mut rng)).collect::<Vec<_>>()
    };
    assert_eq!(draw(1), draw(1));
    assert_ne!(draw(1), draw(2));
}
