//! MultiPL-E (issue 14) on fixtures written here: records in C++, JavaScript, Java and Perl load as
//! tasks in their language; `prompt + completion + tests` runs in the sandbox and passes on exit 0
//! (Perl: and no `ERROR` printed), so a canonical-ish completion is solved and a wrong one failed.
//! Languages codegym cannot run are load-time errors naming file, line and language.

mod support;

use codegym_sandbox::lang::Language;
use env_coding::reward::run::{EvalOptions, Program, score_program};
use env_coding::tasks::{Task, TaskFormat, TaskSet};
use serde_json::{Value, json};

fn write(lines: &[Value]) -> (tempfile::TempDir, std::path::PathBuf) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    support::write("multipl_e.jsonl", &text)
}

fn record(name: &str, language: &str, prompt: &str, tests: &str) -> Value {
    json!({"name": name, "language": language, "prompt": prompt, "tests": tests,
           "stop_tokens": ["\n}"], "doctests": "transform", "original": "HumanEval_53_add.py",
           "prompt_terminology": "reworded"})
}

fn fixtures() -> Vec<Value> {
    vec![
        record(
            "HumanEval_53_add_cpp",
            "cpp",
            "#include<assert.h>\n#include<bits/stdc++.h>\n// Add two numbers x and y\nlong add(long x, long y) {\n",
            "}\nint main() {\n    auto candidate = add;\n    assert(candidate((0), (1)) == (1));\n    assert(candidate((5), (7)) == (12));\n}\n",
        ),
        record(
            "HumanEval_53_add_js",
            "js",
            "//Add two numbers x and y\nfunction add(x, y){\n",
            "const assert = require('node:assert');\n\nfunction test() {\n  let candidate = add;\n  assert.deepEqual(candidate(0, 1),1);\n  assert.deepEqual(candidate(5, 7),12);\n}\n\ntest();\n",
        ),
        record(
            "HumanEval_53_add_java",
            "java",
            "import java.util.*;\nimport java.math.*;\nclass Problem {\n    // Add two numbers x and y\n    public static long add(long x, long y) {\n",
            "    }\n    public static void main(String[] args) {\n    assert(add((0l), (1l)) == (1l));\n    assert(add((5l), (7l)) == (12l));\n    }\n\n}\n",
        ),
        record(
            "HumanEval_53_add_pl",
            "pl",
            "# Add two numbers x and y\nsub add {\n    my($x, $y) = @_;\n",
            "use Test::Deep;\n\nsub testhumaneval {\n    my $candidate = \\&add;\n        if(eq_deeply($candidate->(0, 1),1)) {\n        print \"ok!\" }else{\n        exit 1;\n        }\n        if(eq_deeply($candidate->(5, 7),12)) {\n        print \"ok!\" }else{\n        exit 1;\n        }\n}\n\ntesthumaneval();\n",
        ),
    ]
}

async fn score(task: &Task, completion: &str) -> (f64, Value) {
    let program = Program::new(task.program_from_completion(completion)).in_language(task.language);
    let out = support::scored(task, &program).await.expect("scored");
    (
        out.reward,
        out.breakdown()["components"][0]["detail"].clone(),
    )
}

#[tokio::test]
async fn records_load_in_their_language_and_completions_are_judged_by_exit_code() {
    let (_dir, path) = write(&fixtures());
    let set = TaskSet::load(&path).expect("load");
    assert_eq!(set.format(), TaskFormat::MultiplE);
    let cases = [
        (
            "HumanEval_53_add_cpp",
            Language::Cpp,
            "    return x + y;\n",
            "    return x - y;\n",
        ),
        (
            "HumanEval_53_add_js",
            Language::NodeJs,
            "  return x + y;\n}\n",
            "  return x * y;\n}\n",
        ),
        (
            "HumanEval_53_add_java",
            Language::Java,
            "        return x + y;\n",
            "        return x - y;\n",
        ),
        (
            "HumanEval_53_add_pl",
            Language::Perl,
            "    return $x + $y;\n}\n",
            "    return $x - $y;\n}\n",
        ),
    ];
    for (id, language, right, wrong) in cases {
        let task = set.get(id).expect("task");
        assert_eq!(task.language, language, "{id}");
        assert_eq!(
            task.completion_prefix.as_deref(),
            Some(task.prompt.as_str())
        );
        assert_eq!(task.metadata["stop_tokens"], json!(["\n}"]));
        let (reward, d) = score(task, right).await;
        assert_eq!(reward, 1.0, "{id}: {d}");
        assert_eq!(d["status"], "OK", "{id}: {d}");
        let (reward, d) = score(task, wrong).await;
        assert_eq!(reward, 0.0, "{id}: {d}");
        assert_eq!(d["status"], "Exception", "{id}: {d}");
    }
    // A completion that does not compile is MultiPL-E's SyntaxError.
    let cpp = set.get("HumanEval_53_add_cpp").expect("task");
    let (reward, d) = score(cpp, "    return x +;\n").await;
    assert_eq!(
        (reward, d["status"].as_str()),
        (0.0, Some("SyntaxError")),
        "{d}"
    );
}

#[tokio::test]
async fn perl_runs_that_print_error_fail_even_on_exit_0() {
    let (_dir, path) = write(&fixtures());
    let set = TaskSet::load(&path).expect("load");
    let task = set.get("HumanEval_53_add_pl").expect("task");
    let (reward, d) = score(
        task,
        "    print STDERR \"ERROR\\n\";\n    return $x + $y;\n}\n",
    )
    .await;
    assert_eq!(reward, 0.0, "{d}");
    assert_eq!(
        (d["exit_code"].as_i64(), d["status"].as_str()),
        (Some(0), Some("Exception")),
        "{d}"
    );
}

