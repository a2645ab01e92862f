//! EvalPlus's output comparison, on the host: a candidate's output against the reference's for
//! the same input.
//!
//! The rule (EvalPlus `unsafe_execute`): the outputs pass when they are equal (Python `==`); when
//! they are not and a tolerance applies (the task's `atol`, or 1e-6 when it is 0 and the expected
//! output is a float or a non-empty list/tuple of floats), they pass when both have the same type
//! (and length, for lists and tuples) and are close as `numpy.allclose(out, exp, rtol=1e-7,
//! atol)` would find them. A few tasks need a special oracle ([`Oracle`]), chosen by the loader.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::value::{PyVal, py_eq, same_keys};

/// How one output is judged besides plain equality (EvalPlus's special oracles, named by what they
/// check).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Oracle {
    /// Equality, with the float tolerance.
    #[default]
    Exact,
    /// The output is a root of the polynomial whose coefficients are the first argument:
    /// `|sum(c_i * x^i)| <= atol` (HumanEval/32 `find_zero`: many roots are right).
    PolyRoot,
    /// The outputs hold the same elements, in any order (several MBPP tasks).
    SetEq,
    /// Only whether the output is `None` matters (MBPP tasks returning `re.Match` objects): the
    /// reference's outputs are recorded as `out is not None`.
    NotNone,
    /// Any returned value passes (MBPP/164, whose expected outputs are ill-defined).
    AnyValue,
    /// Equal, or `0` (MBPP/295).
    OrZero,
    /// Equal, or within `atol` of the rounded surface area of a square pyramid (MBPP/581).
    PyramidSurfaceArea,
    /// Equal, or the digit distance of the zero-padded arguments (MBPP/558).
    DigitDistance,
}

/// `numpy.allclose`'s default relative tolerance, which EvalPlus passes explicitly.
const RTOL: f64 = 1e-7;

/// Whether `out` passes against `exp` for the input `args` (the JSON argument list, read only by
/// the oracles that need it). `Err` says why not.
pub fn check(
    out: &PyVal,
    exp: &PyVal,
    args: &Value,
    atol: f64,
    oracle: Oracle,
) -> Result<(), String> {
    let mut exact = py_eq(out, exp);
    match oracle {
        Oracle::Exact => {}
        Oracle::PolyRoot => {
            let x = out
                .as_f64()
                .ok_or_else(|| format!("expected a number, got {}", out.type_name()))?;
            let coeffs = args
                .get(0)
                .and_then(Value::as_array)
                .ok_or("no coefficients")?;
            let y: f64 = coeffs
                .iter()
                .enumerate()
                .map(|(i, c)| c.as_f64().unwrap_or(f64::NAN) * x.powi(i as i32))
                .sum();
            return if y.abs() <= atol {
                Ok(())
            } else {
                Err(format!("poly(xs, {x}) = {y}, not within {atol} of 0"))
            };
        }
        Oracle::AnyValue => return Ok(()),
        Oracle::SetEq => {
            exact = match (elements(out), elements(exp)) {
                (Some(a), Some(b)) => same_keys(&a, &b),
                _ => false,
            }
        }
        Oracle::NotNone => {
            exact = match out {
                PyVal::Bool(_) => py_eq(out, exp),
                other => py_eq(exp, &PyVal::Bool(!matches!(other, PyVal::None))),
            }
        }
        Oracle::OrZero => exact |= py_eq(out, &PyVal::Int("0".into())),
        Oracle::PyramidSurfaceArea => {
            let area = match (arg(args, 0), arg(args, 1), out.as_f64()) {
                (Some(b), Some(h), Some(o)) => {
                    let slant = ((b / 2.0).powi(2) + h * h).sqrt();
                    Some((o - (b * b + 2.0 * b * slant).round_ties_even()).abs() <= atol)
                }
                _ => None,
            };
            exact |= area == Some(true);
        }
        Oracle::DigitDistance => {
            let want = match (args.get(0), args.get(1)) {
                (Some(a), Some(b)) => digit_distance(&a.to_string(), &b.to_string()),
                _ => None,
            };
            exact |= want.is_some_and(|d| py_eq(out, &PyVal::Int(d.to_string())));
        }
    }
    let atol = if atol == 0.0 && is_floats(exp) {
        1e-6
    } else {
        atol
    };
    if exact {
        return Ok(());
    }
    if atol == 0.0 {
        return Err(mismatch(out, exp));
    }
    if out.type_name() != exp.type_name() {
        return Err(format!(
            "expected a {}, got a {}",
            exp.type_name(),
            out.type_name()
        ));
    }
    if let (PyVal::List(a), PyVal::List(b)) | (PyVal::Tuple(a), PyVal::Tuple(b)) = (out, exp)
        && a.len() != b.len()
    {
        return Err(format!("expected {} items, got {}", b.len(), a.len()));
    }
    if allclose(out, exp, atol) {
        Ok(())
    } else {
        Err(format!("{} (atol {atol})", mismatch(out, exp)))
    }
}

