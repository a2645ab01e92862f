//! Every reward kind scored on real Python runs, including programs that try to fake a pass.

use std::sync::OnceLock;

use codegym_sandbox::{Limits, Sandbox, SandboxConfig};
use env_coding::reward::run::{EvalOptions, Program, run_and_score, score_program};
use env_coding::reward::{RewardOutcome, RewardSpec};
use serde_json::json;

fn sandbox() -> &'static Sandbox {
    static SB: OnceLock<Sandbox> = OnceLock::new();
    SB.get_or_init(|| match Sandbox::new(SandboxConfig::default()) {
        Ok(sb) => sb,
        Err(e) => panic!("sandbox setup failed: {e}"),
    })
}

fn spec(v: serde_json::Value) -> RewardSpec {
    match RewardSpec::from_json(v) {
        Ok(s) => s,
        Err(e) => panic!("bad spec: {e}"),
    }
}

fn opts() -> EvalOptions {
    // Generous limits: the tests run in parallel on two loaded cores.
    EvalOptions {
        limits: Some(Limits {
            cpu_ms: 5_000,
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

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn sum_of_squares() -> RewardSpec {
    spec(json!({"version": 1, "components": [
        {"type": "exit_code"}, {"type": "contains", "text": "Result: 338350"}]}))
}

#[tokio::test]
async fn substring_with_exit_code() {
    let s = sum_of_squares();
    let o = score(&s, "print(f'Result: {sum(i*i for i in range(1, 101))}')").await;
    assert!(o.solved && close(o.reward, 1.0), "{o:?}");
    let o = score(&s, "print('Result: 338351')").await;
    assert!(!o.solved && close(o.reward, 0.5), "{o:?}");
    // Printing the text and then failing is only half a solution.
    let o = score(&s, "print('Result: 338350'); raise SystemExit(2)").await;
    assert!(!o.solved && close(o.reward, 0.5), "{o:?}");
    assert_eq!(o.components[0].detail["actual"], json!(2));
}

#[tokio::test]
async fn stdout_regex_and_numeric() {
    let exact = spec(json!({"version": 1, "components": [{"type": "stdout", "expected": "a\nb"}]}));
    assert!(
        score(&exact, "print('a  ')\nprint('b')\nprint()")
            .await
            .solved
    );
    assert!(!score(&exact, "print('a b')").await.solved);
    let norm = spec(json!({"version": 1, "components": [
        {"type": "stdout", "expected": "HELLO world", "match": "case_insensitive"}]}));
    assert!(score(&norm, "print('hello\\n   World')").await.solved);
    let re =
        spec(json!({"version": 1, "components": [{"type": "regex", "pattern": "^id-[0-9]{4}$"}]}));
    assert!(score(&re, "print('id-1234', end='')").await.solved);
    assert!(!score(&re, "print('id-12345', end='')").await.solved);
    let num = spec(json!({"version": 1, "components": [
        {"type": "numeric", "expected": 2.0, "abs_tol": 0.001, "rel_tol": 0.0}]}));
    let o = score(&num, "print('approx', 2 ** 0.5 * 2 ** 0.5)").await;
    assert!(o.solved, "{o:?}");
    assert!(!score(&num, "print(2.1)").await.solved);
    assert!(!score(&num, "print('no number')").await.solved);
}

#[tokio::test]
async fn io_cases_give_partial_credit() {
    let s = spec(
        json!({"version": 1, "components": [{"type": "io_cases", "cases": [
        {"stdin": "2 3\n", "stdout": "5"}, {"stdin": "10 -4", "stdout": "6"},
        {"stdin": "1 1", "stdout": "2"}, {"stdin": "0 0", "stdout": "0"}]}]}),
    );
    let o = score(&s, "a, b = map(int, input().split())\nprint(a + b)").await;
    assert!(o.solved, "{o:?}");
    let o = score(
        &s,
        "a, b = map(int, input().split())\nprint(a + b if a < 5 else 0)",
    )
    .await;
    assert!(close(o.base, 0.75), "{o:?}");
    assert_eq!(
        o.components[0].detail["passed"],
        json!([true, false, true, true])
    );
}

fn check_spec() -> RewardSpec {
    spec(
        json!({"version": 1, "components": [{"type": "check_function", "entry_point": "add",
        "code": "import math\n\ndef check(candidate):\n    assert candidate(1, 2) == 3\n    assert True, 'not a test'\n    for i in range(3):\n        assert candidate(i, i) == 2 * i\n    assert math.isclose(candidate(0.1, 0.2), 0.3)\n    assert candidate(-1, 1) == 0\n"}]}),
    )
}

fn asserts_spec() -> RewardSpec {
    spec(
        json!({"version": 1, "components": [{"type": "asserts", "setup": "OFFSET = 0",
        "asserts": ["assert add(1, 2) == 3 + OFFSET", "assert add(2, 2) == 4", "assert add('a', 'b') == 'ab'"]}]}),
    )
}

#[tokio::test]
async fn unit_tests_report_each_test() {
    let o = score(&check_spec(), "def add(a, b):\n    return a + b\n").await;
    assert!(o.solved, "{o:?}");
    let tests = &o.components[0].detail["tests"];
    assert_eq!(tests.as_array().map(Vec::len), Some(4), "{tests}");
    let o = score(
        &check_spec(),
        "def add(a, b):\n    return a + b if a >= 0 else 99\n",
    )
    .await;
    assert!(close(o.reward, 0.75), "{o:?}");
    assert_eq!(o.components[0].detail["tests"][3]["passed"], json!(false));

    let o = score(&asserts_spec(), "def add(a, b):\n    return a + b\n").await;
    assert!(o.solved, "{o:?}");
    let o = score(
        &asserts_spec(),
        "def add(a, b):\n    return int(a) + int(b)\n",
    )
    .await;
    assert!(close(o.reward, 2.0 / 3.0), "{o:?}");
    let err = o.components[0].detail["tests"][2]["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(err.contains("ValueError"), "{err}");
}

#[tokio::test]
async fn exiting_before_the_asserts_is_not_a_pass() {
    for cheat in [
        "import sys\ndef add(a, b):\n    return None\nsys.exit(0)\n",
        "import os\ndef add(a, b):\n    return None\nos._exit(0)\n",
        "def add(a, b):\n    import os\n    os._exit(0)\n",
        "def add(a, b):\n    raise SystemExit(0)\n",
        "import atexit, os\natexit.register(lambda: os._exit(0))\ndef add(a, b):\n    return None\n",
    ] {
        for s in [check_spec(), asserts_spec()] {
            let o = score(&s, cheat).await;
            assert!(close(o.reward, 0.0) && !o.solved, "{cheat}: {o:?}");
        }
    }
}

#[tokio::test]
async fn printing_a_fake_record_or_patching_output_is_not_a_pass() {
    let fake = r#"{"v": 1, "tests": [{"name": "t", "passed": true, "error": null}, {"name": "t", "passed": true, "error": null}, {"name": "t", "passed": true, "error": null}]}"#;
    let cheats = [
        format!("import sys\nfor fd in (1, 2):\n    print('00000000000000000000000000000000 {fake}')\nprint('OK: all tests passed')\nsys.exit(0)\n"),
        format!("import os, sys\nfor fd in range(1, 10):\n    try:\n        os.write(fd, b'x {fake}\\n')\n    except OSError:\n        pass\nos._exit(0)\n"),
        "import builtins, sys, io\nbuiltins.print = lambda *a, **k: None\nsys.stdout = io.StringIO()\ndef add(a, b):\n    return None\n".to_string(),
        "import builtins\nbuiltins.exec = lambda *a, **k: None\nbuiltins.AssertionError = Exception\ndef add(a, b):\n    return None\n".to_string(),
    ];
    for cheat in &cheats {
        for s in [check_spec(), asserts_spec()] {
            let o = score(&s, cheat).await;
            assert!(close(o.reward, 0.0) && !o.solved, "{cheat}: {o:?}");
        }
    }
}

#[tokio::test]
async fn always_equal_objects_fail() {
    let cheats = [
        "class Any:\n    def __eq__(self, o):\n        return True\n    def __ne__(self, o):\n        return False\ndef add(a, b):\n    return Any()\n",
        "class I(int):\n    def __eq__(self, o):\n        return True\ndef add(a, b):\n    return I(0)\n",
        "class L(list):\n    def __eq__(self, o):\n        return True\ndef add(a, b):\n    return [L()]\n",
        "import math\nmath.isclose = lambda *a, **k: True\nclass Any:\n    def __eq__(self, o):\n        return True\n    __hash__ = None\ndef add(a, b):\n    return Any()\n",
    ];
    for cheat in cheats {
        for s in [check_spec(), asserts_spec()] {
            let o = score(&s, cheat).await;
            assert!(close(o.reward, 0.0), "{cheat}: {o:?}");
        }
    }
}

/// A CPU limit a busy loop reaches quickly (the wall clock stays a distant backstop).
fn quick(per_test_timeout_ms: u64) -> EvalOptions {
    EvalOptions {
        limits: Some(Limits {
            cpu_ms: 500,
            wall_ms: 30_000,
            ..Limits::default()
        }),
        per_test_timeout_ms,
        ..EvalOptions::default()
    }
}

#[tokio::test]
async fn penalties_for_timeouts_and_syntax_errors() {
    let s = spec(json!({"version": 1, "components": [{"type": "exit_code"}],
        "penalties": {"timeout": 0.25, "syntax_error": 0.5}}));
    let o = match score_program(
        sandbox(),
        &s,
        &Program::new("while True: pass"),
        None,
        quick(0),
    )
    .await
    {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    };
    assert!(close(o.reward, -0.25), "{o:?}");
    assert_eq!(o.penalties.get("timeout"), Some(&json!(0.25)));
    let o = score(&s, "def f(:\n  pass").await;
    assert!(close(o.reward, -0.5), "{o:?}");
    let o = score(&s, "raise ValueError('not a syntax error')").await;
    assert!(close(o.reward, 0.0) && o.penalties.is_empty(), "{o:?}");
    let tests = spec(
        json!({"version": 1, "components": [{"type": "asserts", "asserts": ["assert f() == 1"]}],
        "penalties": {"syntax_error": 0.5}}),
    );
    let o = score(&tests, "def f(:\n  return 1").await;
    assert!(close(o.reward, -0.5), "{o:?}");
}

/// A surface with no observation (`codegym evaluate`, `tasks check`, session mode) runs the
/// program plainly only when the score reads that run: a penalty does, so its reward is the same
/// as the observed step's, which always runs it.
#[tokio::test]
async fn without_an_observation_the_penalties_still_see_the_plain_run() {
    let s = spec(json!({"version": 1,
        "components": [{"type": "asserts", "asserts": ["assert f() == 1"]}],
        "penalties": {"timeout": 0.25}}));
    assert!(s.needs_plain_run());
    let opts = quick(10_000);
    // The tests import the program as a module: they pass; run as a script it never ends.
    let program =
        Program::new("def f():\n    return 1\nif __name__ == '__main__':\n    while True: pass\n");
    let observed = match run_and_score(sandbox(), &s, &program, opts).await {
        Ok((plain, o)) => {
            assert!(plain.timed_out, "{plain:?}");
            o
        }
        Err(e) => panic!("{e}"),
    };
    let unobserved = match score_program(sandbox(), &s, &program, None, opts).await {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    };
    assert!(close(observed.reward, 0.75), "{observed:?}");
    assert_eq!(unobserved.breakdown(), observed.breakdown());
}

#[tokio::test]
async fn a_slow_test_fails_alone() {
    let s = spec(json!({"version": 1, "components": [{"type": "asserts",
        "asserts": ["assert slow(1) == 1", "assert slow(0) == 0"]}]}));
    let opts = EvalOptions {
        limits: opts().limits,
        per_test_timeout_ms: 300,
        ..EvalOptions::default()
    };
    let src = "def slow(n):\n    while n:\n        pass\n    return n\n";
    let o = match score_program(sandbox(), &s, &Program::new(src), None, opts).await {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    };
    assert!(close(o.reward, 0.5), "{o:?}");
}

#[tokio::test]
async fn weighted_composition() {
    let s = spec(json!({"version": 1, "components": [
        {"type": "exit_code", "weight": 1},
        {"type": "stdout", "expected": "6", "weight": 2},
        {"type": "asserts", "asserts": ["assert triple(2) == 6", "assert triple(0) == 0"], "weight": 1}]}));
    let o = score(
        &s,
        "def triple(x):\n    return 3 * x if x else 1\nprint(triple(2))",
    )
    .await;
    // exit 1 * 1 + stdout 2 * 1 + tests 1 * 0.5 over weight 4.
    assert!(close(o.reward, 3.5 / 4.0), "{o:?}");
    assert!(!o.solved);
    let b = o.breakdown();
    assert_eq!(b["components"].as_array().map(Vec::len), Some(3));
    assert_eq!(b["components"][2]["type"], json!("asserts"));
}

#[tokio::test]
async fn the_candidate_cannot_read_the_tests() {
    // The tests are not on disk or stdin when the candidate runs.
    let s = spec(json!({"version": 1, "components": [{"type": "asserts",
        "asserts": ["assert secret() == 'expected-value-42'"]}]}));
    let src = "import os, sys\nseen = sys.stdin.read() + ''.join(open(f, errors='replace').read() for f in os.listdir('.') if os.path.isfile(f))\ndef secret():\n    return 'leak' if 'expected-value-42' in seen else 'nothing'\n";
    let o = score(&s, src).await;
    assert_eq!(
        o.components[0].detail["tests"][0]["error"],
        json!("AssertionError"),
        "{o:?}"
    );
}

/// Every module the trusted programs import (the unit-test harness, the differential runner) is
/// already in the warm fork server when a run starts: one imported per run would cost every
/// unit-test run its whole start-up (`select`, a shared library: ~1 ms of CPU a HumanEval task).
#[tokio::test]
async fn the_fork_server_has_imported_what_the_trusted_programs_import() {
    use codegym_sandbox::ExecRequest;
    use env_coding::differential::RUNNER_SOURCE;
    use env_coding::reward::harness::HARNESS_SOURCE;
    assert_eq!(
        sandbox().backend(),
        "warm fork",
        "the test is about the warm backend"
    );
    // The program reads sys.modules before it imports anything of its own.
    let program = "import sys\nloaded = set(sys.modules)\nimport ast\nwanted = set()\n\
        for n in ast.walk(ast.parse(sys.stdin.read())):\n\
        \x20   if isinstance(n, ast.Import):\n\
        \x20       wanted |= {a.name.partition('.')[0] for a in n.names}\n\
        \x20   elif isinstance(n, ast.ImportFrom) and not n.level:\n\
        \x20       wanted.add(n.module.partition('.')[0])\n\
        print('wanted', sorted(wanted))\nprint('missing', sorted(wanted - loaded))\n";
    let stdin = format!("{HARNESS_SOURCE}\n{RUNNER_SOURCE}");
    let run = sandbox()
        .run(ExecRequest {
            source: program.into(),
            stdin: Some(stdin.into_bytes()),
            ..ExecRequest::default()
        })
        .await
        .unwrap_or_else(|e| panic!("infrastructure error: {e}"));
    assert_eq!(run.exit_code, Some(0), "{run:?}");
    assert!(run.stdout.contains("'select'"), "{}", run.stdout);
    assert!(run.stdout.contains("missing []\n"), "{}", run.stdout);
}

/// A suite's tests are compiled by its first run and handed to the later ones (the harness's
/// `compiled` offer, kept by the host): every verdict is the same as a first run's, for passing,
/// failing, raising and missing programs, on both suite styles; a copy the harness cannot use
/// (another bytecode's magic number, a wrong shape) is compiled again, never run or trusted.
#[tokio::test]
async fn a_suite_compiled_once_scores_as_a_first_run() {
    use env_coding::reward::compiled;
    use env_coding::reward::harness::{TestSuite, prepare};
    // Unique per test run: the cache is process-wide, and the first run must be a cold one.
    let tag = format!("{:x}", std::process::id());
    let check = format!(
        "# {tag}\ndef helper(x, want):\n    assert x == want\n\ndef check(candidate):\n    \
         assert candidate(1, 2) == 3\n    helper(candidate(2, 2), 4)\n    total = candidate(0, 0)\n    \
         assert total == 0\n    assert candidate('a', 'b') == 'ab'\n"
    );
    let asserts = vec![
        "assert add(1, 2) == 3 + OFFSET".to_string(),
        "assert add(2, 2) ==".to_string(),
        format!("assert add('a', 'b') == 'ab'  # {tag}"),
    ];
    let cases = [
        (
            spec(
                json!({"version": 1, "components": [{"type": "check_function",
                "entry_point": "add", "code": check}]}),
            ),
            TestSuite::Check {
                code: &check,
                entry_point: "add",
                prelude: "",
                candidate_names: None,
            },
            1.0,
        ),
        (
            spec(
                json!({"version": 1, "components": [{"type": "asserts", "setup": "OFFSET = 0",
                "asserts": asserts}]}),
            ),
            TestSuite::Asserts {
                asserts: &asserts,
                setup: "OFFSET = 0",
                candidate_names: None,
            },
            2.0 / 3.0, // the second assert does not compile
        ),
    ];
    let programs = [
        "def add(a, b):\n    return a + b\n",
        "def add(a, b):\n    return int(a) + int(b)\n",
        "def add(a, b):\n    return 0\n",
        "def plus(a, b):\n    return a + b\n",
        "def add(a, b):\n    raise StopIteration\n",
    ];
    let handed = |suite: &TestSuite<'_>| {
        String::from_utf8_lossy(&prepare(suite, 10.0).stdin).contains("\"compiled\":")
    };
    for (spec, suite, correct) in &cases {
        assert!(!handed(suite), "the first run of a fresh suite is cold");
        let mut first = Vec::new();
        for p in programs {
            first.push(score(spec, p).await);
        }
        assert!(close(first[0].reward, *correct), "{:?}", first[0]);
        assert!(first[1..].iter().all(|o| o.reward < *correct), "{first:?}");
        let key = prepare(suite, 10.0).suite;
        let kept = compiled::get(&key).expect("the first run offered its compiled tests");
        assert!(handed(suite));
        for (p, want) in programs.iter().zip(&first) {
            assert_eq!(&score(spec, p).await, want, "{p}");
        }
        // Copies the harness cannot use: it compiles again, scores as before and offers anew.
        let magic = &kept[..8];
        for bad in [
            "00000000e907000000".to_string(),
            format!("{magic}e907000000"),
        ] {
            compiled::offer(key, &bad);
            for (p, want) in programs.iter().zip(&first) {
                assert_eq!(&score(spec, p).await, want, "{p} with {bad}");
            }
            assert_eq!(compiled::get(&key).as_deref(), Some(&*kept));
        }
    }
    // What runs is the copy handed over (so its key must cover the whole suite): another
    // suite's, kept under this one's key, runs that suite's tests.
    let other = format!("# {tag}\ndef check(candidate):\n    assert candidate(0, 0) == 0\n");
    let other_spec = spec(
        json!({"version": 1, "components": [{"type": "check_function",
        "entry_point": "add", "code": other}]}),
    );
    let tests = |o: &RewardOutcome| o.components[0].detail["tests"].as_array().map(Vec::len);
    let own = score(&other_spec, programs[0]).await;
    assert_eq!(tests(&own), Some(1), "{own:?}");
    let key = prepare(
        &TestSuite::Check {
            code: &other,
            entry_point: "add",
            prelude: "",
            candidate_names: None,
        },
        10.0,
    )
    .suite;
    let first_suite = compiled::get(&prepare(&cases[0].1, 10.0).suite);
    compiled::offer(key, first_suite.as_deref().unwrap_or_default());
    assert_eq!(tests(&score(&other_spec, programs[0]).await), Some(4));
}