#[tokio::test]
async fn a_completion_that_loops_is_a_timeout() {
    let (_dir, path) = write(&fixtures());
    let set = TaskSet::load(&path).expect("load");
    let task = set.get("HumanEval_53_add_js").expect("task");
    let program = Program::new(task.program_from_completion("  while (true) {}\n}\n"))
        .in_language(task.language);
    let opts = EvalOptions {
        limits: Some(codegym_sandbox::Limits {
            cpu_ms: 1_000,
            wall_ms: 3_000,
            ..*support::sandbox().limits()
        }),
        ..EvalOptions::default()
    };
    let out = score_program(support::sandbox(), &task.reward, &program, None, opts)
        .await
        .expect("scored");
    let d = &out.breakdown()["components"][0]["detail"];
    assert_eq!(
        (out.reward, d["status"].as_str()),
        (0.0, Some("Timeout")),
        "{d}"
    );
}

#[test]
fn languages_codegym_cannot_run_are_load_errors_naming_file_and_line() {
    for (language, want) in [("go_test.go", "go test"), ("cs", "\"cs\" is not supported")] {
        let mut lines = fixtures();
        lines.push(record("HumanEval_53_add_x", language, "x", "y"));
        let (_dir, path) = write(&lines);
        let e = TaskSet::load(&path).expect_err(language).to_string();
        assert!(e.contains("multipl_e.jsonl:5"), "{e}");
        assert!(e.contains(want), "{e}");
    }
    // A record missing its tests, and one with empty tests.
    let mut lines = fixtures();
    lines.push(json!({"name": "n", "language": "cpp", "prompt": "p", "stop_tokens": []}));
    let (_dir, path) = write(&lines);
    let e = TaskSet::load(&path).expect_err("no tests").to_string();
    assert!(e.contains(":5: invalid MultiPL-E record"), "{e}");
    let mut lines = fixtures();
    lines.push(record("n", "cpp", "p", "  "));
    let (_dir, path) = write(&lines);
    let e = TaskSet::load(&path).expect_err("empty tests").to_string();
    assert!(e.contains("has no tests"), "{e}");
    assert_eq!(
        env_coding::tasks::multipl_e_language("rs"),
        Ok(Language::Rust)
    );
}

#[tokio::test]
async fn whole_programs_pass_too() {
    // What a model writes in an env step or a rollout: the function closed, in C++ and Java the
    // whole program (the tests' own closing braces replace its last ones).
    let (_dir, path) = write(&fixtures());
    let set = TaskSet::load(&path).expect("load");
    let cases = [
        (
            "HumanEval_53_add_cpp",
            "#include<assert.h>\nlong add(long x, long y) {\n    return x + y; // }\n}\n",
        ),
        (
            "HumanEval_53_add_java",
            "class Problem {\n    public static long add(long x, long y) {\n        return x + y;\n    }\n}\n",
        ),
    ];
    for (id, program) in cases {
        let task = set.get(id).expect("task");
        let program = Program::new(program).in_language(task.language);
        let out = support::scored(task, &program).await.expect("scored");
        assert_eq!(out.reward, 1.0, "{id}: {}", out.breakdown());
    }
}

/// Python's MultiPL-E tests run outside the program's process (the unit-test harness's): what a
/// program does to its own process, leaving early first, cannot pass them; `in_process: true`
/// keeps MultiPL-E's own way, where the same program passes.
#[tokio::test]
async fn python_tests_run_outside_the_programs_process() {
    let py = record(
        "HumanEval_53_add_py",
        "py",
        "def add(x: int, y: int) -> int:\n    \"\"\"Add two numbers x and y\"\"\"\n",
        "def check(candidate):\n    assert candidate(0, 1) == 1\n    assert candidate(5, 7) == 12\n\ndef test_check():\n    check(add)\n\ntest_check()\n",
    );
    let (_dir, path) = write(&[py]);
    let set = TaskSet::load(&path).expect("load");
    let task = set.get("HumanEval_53_add_py").expect("task");
    assert_eq!(task.language, Language::Python);
    let cases = [
        ("    return x + y\n", 1.0, "OK"),
        ("    return x - y\n", 0.0, "Exception"),
        ("    return x +\n", 0.0, "SyntaxError"),
        // Leaving early with success, before the tests (MultiPL-E's way: exit 0 passes).
        ("    return x\nimport os\nos._exit(0)\n", 0.0, "Exception"),
        // An answer whose `__eq__` always holds.
        (
            "    class Yes:\n        def __eq__(self, other):\n            return True\n    return Yes()\n",
            0.0,
            "Exception",
        ),
    ];
    for (completion, want, status) in cases {
        let (reward, d) = score(task, completion).await;
        assert_eq!(
            (reward, d["status"].as_str()),
            (want, Some(status)),
            "{completion}: {d}"
        );
        assert_eq!(d["tests_process"], "separate", "{d}");
    }
    // The same early exit passes the tests when they share the program's process.
    let mut in_process = Task::clone(task);
    match &mut in_process.reward.components[0] {
        env_coding::reward::Component::AppendedTests { in_process, .. } => *in_process = true,
        other => panic!("{other:?}"),
    }
    let (reward, d) = score(&in_process, "    return x\nimport os\nos._exit(0)\n").await;
    assert_eq!((reward, d["status"].as_str()), (1.0, Some("OK")), "{d}");
}
