//! Competitive-programming datasets as native [`Task`]s judged on stdin/stdout (issue 14):
//! CodeContests, APPS / TACO and LiveCodeBench records, each becoming one `judge` component.
//!
//! - CodeContests: `public_tests`, `private_tests` and `generated_tests` (`{input: [], output: []}`)
//!   are the tests; `time_limit` (`{seconds, nanos}`) and `memory_limit_bytes` the per-test limits;
//!   the first Python 3 solution the reference.
//! - APPS / TACO: `input_output` (a JSON string) with `inputs`/`outputs`; with `fn_name` the problem
//!   is call-based: each input is the argument list, and a Python driver appended to the program
//!   calls the function (or `Solution().fn_name`) and prints the JSON result (APPS wraps each
//!   expected result in a one-element list; it is unwrapped).
//! - LiveCodeBench (`code_generation_lite`): `public_test_cases` and `private_test_cases` (a JSON
//!   string, or base64 of zlib of a pickled JSON string as published), `testtype` `stdin` or
//!   `functional` (one JSON argument per input line, `metadata.func_name`).
//!
//! Data files come from the user (Hugging Face exports as JSON Lines); nothing is downloaded.

use std::io::Read;

use base64::Engine;
use serde::Deserialize;
use serde_json::Value;

use super::Task;
use crate::judge::{Checker, JudgeSpec, TestCase};
use crate::reward::{Component, Penalties, REWARD_SPEC_VERSION, RewardSpec};
use codegym_sandbox::lang::Language;

fn judge_task(
    id: String,
    prompt: String,
    judge: JudgeSpec,
    reference: Option<String>,
    source: &str,
) -> Result<Task, String> {
    let reward = RewardSpec {
        version: REWARD_SPEC_VERSION,
        components: vec![Component::Judge(judge)],
        penalties: Penalties::default(),
    };
    reward.validate().map_err(|e| format!("task {id:?}: {e}"))?;
    let mut metadata = serde_json::Map::new();
    metadata.insert("source".into(), source.into());
    Ok(Task {
        id,
        prompt,
        reward,
        reference_solution: reference,
        completion_prefix: None,
        metadata,
        deterministic: true,
        data: Default::default(),
        language: Language::Python,
    })
}

fn spec(tests: Vec<TestCase>, time_limit_ms: u64, memory_limit_mb: Option<u64>) -> JudgeSpec {
    JudgeSpec {
        tests,
        checker: Checker::Tokens,
        time_limit_ms,
        memory_limit_mb,
        partial: false,
        weight: 1.0,
        driver: None,
    }
}

/// A JSON value or a JSON document inside a string (the datasets store both).
fn json_or_string(v: Value) -> Result<Value, String> {
    match v {
        Value::String(s) if s.trim().is_empty() => Ok(Value::Null),
        Value::String(s) => serde_json::from_str(&s).map_err(|e| format!("embedded JSON: {e}")),
        other => Ok(other),
    }
}

#[derive(Deserialize, Default)]
struct IoLists {
    #[serde(default)]
    input: Vec<String>,
    #[serde(default)]
    output: Vec<String>,
}

#[derive(Deserialize)]
struct Duration {
    #[serde(default)]
    seconds: u64,
    #[serde(default)]
    nanos: u64,
}

#[derive(Deserialize, Default)]
struct Solutions {
    #[serde(default)]
    language: Vec<i64>,
    #[serde(default)]
    solution: Vec<String>,
}

#[derive(Deserialize)]
struct CodeContests {
    name: String,
    description: String,
    #[serde(default)]
    public_tests: IoLists,
    #[serde(default)]
    private_tests: IoLists,
    #[serde(default)]
    generated_tests: IoLists,
    #[serde(default)]
    time_limit: Option<Duration>,
    #[serde(default)]
    memory_limit_bytes: Option<u64>,
    #[serde(default)]
    solutions: Option<Solutions>,
}

/// CodeContests' language code of Python 3 solutions.
const CC_PYTHON3: i64 = 3;