fn mismatch(out: &PyVal, exp: &PyVal) -> String {
    format!("expected {}, got {}", exp.render(), out.render())
}

fn arg(args: &Value, i: usize) -> Option<f64> {
    args.get(i).and_then(Value::as_f64)
}

/// The elements `set(x)` would hold.
fn elements(v: &PyVal) -> Option<Vec<PyVal>> {
    match v {
        PyVal::List(x) | PyVal::Tuple(x) | PyVal::Set { items: x, .. } => Some(x.clone()),
        PyVal::Dict(pairs) => Some(pairs.iter().map(|(k, _)| k.clone()).collect()),
        PyVal::Str(s) => Some(s.chars().map(|c| PyVal::Str(c.to_string())).collect()),
        _ => None,
    }
}

/// Sum of the digit-wise distances of two non-negative integers padded to the same length.
fn digit_distance(a: &str, b: &str) -> Option<u64> {
    let digits = |s: &str| s.bytes().all(|c| c.is_ascii_digit()).then_some(s.len());
    let n = digits(a)?.max(digits(b)?);
    let pad = |s: &str| format!("{}{s}", "0".repeat(n - s.len()));
    Some(
        pad(a)
            .bytes()
            .zip(pad(b).bytes())
            .map(|(x, y)| u64::from(x.abs_diff(y)))
            .sum(),
    )
}

/// EvalPlus's `is_floats`: a float, or a non-empty list or tuple of floats only.
pub fn is_floats(v: &PyVal) -> bool {
    match v {
        PyVal::Float(_) => true,
        PyVal::List(x) | PyVal::Tuple(x) => {
            !x.is_empty() && x.iter().all(|i| matches!(i, PyVal::Float(_)))
        }
        _ => false,
    }
}

/// `numpy.allclose(a, b, rtol=1e-7, atol)`: numbers elementwise over equal shapes (a scalar
/// broadcasts), infinities equal only to themselves, NaN never close; anything that numpy could
/// not subtract (strings, None, dicts) is not close.
fn allclose(a: &PyVal, b: &PyVal, atol: f64) -> bool {
    let seq = |v: &PyVal| match v {
        PyVal::List(x) | PyVal::Tuple(x) => Some(x.clone()),
        _ => None,
    };
    match (seq(a), seq(b)) {
        (Some(x), Some(y)) => {
            x.len() == y.len() && x.iter().zip(&y).all(|(p, q)| allclose(p, q, atol))
        }
        (Some(x), None) => x.iter().all(|p| allclose(p, b, atol)),
        (None, Some(y)) => y.iter().all(|q| allclose(a, q, atol)),
        (None, None) => match (complex(a), complex(b)) {
            (Some(x), Some(y)) => isclose(x, y, atol),
            _ => false,
        },
    }
}

fn complex(v: &PyVal) -> Option<(f64, f64)> {
    match v {
        PyVal::Complex(r, i) => Some((*r, *i)),
        other => other.as_f64().map(|f| (f, 0.0)),
    }
}

