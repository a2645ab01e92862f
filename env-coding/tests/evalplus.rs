//! HumanEval+ / MBPP+ (issue 14) on fixtures written here: expected outputs computed once from the
//! canonical solution in the sandbox, candidates compared on the host with EvalPlus's rules
//! (exact, `atol` for floats, special oracles), base and plus inputs reported apart, hostile
//! candidates failing, a failing reference an error and never a reward.

mod support;

use codegym_sandbox::{Limits, SandboxError};
use env_coding::differential::{DiffSpec, TestSet, reference_runs};
use env_coding::reward::Component;
use env_coding::reward::run::{EvalOptions, Program};
use env_coding::tasks::{Task, TaskFormat, TaskSet};
use serde_json::{Value, json};

fn load(lines: &[&str]) -> TaskSet {
    let lines: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    support::load("set.jsonl", &lines)
}

/// HumanEval+-style records. The integer inputs of `add`'s plus set exceed 64 bits: they are
/// written as raw text, as EvalPlus's files hold them.
const ADD: &str = r#"{"task_id": "HumanEval/53", "prompt": "def add(x: int, y: int):\n    \"\"\"Add two numbers.\"\"\"\n", "entry_point": "add", "canonical_solution": "    return x + y\n", "base_input": [[0, 1], [5, 7]], "plus_input": [[123456789012345678901234567890, 1], [-5, 5]], "atol": 0, "contract": "\n    assert isinstance(x, int)\n"}"#;
const TRUNCATE: &str = r#"{"task_id": "HumanEval/2", "prompt": "def truncate_number(number: float) -> float:\n    \"\"\"The decimal part.\"\"\"\n", "entry_point": "truncate_number", "canonical_solution": "    return number % 1.0\n", "base_input": [[3.5], [1.25]], "plus_input": [[123.456], [0.1]], "atol": 0}"#;
const FIND_ZERO: &str = r#"{"task_id": "HumanEval/32", "prompt": "def find_zero(xs: list):\n    \"\"\"A root of the polynomial.\"\"\"\n", "entry_point": "find_zero", "canonical_solution": "    lo, hi = -100.0, 100.0\n    f = lambda x: sum(c * x ** i for i, c in enumerate(xs))\n    for _ in range(200):\n        mid = (lo + hi) / 2\n        if (f(lo) > 0) == (f(mid) > 0):\n            lo = mid\n        else:\n            hi = mid\n    return lo\n", "base_input": [[[-6.0, 11.0, -6.0, 1.0]]], "plus_input": [], "atol": 1e-6}"#;
/// An MBPP+-style record: tuple inputs (`args_to_tuples`), a set-valued output (`set_eq`).
const SIMILAR: &str = r#"{"task_id": "Mbpp/2", "prompt": "\"\"\"\nWrite a function to find the shared elements from the given two lists.\nassert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))\n\"\"\"\n", "entry_point": "similar_elements", "canonical_solution": "\ndef similar_elements(test_tup1, test_tup2):\n  assert isinstance(test_tup1, tuple)\n  return tuple(set(test_tup1) & set(test_tup2))\n", "base_input": [[[3, 4, 5, 6], [5, 7, 4, 10]]], "plus_input": [[[1, 2, 3], [3, 2]]], "atol": 0, "assertion": "\nassert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))\n"}"#;

async fn score(task: &Task, completion: &str) -> Result<(f64, Value), SandboxError> {
    let program = Program::new(task.program_from_completion(completion));
    let out = support::scored(task, &program).await?;
    Ok((
        out.reward,
        out.breakdown()["components"][0]["detail"].clone(),
    ))
}