pub(super) fn code_contests(value: Value) -> Result<Task, String> {
    let r: CodeContests =
        serde_json::from_value(value).map_err(|e| format!("invalid CodeContests record: {e}"))?;
    let mut tests = Vec::new();
    for lists in [r.public_tests, r.private_tests, r.generated_tests] {
        if lists.input.len() != lists.output.len() {
            return Err(format!("{}: tests with unequal input/output lists", r.name));
        }
        tests.extend(
            lists
                .input
                .into_iter()
                .zip(lists.output)
                .map(|(input, output)| TestCase { input, output }),
        );
    }
    let time_ms = r
        .time_limit
        .map(|d| d.seconds * 1000 + d.nanos / 1_000_000)
        .filter(|ms| *ms > 0)
        .unwrap_or(2_000);
    let memory_mb = r.memory_limit_bytes.filter(|b| *b > 0).map(|b| b >> 20);
    let reference = r.solutions.and_then(|s| {
        s.language
            .iter()
            .position(|l| *l == CC_PYTHON3)
            .and_then(|i| s.solution.get(i).cloned())
    });
    judge_task(
        r.name,
        r.description,
        spec(tests, time_ms, memory_mb),
        reference,
        "code_contests",
    )
}

/// The Python driver of a call-based problem: reads one JSON argument per stdin line, calls
/// `fn_name` (a function, or a method of `Solution`), prints the compact JSON of the result.
pub fn call_driver(fn_name: &str) -> String {
    let name = serde_json::to_string(fn_name).unwrap_or_else(|_| "\"\"".into());
    format!(
        "\n\ndef _codegym_call():\n    import json, sys\n    args = [json.loads(l) for l in sys.stdin.read().splitlines() if l.strip()]\n    f = globals().get({name})\n    if f is None and 'Solution' in globals():\n        f = getattr(globals()['Solution'](), {name})\n    r = f(*args)\n    if isinstance(r, tuple):\n        r = list(r)\n    print(json.dumps(r, separators=(',', ':')))\n\n_codegym_call()\n"
    )
}

/// A value as the driver prints it (compact JSON).
fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

#[derive(Deserialize)]
struct Apps {
    #[serde(alias = "problem_id", alias = "id")]
    problem_id: Value,
    question: String,
    input_output: Value,
    #[serde(default)]
    starter_code: Option<String>,
    #[serde(default)]
    solutions: Option<Value>,
}

pub(super) fn apps(value: Value) -> Result<Task, String> {
    let r: Apps =
        serde_json::from_value(value).map_err(|e| format!("invalid APPS/TACO record: {e}"))?;
    let id = match &r.problem_id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let io = json_or_string(r.input_output)?;
    let inputs = io
        .get("inputs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let outputs = io
        .get("outputs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if inputs.len() != outputs.len() {
        return Err(format!(
            "{id}: {} inputs but {} outputs",
            inputs.len(),
            outputs.len()
        ));
    }
    let fn_name = io
        .get("fn_name")
        .and_then(Value::as_str)
        .map(str::to_string);
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Array(lines) => lines
            .iter()
            .map(|l| l.as_str().map_or_else(|| l.to_string(), str::to_string) + "\n")
            .collect(),
        other => other.to_string(),
    };
    let tests: Vec<TestCase> = inputs
        .iter()
        .zip(&outputs)
        .map(|(i, o)| match &fn_name {
            Some(_) => TestCase {
                input: i
                    .as_array()
                    .map(|args| args.iter().map(|a| compact(a) + "\n").collect())
                    .unwrap_or_else(|| compact(i) + "\n"),
                output: match o {
                    Value::Array(one) if one.len() == 1 => compact(&one[0]),
                    other => compact(other),
                },
            },
            None => TestCase {
                input: text(i),
                output: text(o),
            },
        })
        .collect();
    let mut judge = spec(tests, 4_000, None);
    let mut prompt = r.question;
    if let Some(name) = &fn_name {
        judge.checker = Checker::Exact;
        judge.driver = Some(call_driver(name));
    }
    if let Some(starter) = r.starter_code.filter(|s| !s.trim().is_empty()) {
        prompt.push_str("\n\n");
        prompt.push_str(&starter);
    }
    let reference = r.solutions.map(json_or_string).transpose()?.and_then(|s| {
        s.as_array()
            .and_then(|a| a.first())
            .and_then(|s| s.as_str().map(str::to_string))
    });
    judge_task(id, prompt, judge, reference, "apps")
}

#[derive(Deserialize)]
struct Lcb {
    question_id: Value,
    question_content: String,
    #[serde(default)]
    starter_code: Option<String>,
    public_test_cases: Value,
    #[serde(default)]
    private_test_cases: Option<Value>,
    #[serde(default)]
    metadata: Option<Value>,
}

#[derive(Deserialize)]
struct LcbCase {
    input: String,
    output: String,
    #[serde(default)]
    testtype: Option<String>,
}