/// `numpy.isclose` for one pair: `|a - b| <= atol + rtol * |b|`, infinities by equality.
fn isclose(a: (f64, f64), b: (f64, f64), atol: f64) -> bool {
    let finite = |(r, i): (f64, f64)| r.is_finite() && i.is_finite();
    if !finite(a) || !finite(b) {
        return a == b;
    }
    let diff = (a.0 - b.0).hypot(a.1 - b.1);
    diff <= atol + RTOL * b.0.hypot(b.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn int(n: i64) -> PyVal {
        PyVal::Int(n.to_string())
    }

    #[test]
    fn equality_follows_python() {
        assert!(py_eq(&int(1), &PyVal::Float(1.0)));
        assert!(py_eq(&PyVal::Bool(true), &int(1)));
        assert!(!py_eq(
            &PyVal::List(vec![int(1)]),
            &PyVal::Tuple(vec![int(1)])
        ));
        assert!(!py_eq(&PyVal::Float(f64::NAN), &PyVal::Float(f64::NAN)));
        assert!(py_eq(&PyVal::Float(-0.0), &int(0)));
        let set = |items| PyVal::Set {
            frozen: false,
            items,
        };
        assert!(py_eq(
            &set(vec![int(2), int(1)]),
            &set(vec![PyVal::Float(1.0), int(2)])
        ));
        let d1 = PyVal::Dict(vec![
            (int(1), PyVal::Str("a".into())),
            (int(2), PyVal::None),
        ]);
        let d2 = PyVal::Dict(vec![
            (int(2), PyVal::None),
            (int(1), PyVal::Str("a".into())),
        ]);
        assert!(py_eq(&d1, &d2));
        assert!(!py_eq(
            &PyVal::Opaque("X".into()),
            &PyVal::Opaque("X".into())
        ));
        // Integers beyond 64 bits compare by their digits.
        let big = PyVal::Int("123456789012345678901234567890".into());
        assert!(py_eq(&big, &big.clone()));
        assert!(!py_eq(
            &big,
            &PyVal::Int("123456789012345678901234567891".into())
        ));
    }

    #[test]
    fn floats_get_the_evalplus_tolerance() {
        let none = json!([]);
        // atol 0 and a float expected: 1e-6 is enforced.
        assert!(
            check(
                &PyVal::Float(0.3000001),
                &PyVal::Float(0.3),
                &none,
                0.0,
                Oracle::Exact
            )
            .is_ok()
        );
        assert!(
            check(
                &PyVal::Float(0.31),
                &PyVal::Float(0.3),
                &none,
                0.0,
                Oracle::Exact
            )
            .is_err()
        );
        // An int where a float is expected, not equal: the types differ.
        assert!(
            check(
                &int(3),
                &PyVal::Float(3.0000001),
                &none,
                1e-3,
                Oracle::Exact
            )
            .is_err()
        );
        // Lists of floats, element-wise; lengths must agree.
        let l = |x: &[f64]| PyVal::List(x.iter().map(|f| PyVal::Float(*f)).collect());
        assert!(
            check(
                &l(&[1.0, 2.00001]),
                &l(&[1.0, 2.0]),
                &none,
                1e-4,
                Oracle::Exact
            )
            .is_ok()
        );
        assert!(check(&l(&[1.0]), &l(&[1.0, 2.0]), &none, 1e-4, Oracle::Exact).is_err());
        // NaN is never close; infinities only to themselves.
        assert!(
            check(
                &PyVal::Float(f64::NAN),
                &PyVal::Float(f64::NAN),
                &none,
                1e-6,
                Oracle::Exact
            )
            .is_err()
        );
        let inf = PyVal::Float(f64::INFINITY);
        assert!(check(&inf, &inf.clone(), &none, 1e-6, Oracle::Exact).is_ok());
        // Non-floats are exact whatever atol says (a string is never close).
        assert!(
            check(
                &PyVal::Str("a".into()),
                &PyVal::Str("b".into()),
                &none,
                1.0,
                Oracle::Exact
            )
            .is_err()
        );
        assert!(check(&int(5), &int(6), &none, 0.0, Oracle::Exact).is_err());
    }

    #[test]
    fn special_oracles() {
        // find_zero: any root passes.
        let xs = json!([[-6.0, 11.0, -6.0, 1.0]]); // (x-1)(x-2)(x-3)
        assert!(
            check(
                &PyVal::Float(2.0),
                &PyVal::Float(1.0),
                &xs,
                1e-6,
                Oracle::PolyRoot
            )
            .is_ok()
        );
        assert!(
            check(
                &PyVal::Float(2.5),
                &PyVal::Float(1.0),
                &xs,
                1e-6,
                Oracle::PolyRoot
            )
            .is_err()
        );
        assert!(
            check(
                &PyVal::Str("2".into()),
                &PyVal::Float(1.0),
                &xs,
                1e-6,
                Oracle::PolyRoot
            )
            .is_err()
        );
        let l = |x: &[i64]| PyVal::List(x.iter().map(|n| int(*n)).collect());
        assert!(
            check(
                &l(&[2, 1]),
                &PyVal::Tuple(vec![int(1), int(2)]),
                &json!([]),
                0.0,
                Oracle::SetEq
            )
            .is_ok()
        );
        assert!(check(&l(&[3]), &l(&[1]), &json!([]), 0.0, Oracle::SetEq).is_err());
        assert!(
            check(
                &PyVal::Opaque("Match".into()),
                &PyVal::Bool(true),
                &json!([]),
                0.0,
                Oracle::NotNone
            )
            .is_ok()
        );
        assert!(
            check(
                &PyVal::None,
                &PyVal::Bool(true),
                &json!([]),
                0.0,
                Oracle::NotNone
            )
            .is_err()
        );
        assert!(check(&int(0), &int(7), &json!([]), 0.0, Oracle::OrZero).is_ok());
        assert!(
            check(
                &int(21),
                &int(9),
                &json!([13, 4]),
                0.0,
                Oracle::DigitDistance
            )
            .is_err()
        );
        assert!(
            check(
                &int(7),
                &int(9),
                &json!([123, 256]),
                0.0,
                Oracle::DigitDistance
            )
            .is_ok()
        );
        // 3x3 base, height 4: 9 + 2 * 3 * sqrt(1.5^2 + 16) = 34.6..., rounded 35.
        assert!(
            check(
                &int(35),
                &int(9),
                &json!([3, 4]),
                1e-4,
                Oracle::PyramidSurfaceArea
            )
            .is_ok()
        );
    }
}