fn diff(task: &Task) -> &DiffSpec {
    match &task.reward.components[0] {
        Component::Differential(d) => d,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn humaneval_plus_loads_and_the_canonical_solution_passes_base_and_plus() {
    let set = load(&[ADD, TRUNCATE, FIND_ZERO]);
    assert_eq!(set.format(), TaskFormat::EvalPlus);
    let add = set.get("HumanEval/53").expect("task");
    assert_eq!(add.completion_prefix.as_deref(), Some(add.prompt.as_str()));
    assert_eq!(add.metadata["source"], "humaneval_plus");
    assert_eq!(diff(add).tests, TestSet::Plus);
    for task in set.iter() {
        let program = Program::new(task.reference_solution.clone().expect("reference"));
        let out = support::scored(task, &program).await.expect("scored");
        let d = &out.breakdown()["components"][0]["detail"];
        assert_eq!(out.reward, 1.0, "{}: {d}", task.id);
        assert_eq!(d["tests"], "plus");
        assert_eq!(d["base"]["passed"], d["base"]["total"], "{d}");
    }
    let d = score(add, "    return x + y\n").await.expect("scored").1;
    assert_eq!(
        (d["base"]["total"].as_u64(), d["plus"]["total"].as_u64()),
        (Some(2), Some(2))
    );
}

#[tokio::test]
async fn a_solution_passing_base_only_fails_plus_and_base_mode_counts_it() {
    let set = load(&[ADD]);
    let task = set.get("HumanEval/53").expect("task");
    // Right on small numbers only (the big plus input goes through a float).
    let weak = "    return int(float(x) + float(y))\n";
    let (reward, d) = score(task, weak).await.expect("scored");
    assert_eq!(reward, 0.0, "{d}");
    assert_eq!(d["base"]["passed"], 2, "{d}");
    assert_eq!(d["plus"]["passed"], 1, "{d}");
    assert_eq!(d["plus"]["failures"][0][0], 0, "{d}");
    // The same task counting base inputs only.
    let mut base_only = task.as_ref().clone();
    if let Component::Differential(d) = &mut base_only.reward.components[0] {
        d.tests = TestSet::Base;
    }
    let (reward, d) = score(&base_only, weak).await.expect("scored");
    assert_eq!(reward, 1.0, "{d}");
    assert!(d["plus"].is_null(), "{d}");
    // Partial credit: 3 of 4 inputs.
    let mut partial = task.as_ref().clone();
    if let Component::Differential(d) = &mut partial.reward.components[0] {
        d.partial = true;
    }
    assert_eq!(score(&partial, weak).await.expect("scored").0, 0.75);
}

#[tokio::test]
async fn floats_compare_with_atol_and_oracles_accept_any_right_answer() {
    let set = load(&[TRUNCATE, FIND_ZERO, SIMILAR]);
    let truncate = set.get("HumanEval/2").expect("task");
    // `x - int(x)` differs from `x % 1.0` in the last bits (123.456): within 1e-6.
    assert_eq!(
        score(truncate, "    return number - int(number)\n")
            .await
            .unwrap()
            .0,
        1.0
    );
    let (reward, d) = score(truncate, "    return round(number % 1.0, 1)\n")
        .await
        .unwrap();
    assert_eq!(reward, 0.0, "{d}");
    // An int where a float is expected is a different type.
    assert_eq!(
        score(truncate, "    return int(number % 1.0 * 0)\n")
            .await
            .unwrap()
            .0,
        0.0
    );
    // find_zero: the reference finds 1.0 (or another root); a candidate returning 3.0 passes.
    let find_zero = set.get("HumanEval/32").expect("task");
    assert_eq!(score(find_zero, "    return 3.0\n").await.unwrap().0, 1.0);
    assert_eq!(score(find_zero, "    return 2.5\n").await.unwrap().0, 0.0);
    // MBPP+: tuples restored for the reference (it asserts them), any order of the shared items.
    let similar = set.get("Mbpp/2").expect("task");
    assert_eq!(set.format(), TaskFormat::EvalPlus);
    assert_eq!(similar.metadata["source"], "mbpp_plus");
    let sorted_desc =
        "def similar_elements(a, b):\n    return sorted(set(a) & set(b), reverse=True)\n";
    let (reward, d) = score(similar, sorted_desc).await.unwrap();
    assert_eq!(reward, 1.0, "{d}");
    let wrong = "def similar_elements(a, b):\n    return list(a)\n";
    assert_eq!(score(similar, wrong).await.unwrap().0, 0.0);
}

#[tokio::test]
async fn hostile_candidates_do_not_pass() {
    let set = load(&[ADD]);
    let task = set.get("HumanEval/53").expect("task");
    let hostile = [
        // An object equal to everything.
        "    class Any:\n        def __eq__(self, o): return True\n        def __ne__(self, o): return False\n    return Any()\n",
        // An int subclass equal to everything.
        "    class I(int):\n        def __eq__(self, o): return True\n    return I(0)\n",
        // Exits before any output, cleanly or abruptly.
        "    import sys; sys.exit(0)\n",
        "    import os; os._exit(0)\n",
        // Exits at import time.
        "    pass\nimport sys\nsys.exit(0)\n",
        // Prints fake records, to stdout and to every descriptor it can find.
        "    import os, sys\n    line = b'0' * 32 + b' {\"v\": 1, \"outputs\": [], \"times\": []}\\n'\n    print(line.decode()); sys.stdout.flush()\n    for fd in range(3, 20):\n        try: os.write(fd, line)\n        except OSError: pass\n    return None\n",
        // Loops forever on the big input only (the rest pass): a time limit, not a pass.
        "    while x > 10**6: pass\n    return x + y\n",
    ];
    for code in hostile {
        let (reward, d) = score(task, code).await.expect("an outcome, not an error");
        assert_eq!(reward, 0.0, "passed: {code}\n{d}");
    }
}

#[tokio::test]
async fn a_task_lowers_the_per_input_time_limit_but_never_raises_it() {
    let set = load(&[ADD]);
    let add = set.get("HumanEval/53").expect("task");
    // Sleeps `s` seconds on the plus input (-5, 5) only.
    let sleeps =
        |s: f64| format!("    import time\n    if x == -5: time.sleep({s})\n    return x + y\n");
    let with_limit = |ms: u64| {
        let mut task = add.as_ref().clone();
        if let Component::Differential(d) = &mut task.reward.components[0] {
            d.time_limit_ms = ms;
        }
        task
    };
    let score_under = |task: Task, completion: String, cpu_ms: u64| async move {
        let program = Program::new(task.program_from_completion(&completion));
        let opts = EvalOptions {
            limits: Some(Limits {
                cpu_ms,
                ..Limits::default()
            }),
            ..EvalOptions::default()
        };
        let out = support::scored_with(&task, &program, opts)
            .await
            .expect("scored");
        let d = out.breakdown()["components"][0]["detail"].clone();
        (out.reward, d)
    };
    // Ten minutes asked, one second allowed by the server: a 2 s input times out.
    let (reward, d) = score_under(with_limit(600_000), sleeps(2.0), 1_000).await;
    assert_eq!(reward, 0.0, "{d}");
    assert_eq!(d["plus"]["failures"][0][1], "time limit exceeded", "{d}");
    // Within the server's second, the same task passes a 0.2 s input...
    let (reward, d) = score_under(with_limit(600_000), sleeps(0.2), 1_000).await;
    assert_eq!(reward, 1.0, "{d}");
    // ...and a task asking for less than the server's gets less.
    let (reward, d) = score_under(with_limit(100), sleeps(0.4), 5_000).await;
    assert_eq!(reward, 0.0, "{d}");
}

/// `task` with its differential component's least time per input set to `ms`.
fn with_time_limit(task: &Task, ms: u64) -> Task {
    let mut task = task.clone();
    if let Component::Differential(d) = &mut task.reward.components[0] {
        d.time_limit_ms = ms;
    }
    task
}

#[tokio::test]
async fn a_candidate_cannot_switch_off_or_outlast_its_per_input_limit() {
    let set = load(&[ADD]);
    // 300 ms per input; each program below spends 1 s on the plus input (-5, 5) and returns the
    // right sum, so only a per-input limit the program cannot touch fails it.
    let task = with_time_limit(set.get("HumanEval/53").expect("task"), 300);
    let slow = [
        // Switches its timer off, then sleeps.
        "    import signal, time\n    signal.setitimer(signal.ITIMER_REAL, 0)\n    if x == -5: time.sleep(1.0)\n    return x + y\n",
        // Ignores SIGALRM from load time on, then busy-loops.
        "    import time\n    t = time.perf_counter()\n    while x == -5 and time.perf_counter() - t < 1.0: pass\n    return x + y\nimport signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n",
        // Catches the alarm and carries on.
        "    import signal, time\n    signal.signal(signal.SIGALRM, lambda *a: None)\n    if x == -5: time.sleep(1.0)\n    return x + y\n",
        // Makes the clocks stand still, then sleeps.
        "    import time\n    if x == -5:\n        frozen = time.perf_counter()\n        time.perf_counter = time.monotonic = lambda: frozen\n        signal = __import__('signal'); signal.setitimer(signal.ITIMER_REAL, 0)\n        time.sleep(1.0)\n    return x + y\n",
    ];
    // On both backends: a fresh interpreter's runner makes itself non-dumpable on its own.
    for (code, sandbox) in slow
        .iter()
        .flat_map(|c| [(c, support::sandbox()), (c, support::fresh_sandbox())])
    {
        let program = Program::new(task.program_from_completion(code));
        let out = support::scored_on(sandbox, &task, &program, EvalOptions::default())
            .await
            .expect("scored");
        let (reward, d) = (out.reward, &out.breakdown()["components"][0]["detail"]);
        assert_eq!(reward, 0.0, "passed: {code}\n{d}");
        assert_eq!(d["base"]["passed"], 2, "{code}\n{d}");
        assert_eq!(d["plus"]["passed"], 1, "{code}\n{d}");
        assert_eq!(
            d["plus"]["failures"],
            json!([[1, "time limit exceeded"]]),
            "{code}\n{d}"
        );
    }
    // The same task passes a program within its limits.
    assert_eq!(score(&task, "    return x + y\n").await.unwrap().0, 1.0);
}

#[tokio::test]
async fn a_program_cannot_change_the_times_recorded_for_it() {
    // A reference (which runs through the same runner) that patches the clocks and rewrites, from
    // its caller's frame, every time recorded so far to 100 s: were its times its own to set, the
    // candidates' limits (4 x the reference's time) would be the server's whole CPU limit.
    let cheat = "    import sys, time\\n    time.perf_counter = time.monotonic = lambda: 1e9 * (x == -5)\\n    f = sys._getframe(1)\\n    while f is not None:\\n        t = f.f_locals.get('times')\\n        if type(t) is list: t[:] = [100.0] * len(t)\\n        f = f.f_back\\n    return x + y\\n";
    let line = ADD.replace("    return x + y\\n", cheat);
    let set = load(&[&line]);
    let task = with_time_limit(set.get("HumanEval/53").expect("task"), 300);
    // Sleeps 1 s on the big plus input, the one before the reference's rewrite.
    let slow = "    import time\n    if x > 10**6: time.sleep(1.0)\n    return x + y\n";
    let (reward, d) = score(&task, slow).await.expect("scored");
    assert_eq!(reward, 0.0, "{d}");
    assert_eq!(
        d["plus"]["failures"],
        json!([[0, "time limit exceeded"], [1, "not run"]]),
        "{d}"
    );
    assert_eq!(score(&task, "    return x + y\n").await.unwrap().0, 1.0);
}

#[tokio::test]
async fn an_input_gets_four_times_the_references_measured_time() {
    // The reference takes 0.3 s on the plus input (-5, 5): 1.2 s for the candidates there, over a
    // least time of 0.1 s.
    let line = ADD.replace(
        "    return x + y\\n",
        "    import time\\n    if x == -5: time.sleep(0.3)\\n    return x + y\\n",
    );
    let set = load(&[&line]);
    let task = with_time_limit(set.get("HumanEval/53").expect("task"), 100);
    let sleeps =
        |s: f64| format!("    import time\n    if x == -5: time.sleep({s})\n    return x + y\n");
    let (reward, d) = score(&task, &sleeps(0.7)).await.expect("scored");
    assert_eq!(reward, 1.0, "{d}");
    let (reward, d) = score(&task, &sleeps(1.8)).await.expect("scored");
    assert_eq!(reward, 0.0, "{d}");
    assert_eq!(
        d["plus"]["failures"],
        json!([[1, "time limit exceeded"]]),
        "{d}"
    );
    // An input the reference is quick on keeps the least time.
    let base_slow = "    import time\n    if x == 5: time.sleep(0.4)\n    return x + y\n";
    let (reward, d) = score(&task, base_slow).await.expect("scored");
    assert_eq!(
        d["base"]["failures"],
        json!([[1, "time limit exceeded"]]),
        "{d}"
    );
    assert_eq!(reward, 0.0, "{d}");
}

#[tokio::test]
async fn the_reference_runs_once_for_a_batch_and_a_failing_one_is_an_error() {
    // A task of its own (its key is unique to this test).
    let line = ADD.replace("return x + y", "return y + x");
    let set = load(&[&line]);
    let task = set.get("HumanEval/53").expect("task");
    let spec = diff(task);
    assert_eq!(reference_runs(spec), 0);
    let batch = (0..8).map(|i| {
        let completion = if i % 2 == 0 {
            "    return x + y\n"
        } else {
            "    return x - y\n"
        };
        score(task, completion)
    });
    let rewards: Vec<f64> = futures::future::join_all(batch)
        .await
        .into_iter()
        .map(|r| r.expect("scored").0)
        .collect();
    assert_eq!(rewards, [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]);
    // One computation per input set (base, plus), however many candidates.
    assert_eq!(reference_runs(spec), 2);

    // A canonical solution that raises on a plus input: an error naming the cause, every time.
    let broken = ADD.replace("return x + y", "assert x < 10**6\\n    return x + y");
    let set = load(&[&broken]);
    let task = set.get("HumanEval/53").expect("task");
    for _ in 0..2 {
        match score(task, "    return x + y\n").await {
            Err(SandboxError::Reference(why)) => assert!(why.contains("AssertionError"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(reference_runs(diff(task)), 3, "failures are not cached");
}

#[test]
fn malformed_records_name_file_and_line() {
    let cases = [
        (
            ADD.replace("\"entry_point\": \"add\"", "\"entry_point\": \"a b\""),
            "not an identifier",
        ),
        (
            ADD.replace("\"base_input\": [[0, 1], [5, 7]]", "\"base_input\": [1, 2]"),
            "not an argument list",
        ),
        (ADD.replace("\"atol\": 0", "\"atol\": -1"), "atol"),
        (
            ADD.replace("\"canonical_solution\": \"    return x + y\\n\", ", ""),
            "invalid EvalPlus record",
        ),
        (format!("{ADD}\n{{oops"), "invalid EvalPlus record"),
    ];
    for (text, want) in cases {
        let (_dir, path) = support::write("bad.jsonl", &format!("{ADD}\n{text}"));
        let e = TaskSet::load(&path).expect_err(want).to_string();
        assert!(
            e.contains("bad.jsonl:2") || e.contains("bad.jsonl:3"),
            "{e}"
        );
        assert!(e.contains(want), "{want}: {e}");
    }
}

#[tokio::test]
async fn huge_inputs_load_and_run() {
    // 2,000 plus inputs, one of them a 50,000-digit integer.
    let small: Vec<String> = (0..2001).map(|i| json!([i, i]).to_string()).collect();
    let plus = format!("[[{}, 1], {}]", "9".repeat(50_000), small.join(", "));
    let text = ADD.replace("[[123456789012345678901234567890, 1], [-5, 5]]", &plus);
    let set = load(&[&text]);
    let task = set.get("HumanEval/53").expect("task");
    let (reward, d) = score(task, "    return x + y\n").await.expect("scored");
    assert_eq!(reward, 1.0, "{d}");
    assert_eq!(d["plus"]["total"], 2002);
}
