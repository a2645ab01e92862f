//! Programs that forge a unit-test reward the way an optimizing policy finds them, on real
//! HumanEval tasks (`tasks/fixtures/humaneval_real.jsonl`: five records verbatim from
//! openai/human-eval, MIT) and on tests written to show each hole. Each forgery earned a full
//! reward before the harness saw the program only through its entry point, turned control-flow
//! exceptions into errors and counted asserts wherever the tests wrote them.

use std::path::Path;
use std::sync::Arc;

use codegym_sandbox::Limits;
use env_coding::reward::run::{EvalOptions, Program, score_program};
use env_coding::reward::{RewardOutcome, RewardSpec};
use env_coding::tasks::{Task, TaskSet};
use serde_json::json;

mod support;

use support::sandbox;

fn opts() -> EvalOptions {
    EvalOptions {
        limits: Some(Limits {
            cpu_ms: 10_000,
            wall_ms: 60_000,
            ..Limits::default()
        }),
        per_test_timeout_ms: 10_000,
        ..EvalOptions::default()
    }
}

async fn score(spec: &RewardSpec, source: &str) -> RewardOutcome {
    match score_program(sandbox(), spec, &Program::new(source), None, opts()).await {
        Ok(o) => o,
        Err(e) => panic!("infrastructure error: {e}"),
    }
}

fn humaneval(id: &str) -> Arc<Task> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks/fixtures/humaneval_real.jsonl");
    let set = TaskSet::load(path).unwrap_or_else(|e| panic!("{e}"));
    set.get(id)
        .unwrap_or_else(|| panic!("no task {id}"))
        .clone()
}

/// The reference solves the task, and `shadow` (a forgery appended to `completion`) earns nothing
/// more than `completion` alone does.
async fn forgery_fails(id: &str, completion: &str, shadow: &str) {
    let task = humaneval(id);
    let reference = task.reference_solution.clone().expect("a reference");
    let o = score(&task.reward, &reference).await;
    assert!(o.solved, "{id}: the reference must pass: {o:?}");
    let alone = score(&task.reward, &task.program_from_completion(completion)).await;
    let forged = task.program_from_completion(&format!("{completion}{shadow}"));
    let o = score(&task.reward, &forged).await;
    assert!(
        o.reward == alone.reward && !o.solved,
        "{id}: the forgery earned {} (the completion alone {}): {:?}",
        o.reward,
        alone.reward,
        o.components[0].detail
    );
}

#[tokio::test]
async fn redefining_a_builtin_the_tests_use_changes_nothing() {
    // HumanEval/2 and /4 compare with `abs(...) < 1e-6`: a program's own `abs` made every
    // comparison true.
    forgery_fails("HumanEval/2", "    return 0.5\n", "abs = lambda x: 0\n").await;
    forgery_fails(
        "HumanEval/4",
        "    return 0\n",
        "def abs(x):\n    return 0\n",
    )
    .await;
}

#[tokio::test]
async fn patching_the_builtins_module_changes_nothing() {
    // The program patches `builtins` and `math` for all the code of its process, the harness's
    // own answering code included. The patches reach neither the tests nor the answers they
    // get: the program earns what its answers earn, neither more nor (its answers lost to a
    // broken reply) less.
    let patches = "import builtins, math\n\
                   builtins.abs = lambda x: 0\n\
                   builtins.isinstance = lambda *a, **k: True\n\
                   builtins.all = lambda *a, **k: True\n\
                   math.isclose = lambda *a, **k: True\n";
    forgery_fails("HumanEval/2", "    return 0.5\n", patches).await;
    forgery_fails("HumanEval/4", "    return 1.0\n", patches).await;
}

#[tokio::test]
async fn the_tests_call_the_prompt_s_helpers_not_the_program_s() {
    // HumanEval/32 checks `poly(coeffs, solution)`, /38 and /50 decode what `encode_*` made: the
    // prompt defines both, and the program's copies of them replaced the tests'.
    forgery_fails(
        "HumanEval/32",
        "    return 0\n",
        "def poly(xs, x):\n    return 0\n",
    )
    .await;
    forgery_fails(
        "HumanEval/38",
        "    return s\n",
        "def encode_cyclic(s):\n    return s\n",
    )
    .await;
    forgery_fails(
        "HumanEval/50",
        "    return s\n",
        "encode_shift = lambda s: s\n",
    )
    .await;
}

fn spec(v: serde_json::Value) -> RewardSpec {
    RewardSpec::from_json(v).unwrap_or_else(|e| panic!("bad spec: {e}"))
}

