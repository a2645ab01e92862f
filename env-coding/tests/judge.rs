//! The stdin/stdout judge (issue 14) end to end: verdicts per test in C++ and Python, binary and
//! partial scoring, special judges in Python and C++ (testlib exit codes, a failing checker is a
//! machinery error), huge outputs, and the judge as a reward component.

use std::sync::OnceLock;

use codegym_sandbox::lang::Language;
use codegym_sandbox::{Limits, Sandbox, SandboxConfig};
use env_coding::judge::{Checker, JudgeError, JudgeReport, JudgeSpec, TestCase, Verdict, judge};
use env_coding::reward::RewardSpec;
use env_coding::reward::run::{EvalOptions, Program, score_program};
use env_coding::timeouts::RerunPolicy;
use serde_json::json;

fn sandbox() -> &'static Sandbox {
    static SB: OnceLock<Sandbox> = OnceLock::new();
    SB.get_or_init(|| match Sandbox::new(SandboxConfig::default()) {
        Ok(sb) => sb,
        Err(e) => panic!("sandbox setup failed: {e}"),
    })
}

fn base() -> Limits {
    Limits {
        memory_bytes: 512 << 20,
        ..Limits::default()
    }
}

fn sum_tests() -> Vec<TestCase> {
    [("1 2\n", "3\n"), ("20 22\n", "42\n"), ("-5 5\n", "0\n")]
        .iter()
        .map(|(i, o)| TestCase {
            input: i.to_string(),
            output: o.to_string(),
        })
        .collect()
}

fn spec(tests: Vec<TestCase>, checker: Checker, partial: bool) -> JudgeSpec {
    JudgeSpec {
        tests,
        checker,
        time_limit_ms: 2_000,
        memory_limit_mb: Some(256),
        partial,
        weight: 1.0,
        driver: None,
    }
}

async fn judged(language: Language, source: &str, spec: &JudgeSpec) -> JudgeReport {
    match judge(
        sandbox(),
        language,
        source,
        &[],
        spec,
        base(),
        RerunPolicy::default(),
    )
    .await
    {
        Ok(r) => r,
        Err(e) => panic!("machinery error: {e}"),
    }
}

fn verdicts(r: &JudgeReport) -> Vec<Option<Verdict>> {
    r.tests.iter().map(|t| t.verdict).collect()
}

const CPP_SUM: &str =
    "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<\"\\n\";}\n";
/// Wrong on negative numbers only (the third test).
const CPP_ABS_SUM: &str = "#include <iostream>\n#include <cstdlib>\nint main(){long a,b;std::cin>>a>>b;std::cout<<std::labs(a)+std::labs(b)<<\"\\n\";}\n";
const PY_SUM: &str = "a, b = map(int, input().split())\nprint(a + b)\n";

#[tokio::test]
async fn solved_and_failed_in_cpp_and_python() {
    for (l, src) in [(Language::Cpp, CPP_SUM), (Language::Python, PY_SUM)] {
        let r = judged(l, src, &spec(sum_tests(), Checker::Tokens, false)).await;
        assert_eq!(verdicts(&r), vec![Some(Verdict::AC); 3], "{l}: {r:?}");
        assert_eq!(r.score(false), 1.0);
        assert_eq!(r.compile.is_some(), l == Language::Cpp);
    }
    // Binary: the run stops at the first failure. Put the failing test first.
    let mut tests = sum_tests();
    tests.rotate_right(1);
    let r = judged(
        Language::Cpp,
        CPP_ABS_SUM,
        &spec(tests.clone(), Checker::Tokens, false),
    )
    .await;
    assert_eq!(verdicts(&r), vec![Some(Verdict::WA), None, None], "{r:?}");
    assert!(
        r.tests[0].message.contains("expected \"0\", found \"10\""),
        "{r:?}"
    );
    assert_eq!(r.score(false), 0.0);
    // Partial credit: every test runs.
    let r = judged(
        Language::Cpp,
        CPP_ABS_SUM,
        &spec(tests, Checker::Tokens, true),
    )
    .await;
    assert_eq!(
        verdicts(&r),
        vec![Some(Verdict::WA), Some(Verdict::AC), Some(Verdict::AC)]
    );
    assert!((r.score(true) - 2.0 / 3.0).abs() < 1e-12);
}

