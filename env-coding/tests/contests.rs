//! Loaders of the stdin/stdout judged datasets (issue 14) on small fixtures written here:
//! CodeContests, APPS / TACO (stdin and call-based), LiveCodeBench (stdin, functional, and the
//! published compressed private tests). Each fixture's task is scored with a right and a wrong
//! program through the real sandbox.

mod support;

use std::io::Write;

use base64::Engine;
use codegym_sandbox::lang::Language;
use env_coding::reward::run::Program;
use env_coding::tasks::{Task, TaskFormat, TaskSet};
use serde_json::json;

fn load(lines: &[serde_json::Value]) -> TaskSet {
    let lines: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    support::load("set.jsonl", &lines)
}

async fn reward(task: &Task, language: Language, source: &str) -> (f64, serde_json::Value) {
    let program = Program::new(source).in_language(language);
    let out = support::scored(task, &program).await.expect("scored");
    (out.reward, out.breakdown())
}

#[tokio::test]
async fn code_contests_with_limits_and_a_python_reference() {
    let set = load(&[json!({
        "name": "1_A. Double", "description": "Print twice the number.",
        "public_tests": {"input": ["2\n"], "output": ["4\n"]},
        "private_tests": {"input": ["5\n"], "output": ["10\n"]},
        "generated_tests": {"input": ["-3\n"], "output": ["-6\n"]},
        "time_limit": {"seconds": 1, "nanos": 500000000}, "memory_limit_bytes": 268435456,
        "solutions": {"language": [2, 3], "solution": ["int main(){}", "print(2 * int(input()))"]},
        "cf_rating": 800
    })]);
    assert_eq!(set.format(), TaskFormat::CodeContests);
    let task = set.get("1_A. Double").expect("task");
    let env_coding::reward::Component::Judge(j) = &task.reward.components[0] else {
        panic!("{:?}", task.reward)
    };
    assert_eq!(
        (j.tests.len(), j.time_limit_ms, j.memory_limit_mb),
        (3, 1500, Some(256))
    );
    let reference = task.reference_solution.clone().expect("python reference");
    assert_eq!(reward(task, Language::Python, &reference).await.0, 1.0);
    let cpp = "#include <cstdio>\nint main(){long n; scanf(\"%ld\",&n); printf(\"%ld\\n\", 2*n);}";
    assert_eq!(reward(task, Language::Cpp, cpp).await.0, 1.0);
    let (r, b) = reward(task, Language::Python, "print(abs(2 * int(input())))").await;
    assert_eq!(r, 0.0);
    assert_eq!(
        b["components"][0]["detail"]["verdicts"],
        json!(["AC", "AC", "WA"])
    );
}

#[tokio::test]
async fn apps_stdin_and_call_based() {
    let set = load(&[
        json!({"problem_id": 1, "question": "Sum two numbers.", "difficulty": "introductory",
               "input_output": json!({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]}).to_string(),
               "solutions": json!(["a, b = map(int, input().split())\nprint(a + b)"]).to_string(),
               "starter_code": ""}),
        json!({"problem_id": 2, "question": "Return the sorted list.",
               "input_output": json!({"fn_name": "sort_it", "inputs": [[[3, 1, 2]], [[]]],
                                       "outputs": [[[1, 2, 3]], [[]]]}).to_string(),
               "starter_code": "def sort_it(xs):"}),
    ]);
    assert_eq!(set.format(), TaskFormat::Apps);
    let stdin = set.get("1").expect("1");
    let reference = stdin.reference_solution.clone().expect("reference");
    assert_eq!(reward(stdin, Language::Python, &reference).await.0, 1.0);
    let call = set.get("2").expect("2");
    assert!(call.prompt.ends_with("def sort_it(xs):"));
    assert_eq!(
        reward(
            call,
            Language::Python,
            "def sort_it(xs):\n    return sorted(xs)"
        )
        .await
        .0,
        1.0
    );
    let method = "class Solution:\n    def sort_it(self, xs):\n        return tuple(sorted(xs))";
    assert_eq!(reward(call, Language::Python, method).await.0, 1.0);
    assert_eq!(
        reward(call, Language::Python, "def sort_it(xs):\n    return xs")
            .await
            .0,
        0.0
    );
}

/// LiveCodeBench's publication of private tests: base64(zlib(pickle(str))).
fn packed(cases: &serde_json::Value) -> String {
    let text = cases.to_string();
    let mut p = vec![0x80, 4, 0x8d];
    p.extend_from_slice(&(text.len() as u64).to_le_bytes());
    p.extend_from_slice(text.as_bytes());
    p.extend_from_slice(b"\x94.");
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&p).expect("zlib");
    base64::engine::general_purpose::STANDARD.encode(z.finish().expect("zlib"))
}

#[tokio::test]
async fn livecodebench_stdin_functional_and_packed_private_tests() {
    let set = load(&[
        json!({"question_title": "A+B", "question_id": "abc001_a", "platform": "atcoder",
               "question_content": "Print A+B.", "starter_code": "",
               "public_test_cases": json!([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]).to_string(),
               "private_test_cases": packed(&json!([{"input": "5 5\n", "output": "10\n", "testtype": "stdin"}])),
               "metadata": "{}"}),
        json!({"question_title": "Max", "question_id": "lc-1", "platform": "leetcode",
               "question_content": "Return the maximum.",
               "starter_code": "class Solution:\n    def biggest(self, nums: List[int]) -> int:\n        ",
               "public_test_cases": json!([{"input": "[1, 5, 2]", "output": "5", "testtype": "functional"},
                                            {"input": "[-1]", "output": "-1", "testtype": "functional"}]).to_string(),
               "private_test_cases": "",
               "metadata": json!({"func_name": "biggest"}).to_string()}),
    ]);
    assert_eq!(set.format(), TaskFormat::LiveCodeBench);
    let ab = set.get("abc001_a").expect("abc");
    let env_coding::reward::Component::Judge(j) = &ab.reward.components[0] else {
        panic!()
    };
    assert_eq!(j.tests.len(), 2, "public + private");
    assert_eq!(
        reward(
            ab,
            Language::Python,
            "print(sum(map(int, input().split())))"
        )
        .await
        .0,
        1.0
    );
    let go =
        "package main\nimport \"fmt\"\nfunc main(){var a,b int; fmt.Scan(&a,&b); fmt.Println(a+b)}";
    assert_eq!(reward(ab, Language::Go, go).await.0, 1.0);
    let lc = set.get("lc-1").expect("lc");
    let sol = "from typing import List\nclass Solution:\n    def biggest(self, nums: List[int]) -> int:\n        return max(nums)";
    assert_eq!(reward(lc, Language::Python, sol).await.0, 1.0);
    let wrong = "from typing import List\nclass Solution:\n    def biggest(self, nums: List[int]) -> int:\n        return min(nums)";
    assert_eq!(reward(lc, Language::Python, wrong).await.0, 0.0);
}

#[test]
fn malformed_records_name_their_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.jsonl");
    std::fs::write(
        &path,
        "{\"name\": \"x\", \"description\": \"d\", \"public_tests\": {\"input\": [\"1\"], \"output\": []}}\n",
    )
    .expect("write");
    let e = TaskSet::load(&path).expect_err("unequal lists").to_string();
    assert!(e.contains("bad.jsonl:1") && e.contains("unequal"), "{e}");
    std::fs::write(
        &path,
        "{\"name\": \"x\", \"description\": \"d\", \"public_tests\": {}}\n",
    )
    .expect("write");
    let e = TaskSet::load(&path).expect_err("no tests").to_string();
    assert!(e.contains("no tests"), "{e}");
}