#[tokio::test]
async fn mbpp_style_tests_resolve_builtins_and_setup_themselves() {
    let s = spec(json!({"version": 1, "components": [{"type": "asserts",
        "setup": "def close(a, b):\n    return abs(a - b) < 1e-9\n",
        "asserts": ["assert abs(area(2) - 12.566370614359172) < 1e-9",
                    "assert close(area(1), 3.141592653589793)"]}]}));
    let good = "import math\ndef area(r):\n    return math.pi * r * r\n";
    assert!(score(&s, good).await.solved);
    let forged =
        "def area(r):\n    return 0\nabs = lambda x: 0\ndef close(a, b):\n    return True\n";
    let o = score(&s, forged).await;
    assert_eq!(o.reward, 0.0, "{:?}", o.components[0].detail);
    // A task may declare a function with a builtin's name as the program's.
    let s = spec(json!({"version": 1, "components": [{"type": "asserts",
        "candidate_names": ["max"],
        "asserts": ["assert max([3, 1, 2]) == 3", "assert max([-1]) == -1"]}]}));
    let mine = "def max(xs):\n    best = xs[0]\n    for x in xs:\n        best = x if x > best else best\n    return best\n";
    assert!(score(&s, mine).await.solved);
}

#[tokio::test]
async fn a_task_may_declare_more_of_the_program_s_names() {
    let code = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert Point(2, 2).norm1() == 4\n";
    let program = "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n    def norm1(self):\n        return abs(self.x) + abs(self.y)\ndef norm1(x, y):\n    return Point(x, y).norm1()\n";
    let declared = spec(
        json!({"version": 1, "components": [{"type": "check_function",
        "entry_point": "norm1", "candidate_names": ["Point"], "code": code}]}),
    );
    let o = score(&declared, program).await;
    assert!(o.solved, "{:?}", o.components[0].detail);
    // Undeclared, the program's class is not the tests' to see.
    let undeclared = spec(
        json!({"version": 1, "components": [{"type": "check_function",
        "entry_point": "norm1", "code": code}]}),
    );
    let o = score(&undeclared, program).await;
    assert!(!o.solved, "{:?}", o.components[0].detail);
    assert!(o.components[0].detail.to_string().contains("NameError"));
}

#[tokio::test]
async fn control_flow_exceptions_reach_the_tests_as_errors() {
    // A StopIteration from the candidate ended `map` early: `all([])` is true.
    for raised in [
        "StopIteration",
        "StopAsyncIteration",
        "GeneratorExit",
        "SystemExit(0)",
        "KeyboardInterrupt",
    ] {
        let program = format!("def is_even(x):\n    raise {raised}\n");
        let check = spec(
            json!({"version": 1, "components": [{"type": "check_function",
            "entry_point": "is_even",
            "code": "def check(candidate):\n    assert all(map(candidate, [2, 4, 6]))\n    assert not any(map(candidate, [1, 3]))\n"}]}),
        );
        let o = score(&check, &program).await;
        assert_eq!(o.reward, 0.0, "{raised}: {:?}", o.components[0].detail);
        let asserts = spec(json!({"version": 1, "components": [{"type": "asserts",
            "asserts": ["assert all(map(is_even, [2, 4, 6]))",
                        "assert list(zip(map(is_even, [2]), [True])) == [(True, True)]"]}]}));
        let o = score(&asserts, &program).await;
        assert_eq!(o.reward, 0.0, "{raised}: {:?}", o.components[0].detail);
    }
    // Ordinary exception types still arrive as themselves.
    let s = spec(
        json!({"version": 1, "components": [{"type": "check_function",
        "entry_point": "parse",
        "code": "def check(candidate):\n    try:\n        candidate('x')\n    except ValueError:\n        pass\n    else:\n        assert False\n    assert candidate('4') == 4\n"}]}),
    );
    let o = score(&s, "def parse(s):\n    return int(s)\n").await;
    assert!(o.solved, "{:?}", o.components[0].detail);
}

#[tokio::test]
async fn asserts_in_the_tests_helpers_count() {
    let s = spec(
        json!({"version": 1, "components": [{"type": "check_function",
        "entry_point": "square",
        "code": "def _case(f, x, want):\n    assert f(x) == want\n\ndef _cases(f):\n    _case(f, 5, 25)\n\ndef check(candidate):\n    assert candidate(0) == 0\n    _case(candidate, 2, 4)\n    _cases(candidate)\n    for x in [3, 4]:\n        _case(candidate, x, x * x)\n"}]}),
    );
    let o = score(&s, "def square(x):\n    return x * x\n").await;
    assert!(o.solved, "{:?}", o.components[0].detail);
    assert_eq!(o.components[0].detail["total"], json!(4));
    let o = score(&s, "def square(x):\n    return 0\n").await;
    assert!(
        !o.solved && o.reward <= 0.25,
        "{:?}",
        o.components[0].detail
    );
    // A check whose only statements call helpers, and a failing statement that is no assert.
    let s = spec(
        json!({"version": 1, "components": [{"type": "check_function",
        "entry_point": "square",
        "code": "def _case(f, x, want):\n    if f(x) != want:\n        raise ValueError('wrong')\n\ndef check(candidate):\n    _case(candidate, 2, 4)\n    assert True\n"}]}),
    );
    let o = score(&s, "def square(x):\n    return 0\n").await;
    assert_eq!(o.reward, 0.0, "{:?}", o.components[0].detail);
    let o = score(&s, "def square(x):\n    return x * x\n").await;
    assert!(o.solved, "{:?}", o.components[0].detail);
}
