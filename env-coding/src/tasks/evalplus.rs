//! HumanEval+ and MBPP+ (EvalPlus) records as tasks scored by differential testing (issue 14).
//!
//! A record (`HumanEvalPlus.jsonl`, `MbppPlus.jsonl` of EvalPlus's releases): `task_id`
//! (`HumanEval/0`, `Mbpp/2`), `prompt`, `entry_point`, `canonical_solution`, `base_input` and
//! `plus_input` (lists of argument lists), `atol`; `contract`, MBPP+'s `assertion` / `test_list`
//! and other fields are accepted and unused. The program is `prompt + completion` (EvalPlus's
//! convention), the reference `prompt + canonical_solution`. The inputs are kept as the record's
//! own JSON text, so integers of any size reach Python unchanged.
//!
//! EvalPlus's per-task special cases are data here: the special oracles (`find_zero`'s roots,
//! MBPP's set-valued and `None`-checked outputs...) by entry point, and the MBPP+ tasks whose
//! JSON inputs stand for tuples, sets or complex numbers by task number.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::Task;
use crate::differential::{DiffSpec, Oracle, TestSet};
use crate::reward::{Component, Penalties, REWARD_SPEC_VERSION, RewardSpec};
use codegym_sandbox::lang::Language;

#[derive(Deserialize)]
struct Record<'a> {
    task_id: String,
    prompt: String,
    entry_point: String,
    canonical_solution: String,
    #[serde(borrow)]
    base_input: &'a RawValue,
    #[serde(default, borrow)]
    plus_input: Option<&'a RawValue>,
    #[serde(default)]
    atol: Option<f64>,
}

/// Parses one record from its JSON text.
pub(super) fn evalplus(text: &str) -> Result<Task, String> {
    let r: Record<'_> =
        serde_json::from_str(text).map_err(|e| format!("invalid EvalPlus record: {e}"))?;
    let mbpp = r.task_id.starts_with("Mbpp/");
    let oracle = if mbpp {
        mbpp_oracle(&r.entry_point)
    } else if r.entry_point == "find_zero" {
        Oracle::PolyRoot
    } else {
        Oracle::Exact
    };
    let deserialize = if mbpp {
        r.task_id
            .trim_start_matches("Mbpp/")
            .parse::<u32>()
            .ok()
            .and_then(mbpp_deserializer)
            .map(str::to_string)
    } else {
        None
    };
    let plus = r
        .plus_input
        .map(|p| p.get().to_string())
        .unwrap_or_default();
    let reference = format!("{}{}", r.prompt, r.canonical_solution);
    let spec = DiffSpec {
        entry_point: r.entry_point.clone(),
        reference: reference.clone(),
        base_inputs: r.base_input.get().to_string(),
        plus_inputs: if plus.trim() == "null" {
            String::new()
        } else {
            plus
        },
        atol: r.atol.unwrap_or(0.0),
        tests: TestSet::Plus,
        oracle,
        deserialize,
        time_limit_ms: 4_000,
        partial: false,
        weight: 1.0,
    };
    let reward = RewardSpec {
        version: REWARD_SPEC_VERSION,
        components: vec![Component::Differential(spec)],
        penalties: Penalties::default(),
    };
    reward
        .validate()
        .map_err(|e| format!("task {:?}: {e}", r.task_id))?;
    let mut metadata = serde_json::Map::new();
    let source = if mbpp { "mbpp_plus" } else { "humaneval_plus" };
    metadata.insert("source".into(), source.into());
    metadata.insert("entry_point".into(), r.entry_point.into());
    Ok(Task {
        id: r.task_id,
        completion_prefix: Some(r.prompt.clone()),
        prompt: r.prompt,
        reward,
        reference_solution: Some(reference),
        metadata,
        deterministic: true,
        data: Default::default(),
        language: Language::Python,
    })
}

/// EvalPlus's special oracles of MBPP+, by entry point.
fn mbpp_oracle(entry_point: &str) -> Oracle {
    match entry_point {
        "are_equivalent" => Oracle::AnyValue,
        "sum_div" => Oracle::OrZero,
        "surface_Area" => Oracle::PyramidSurfaceArea,
        "digit_distance_nums" => Oracle::DigitDistance,
        "check_str" | "text_match_three" | "text_starta_endb" => Oracle::NotNone,
        "similar_elements"
        | "find_char_long"
        | "common_in_nested_lists"
        | "extract_singly"
        | "larg_nnum"
        | "intersection_array"
        | "find_dissimilar"
        | "Diff" => Oracle::SetEq,
        _ => Oracle::Exact,
    }
}

/// The MBPP+ tasks whose JSON inputs stand for other Python types, and the runner's transform
/// that restores them (`differential::DESERIALIZERS`).
fn mbpp_deserializer(n: u32) -> Option<&'static str> {
    Some(match n {
        2 | 116 | 132 | 143 | 222 | 261 | 273 | 394 | 399 | 421 | 424 | 429 | 470 | 560 | 579
        | 596 | 616 | 630 | 726 | 740 | 744 | 809 => "args_to_tuples",
        63 | 64 | 70 | 94 | 120 | 237 | 272 | 299 | 400 | 409 | 417 | 438 | 473 | 614 | 780 => {
            "args_to_tuple_lists"
        }
        75 | 413 | 444 | 753 => "first_to_tuple_list",
        106 | 750 => "second_to_tuple",
        115 => "first_items_to_sets",
        124 => "float_complex",
        250 | 307 | 405 | 446 | 617 | 720 | 763 | 808 => "first_to_tuple",
        252 => "complex",
        259 | 401 | 445 => "args_to_tuples_of_tuples",
        278 => "first_lists_to_tuples_then_args",
        580 | 615 | 791 => "all_to_tuples",
        722 => "first_dict_values_to_tuples",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_deserializer_named_is_known_to_the_runner() {
        for n in 0..1000 {
            if let Some(d) = mbpp_deserializer(n) {
                assert!(crate::differential::DESERIALIZERS.contains(&d), "{n}: {d}");
                assert!(
                    crate::differential::RUNNER_SOURCE.contains(&format!("\"{d}\"")),
                    "{d}"
                );
            }
        }
    }

    #[test]
    fn big_integers_stay_text() {
        let line = r#"{"task_id": "HumanEval/1", "prompt": "def f(x):\n", "entry_point": "f", "canonical_solution": "    return x\n", "base_input": [[123456789012345678901234567890]], "plus_input": [], "atol": 0}"#;
        let t = evalplus(line).unwrap();
        let Component::Differential(d) = &t.reward.components[0] else {
            panic!("not differential")
        };
        assert_eq!(d.base_inputs, "[[123456789012345678901234567890]]");
        // The inline JSON (tasks sent to remote servers) keeps them too.
        assert_eq!(Task::from_json(t.to_json()).unwrap(), t);
    }
}