/// LiveCodeBench's private tests: a JSON string, or base64(zlib(pickle(JSON string))).
fn lcb_cases(v: Value) -> Result<Vec<LcbCase>, String> {
    if let Value::String(s) = &v
        && !s.trim_start().starts_with('[')
        && !s.trim().is_empty()
    {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .map_err(|e| format!("private_test_cases: base64: {e}"))?;
        let mut unzipped = Vec::new();
        flate2::read::ZlibDecoder::new(raw.as_slice())
            .read_to_end(&mut unzipped)
            .map_err(|e| format!("private_test_cases: zlib: {e}"))?;
        let text = pickled_str(&unzipped)?;
        return serde_json::from_str(&text).map_err(|e| format!("private_test_cases: {e}"));
    }
    match json_or_string(v)? {
        Value::Null => Ok(Vec::new()),
        other => serde_json::from_value(other).map_err(|e| format!("test cases: {e}")),
    }
}

/// The one string a pickle of a `str` holds (protocol 2-5: `SHORT_BINUNICODE`, `BINUNICODE`,
/// `BINUNICODE8`); nothing else of pickle is interpreted (no code runs).
fn pickled_str(p: &[u8]) -> Result<String, String> {
    let mut i = 0;
    let bad = || "private_test_cases: not a pickled string".to_string();
    while i < p.len() {
        let (len, at) = match p[i] {
            0x80 => {
                i += 2; // PROTO n
                continue;
            }
            0x95 => {
                i += 9; // FRAME u64
                continue;
            }
            0x8c => (usize::from(*p.get(i + 1).ok_or_else(bad)?), i + 2),
            b'X' => {
                let b: [u8; 4] = p
                    .get(i + 1..i + 5)
                    .ok_or_else(bad)?
                    .try_into()
                    .map_err(|_| bad())?;
                (u32::from_le_bytes(b) as usize, i + 5)
            }
            0x8d => {
                let b: [u8; 8] = p
                    .get(i + 1..i + 9)
                    .ok_or_else(bad)?
                    .try_into()
                    .map_err(|_| bad())?;
                (u64::from_le_bytes(b) as usize, i + 9)
            }
            _ => return Err(bad()),
        };
        let bytes = p.get(at..at + len).ok_or_else(bad)?;
        return String::from_utf8(bytes.to_vec()).map_err(|_| bad());
    }
    Err(bad())
}

pub(super) fn livecodebench(value: Value) -> Result<Task, String> {
    let r: Lcb =
        serde_json::from_value(value).map_err(|e| format!("invalid LiveCodeBench record: {e}"))?;
    let id = match &r.question_id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut cases = lcb_cases(r.public_test_cases)?;
    if let Some(p) = r.private_test_cases {
        cases.extend(lcb_cases(p)?);
    }
    let functional = cases
        .iter()
        .any(|c| c.testtype.as_deref() == Some("functional"));
    let fn_name = r.metadata.map(json_or_string).transpose()?.and_then(|m| {
        m.get("func_name")
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    let tests = cases
        .into_iter()
        .map(|c| {
            if functional {
                let output = serde_json::from_str::<Value>(&c.output)
                    .map(|v| compact(&v))
                    .unwrap_or(c.output);
                TestCase {
                    input: c.input,
                    output,
                }
            } else {
                TestCase {
                    input: c.input,
                    output: c.output,
                }
            }
        })
        .collect();
    let mut judge = spec(tests, 6_000, None);
    if functional {
        let name = fn_name.ok_or_else(|| format!("{id}: functional tests without func_name"))?;
        judge.checker = Checker::Exact;
        judge.driver = Some(call_driver(&name));
    }
    let mut prompt = r.question_content;
    if let Some(starter) = r.starter_code.filter(|s| !s.trim().is_empty()) {
        prompt.push_str("\n\n");
        prompt.push_str(&starter);
    }
    judge_task(id, prompt, judge, None, "livecodebench")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pickled_strings_decode_and_other_pickles_are_refused() {
        // pickle.dumps("[]", protocol=4) == b'\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00\x8c\x02[]\x94.'
        let p = b"\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00\x8c\x02[]\x94.";
        assert_eq!(pickled_str(p).unwrap(), "[]");
        assert!(pickled_str(b"\x80\x04cos\nsystem\n").is_err());
        assert!(pickled_str(b"\x8c\x10short").is_err());
    }
}