#[tokio::test]
async fn ce_tle_mle_re_verdicts() {
    let s = spec(sum_tests(), Checker::Tokens, true);
    let r = judged(Language::Cpp, "int main(){ return nope; }", &s).await;
    assert_eq!(verdicts(&r), vec![Some(Verdict::CE); 3]);
    assert!(
        r.detail()["compile_error"]
            .as_str()
            .is_some_and(|m| m.contains("nope"))
    );
    assert!(r.compile_failed());

    let mut tle = spec(sum_tests()[..1].to_vec(), Checker::Tokens, false);
    tle.time_limit_ms = 500;
    let r = judged(
        Language::Cpp,
        "int main(){volatile long x=0; for(;;) x++;}",
        &tle,
    )
    .await;
    assert_eq!(verdicts(&r), vec![Some(Verdict::TLE)], "{r:?}");
    assert!(r.timed_out);

    let r = judged(
        Language::Python,
        "x = bytearray(1 << 30)\nprint(len(x))",
        &spec(sum_tests()[..1].to_vec(), Checker::Tokens, false),
    )
    .await;
    assert_eq!(verdicts(&r), vec![Some(Verdict::MLE)], "{r:?}");

    let r = judged(
        Language::Python,
        "raise SystemExit(3)",
        &spec(sum_tests()[..1].to_vec(), Checker::Tokens, false),
    )
    .await;
    assert_eq!(verdicts(&r), vec![Some(Verdict::RE)]);
    assert!(r.tests[0].message.contains("exit code 3"), "{r:?}");
}

#[tokio::test]
async fn huge_outputs_are_judged_whole() {
    let n = 300_000;
    let expected: String = (0..n).map(|i| format!("{i}\n")).collect();
    let tests = vec![TestCase {
        input: format!("{n}\n"),
        output: expected,
    }];
    let src =
        "n = int(input())\nimport sys\nsys.stdout.write(''.join(f'{i}\\n' for i in range(n)))\n";
    let r = judged(
        Language::Python,
        src,
        &spec(tests.clone(), Checker::Exact, false),
    )
    .await;
    assert_eq!(verdicts(&r), vec![Some(Verdict::AC)], "{:?}", r.tests);
    let wrong = "n = int(input())\nprint('\\n'.join(str(i) for i in range(n + 1)))\n";
    let r = judged(
        Language::Python,
        wrong,
        &spec(tests, Checker::Tokens, false),
    )
    .await;
    assert_eq!(verdicts(&r), vec![Some(Verdict::WA)]);
    assert!(r.tests[0].message.contains("extra output"), "{r:?}");
}

/// A testlib-style checker in Python: reads the files by name, accepts sums within 1.
const PY_CHECKER: &str = "import sys\nout = open('output.txt').read().split()\nans = open('answer.txt').read().split()\nif not out:\n    print('empty output', file=sys.stderr); sys.exit(2)\nif abs(int(out[0]) - int(ans[0])) <= 1:\n    sys.exit(0)\nprint(f'got {out[0]}, want {ans[0]}', file=sys.stderr)\nsys.exit(1)\n";

/// The same checker in C++, reading testlib's argv order (input, output, answer).
const CPP_CHECKER: &str = "#include <fstream>\n#include <cstdio>\n#include <cstdlib>\nint main(int argc, char** argv){ if(argc<4) return 3; std::ifstream o(argv[2]), a(argv[3]); long x, y; if(!(o>>x)) { fprintf(stderr, \"empty output\"); return 2; } a>>y; if (std::labs(x-y)<=1) return 0; fprintf(stderr, \"got %ld, want %ld\", x, y); return 1; }\n";

#[tokio::test]
async fn special_judges_in_python_and_cpp() {
    let off_by_one = "a, b = map(int, input().split())\nprint(a + b + (1 if a == 1 else 5))\n";
    for (language, source) in [(Language::Python, PY_CHECKER), (Language::Cpp, CPP_CHECKER)] {
        let checker = Checker::Special {
            language,
            source: source.to_string(),
        };
        let s = spec(sum_tests(), checker.clone(), true);
        let r = judged(Language::Python, off_by_one, &s).await;
        assert_eq!(
            verdicts(&r),
            vec![Some(Verdict::AC), Some(Verdict::WA), Some(Verdict::WA)],
            "{language}: {r:?}"
        );
        assert_eq!(r.tests[1].message, "got 47, want 42");
        let r = judged(Language::Python, "print()", &s).await;
        assert_eq!(
            verdicts(&r),
            vec![Some(Verdict::PE); 3],
            "{language}: {r:?}"
        );
    }
    // A checker that fails (testlib's 3) or crashes is a machinery error, never a verdict.
    for bad in [
        "import sys; sys.exit(3)",
        "raise RuntimeError('checker bug')",
    ] {
        let s = spec(
            sum_tests(),
            Checker::Special {
                language: Language::Python,
                source: bad.into(),
            },
            false,
        );
        let e = judge(
            sandbox(),
            Language::Python,
            PY_SUM,
            &[],
            &s,
            base(),
            RerunPolicy::default(),
        )
        .await
        .expect_err("checker failure");
        assert!(matches!(e, JudgeError::Checker(_)), "{e}");
    }
}

#[tokio::test]
async fn the_judge_as_a_reward_component() {
    let reward = RewardSpec::from_json(json!({
        "version": 1,
        "components": [{"type": "judge", "tests": [
            {"input": "1 2\n", "output": "3\n"}, {"input": "-5 5", "output": "0"}],
            "checker": {"type": "float", "abs_tol": 1e-6}, "time_limit_ms": 1000, "partial": true}],
        "penalties": {"syntax_error": 0.5}
    }))
    .expect("spec");
    let program = Program::new(CPP_ABS_SUM).in_language(Language::Cpp);
    let out = score_program(sandbox(), &reward, &program, None, EvalOptions::default())
        .await
        .expect("scored");
    assert!((out.reward - 0.5).abs() < 1e-9, "{out:?}");
    let b = out.breakdown();
    assert_eq!(b["components"][0]["type"], "judge", "{b}");
    assert_eq!(
        b["components"][0]["detail"]["verdicts"],
        json!(["AC", "WA"]),
        "{b}"
    );
    // A compile error is a reward (with the syntax-error penalty), not an error.
    let bad = Program::new("int main(){ nope }").in_language(Language::Cpp);
    let out = score_program(sandbox(), &reward, &bad, None, EvalOptions::default())
        .await
        .expect("scored");
    assert!(
        (out.reward + 0.5).abs() < 1e-9,
        "0 minus the syntax-error penalty: {out:?}"
    );
    assert_eq!(
        out.breakdown()["components"][0]["detail"]["verdicts"],
        json!(["CE", "CE"])
    );
    // Invalid judge specs are refused at load.
    for bad in [
        json!({"version": 1, "components": [{"type": "judge", "tests": []}]}),
        json!({"version": 1, "components": [{"type": "judge", "tests": [{"input": "", "output": ""}], "time_limit_ms": 0}]}),
        json!({"version": 1, "components": [{"type": "judge", "tests": [{"input": "", "output": ""}], "bogus": 1}]}),
    ] {
        assert!(RewardSpec::from_json(bad.clone()).is_err(), "{bad}");
    }
}
