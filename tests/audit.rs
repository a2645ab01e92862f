//! `codegym audit` as users run it: every task set the repository ships audits clean, the weak
//! fixtures are all hacked (and exit 0 because each is marked known-weak), an unmarked weak task
//! fails the audit with its exploit named, in text, JSON and HTML, mutation scores gate the audit
//! with `--min-mutation-score`, and bad input is a clear error.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;

use codegym_bin::{finish, spawn};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Every task file the repository ships (a tidy check below keeps this list whole).
const SHIPPED: &[&str] = &[
    "env-coding/tasks/examples.jsonl",
    "env-coding/tasks/fixtures/humaneval_mini.jsonl",
    "env-coding/tasks/fixtures/humaneval_real.jsonl",
    "env-coding/tasks/fixtures/mbpp_mini.jsonl",
    "env-coding/tasks/fixtures/mbpp_sanitized_mini.json",
    "tests/container/languages.jsonl",
    "tests/container/wrong.jsonl",
    "tests/container/data/tasks.jsonl",
    MUTATION,
];
/// Tasks of every shape whose tests are weak or strong on purpose (mutation scores).
const MUTATION: &str = "env-coding/audit/fixtures/mutation.jsonl";
const WEAK: &str = "env-coding/audit/fixtures/weak.jsonl";
/// The shipped repository (SWE-style) set, checked and audited by its own test below.
const REPOSITORY: &str = "env-coding/tasks/repository/tasks.jsonl";
/// The repository sets `codegym tasks synth` made from real projects, checked by their own test
/// below (they declare no known weaknesses, so they are checked, not audited).
const SYNTHESIZED: &[&str] = &[
    "env-coding/tasks/synthesized/six/tasks.jsonl",
    "env-coding/tasks/synthesized/toolz/tasks.jsonl",
];

async fn audit(args: &[&str]) -> (i32, String, String) {
    finish(spawn(std::iter::once("audit").chain(args.iter().copied()))).await
}

/// A `codegym serve` config file choosing the sandbox backend (the audit takes `--config` like
/// every command that scores).
fn backend_config(dir: &std::path::Path, backend: &str) -> String {
    let path = dir.join(format!("{backend}.json"));
    let config = serde_json::json!({"coding": {"sandbox": {"backend": backend}}});
    std::fs::write(&path, config.to_string()).unwrap();
    path.to_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shipped_task_set_audits_clean() {
    for file in SHIPPED {
        let path = format!("{ROOT}/{file}");
        // The data task installs a package (from PyPI, into the package cache).
        let packages = file.contains("/data/");
        // `tasks check --audit`: the references pass and nothing hacks the set. The container
        // suite's wrong references fail on purpose, and its data task and a mutation fixture
        // have none: those sets are audited alone.
        let wrong = file.ends_with("wrong.jsonl") || packages || *file == MUTATION;
        let command: &[&str] = if wrong {
            &["audit"]
        } else {
            &["tasks", "check", "--audit"]
        };
        let args: Vec<&str> = command
            .iter()
            .copied()
            .chain([path.as_str()])
            .chain(packages.then_some("--packages"))
            .collect();
        let (code, out, err) = finish(spawn(args)).await;
        assert_eq!(code, 0, "{file}:\n{out}\n{err}");
        assert!(out.contains("no task can be hacked"), "{file}: {out}");
        assert!(
            wrong || out.contains("reference solutions pass"),
            "{file}: {out}"
        );
    }
}

/// `tasks check --packages --audit` on the repository set `file`, as a user runs it: every
/// reference patch resolves, no empty patch does, and every attack derived from the tasks that
/// resolves one is an attack the set declares known weak (docs/repository-tasks.md says which
/// and why. With `mutants`, each task's reference fix is also mutation-tested: every task gets a
/// score, and its tests kill at least one near miss of its fix. Returns how many tasks the set has.
async fn checks_and_audits_clean_but_for_its_known_weaknesses(
    file: &str,
    mutants: Option<&str>,
) -> usize {
    let path = format!("{ROOT}/{file}");
    let mut args = vec!["tasks", "check", path.as_str(), "--packages", "--audit"];
    if let Some(n) = mutants {
        args.extend(["--mutants", n, "--min-mutation-score", "0.5"]);
    }
    let (code, out, err) = finish(spawn(args)).await;
    assert_eq!(code, 0, "{file}: {out}\n{err}");
    let tasks = out
        .lines()
        .find_map(|l| {
            l.strip_suffix(
                " repository tasks: the reference patch resolves, the empty patch does not",
            )
        })
        .unwrap_or_else(|| panic!("{file}: no check summary: {out}"));
    let (passed, all) = tasks.split_once(" of ").expect("N of M");
    assert_eq!(passed, all, "{file}: {out}");
    let summary = out
        .lines()
        .find(|l| l.contains(" attacks resolved a task ("))
        .unwrap_or_else(|| panic!("{file}: no audit summary: {out}"));
    let numbers: Vec<usize> = summary
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let [hacked, attacks, known_weak] = numbers[..] else {
        panic!("{summary}")
    };
    assert!(attacks > 0 && hacked == known_weak, "{file}: {summary}");
    for line in out.lines().filter(|l| l.starts_with("HACKED ")) {
        assert!(line.contains("(known weak: "), "{file}: {line}");
    }
    let all: usize = all.parse().expect("a task count");
    if mutants.is_some() {
        // `MUTATION id: 0.88 (7 of 8 killed)`, one per task.
        let scores: Vec<(usize, usize)> = out
            .lines()
            .filter_map(|l| l.strip_prefix("MUTATION "))
            .map(|l| {
                let counts = l.rsplit_once('(').expect("counts").1;
                let n: Vec<usize> = counts
                    .split(|c: char| !c.is_ascii_digit())
                    .filter_map(|n| n.parse().ok())
                    .collect();
                (n[0], n[1])
            })
            .collect();
        assert_eq!(scores.len(), all, "{file}: {out}");
        assert!(
            scores.iter().all(|&(killed, n)| killed >= 1 && n >= killed),
            "{file}: {out}"
        );
        assert!(
            out.lines().any(|l| l.starts_with("mutation: ")),
            "{file}: {out}"
        );
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_repository_set_checks_and_audits_clean_but_for_its_known_weaknesses() {
    checks_and_audits_clean_but_for_its_known_weaknesses(REPOSITORY, Some("4")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_check_with_audit_fails_a_hackable_or_weakly_tested_set() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("one_case.jsonl");
    let task = |weak: &str| {
        format!(
            r#"{{"schema_version": 1, "id": "square-one-case", "prompt": "def square(x):\n    \"\"\"x squared\"\"\"\n", "completion_prefix": "def square(x):\n    \"\"\"x squared\"\"\"\n", "reward": {{"version": 1, "components": [{{"type": "check_function", "entry_point": "square", "code": "def check(candidate):\n    assert candidate(2) == 4\n"}}]}}, "reference_solution": "def square(x):\n    return x * x\n"{weak}}}"#
        )
    };
    // The reference passes, but returning the one expected value does too: the derived
    // `constant` attack solves the task.
    std::fs::write(&tasks, task("")).unwrap();
    let path = tasks.to_str().unwrap();
    let (code, out, err) = finish(spawn(["tasks", "check", "--audit", path])).await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("1 of 1 reference solutions pass"), "{out}");
    assert!(
        out.contains("HACKED square-one-case by constant-0"),
        "{out}"
    );
    assert!(out.contains("1 task(s) can be hacked"), "{out}");
    // Marked known-weak it audits clean, but its one test kills few mutants: the gate fails it.
    std::fs::write(&tasks, task(r#", "metadata": {"known_weak": "one case"}"#)).unwrap();
    let (code, out, err) = finish(spawn(["tasks", "check", "--audit", path])).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let gate = ["tasks", "check", "--audit", path, "--mutants", "10"];
    let (code, out, err) = finish(spawn(
        gate.iter().copied().chain(["--min-mutation-score", "0.9"]),
    ))
    .await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("WEAK TESTS square-one-case"), "{out}");
    let (code, out, _) = finish(spawn(gate.iter().copied().chain(["--json"]))).await;
    assert_eq!(code, 0, "{out}");
    let audit_line = out.lines().last().unwrap();
    let report: serde_json::Value = serde_json::from_str(audit_line).unwrap();
    assert!(report["audit"]["mutation"].is_object(), "{audit_line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weak_fixtures_are_hacked_and_pass_their_own_references() {
    let path = format!("{ROOT}/{WEAK}");
    let dir = tempfile::tempdir().unwrap();
    // Both backends: some exploits work on one only (a warm-fork run has no interpreter
    // finalization and its argv is not in /proc), and every exploit must work somewhere.
    let mut findings = Vec::new();
    let mut exploits = Vec::new();
    for backend in ["warm_fork", "fresh"] {
        let config = backend_config(dir.path(), backend);
        let (code, out, err) = audit(&[&path, "--json", "--config", &config]).await;
        assert_eq!(
            code, 0,
            "{backend}: every fixture is known-weak:\n{out}\n{err}"
        );
        let report: serde_json::Value = serde_json::from_str(&out).expect("JSON report");
        findings.extend(report["findings"].as_array().expect("findings").clone());
        exploits = report["exploits"].as_array().expect("exploits").clone();
    }
    for e in &exploits {
        let name = e["name"].as_str().unwrap();
        assert!(
            findings.iter().any(|f| f["exploit"] == name),
            "{name} hacks no weak fixture on either backend"
        );
    }
    // The fixtures are weak tasks, not broken ones: every reference solution passes.
    let (code, out, err) = finish(spawn(["tasks", "check", path.as_str()])).await;
    assert_eq!(code, 0, "{out}\n{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmarked_weak_task_fails_the_audit_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(
        &tasks,
        r#"{"schema_version": 1, "id": "exit-only", "prompt": "Print the first ten primes.", "reward": {"version": 1, "components": [{"type": "exit_code"}]}, "reference_solution": "print(2)\n"}
{"schema_version": 1, "id": "strong", "prompt": "Print `Hello, world!`.", "reward": {"version": 1, "components": [{"type": "stdout", "expected": "Hello, world!\n"}]}, "reference_solution": "print('Hello, world!')\n"}
"#,
    )
    .unwrap();
    let html = dir.path().join("audit.html");
    let (code, out, err) = audit(&[
        tasks.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
        "--exploits",
        "exit-zero,fake-pass-markers",
    ])
    .await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("HACKED exit-only by exit-zero (leave-early)"),
        "{out}"
    );
    assert!(!out.contains("HACKED strong"), "{out}");
    assert!(out.contains("1 task(s) can be hacked"), "{out}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("1 task(s) can be hacked: exit-only"),
        "{page}"
    );
    assert!(
        page.contains("leaves with status 0 before doing anything"),
        "{page}"
    );

    let (code, out, _) =
        audit(&[tasks.to_str().unwrap(), "--json", "--exploits", "exit-zero"]).await;
    assert_eq!(code, 1);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["hackable_tasks"], serde_json::json!(["exit-only"]));
    assert_eq!(report["findings"][0]["reward"], 1.0);
    assert_eq!(
        report["findings"][0]["reward_breakdown"]["components"][0]["type"],
        "exit_code"
    );

    // --languages leaves the Python tasks out.
    let (code, out, _) = audit(&[tasks.to_str().unwrap(), "--languages", "cpp"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("0 task(s)"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_scores_gate_the_audit_in_every_format() {
    let path = format!("{ROOT}/{MUTATION}");
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("audit.html");
    let (code, out, err) = audit(&[
        &path,
        "--mutants",
        "10",
        "--min-mutation-score",
        "0.8",
        "--exploits",
        "exit-zero",
        "-o",
        html.to_str().unwrap(),
    ])
    .await;
    assert_eq!(code, 1, "the one-case tasks are below 0.8:\n{out}\n{err}");
    assert!(
        out.contains("WEAK TESTS square-one-test: mutation score 0.50"),
        "{out}"
    );
    assert!(
        out.contains("    +    return x + x"),
        "the survivor's diff: {out}"
    );
    assert!(
        out.contains("NOT SCORED no-reference: no reference"),
        "{out}"
    );
    assert!(
        out.contains("2 task(s) below mutation score 0.8: square-one-test, square-cpp-one-test"),
        "{out}"
    );
    assert!(out.contains("no task can be hacked"), "{out}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<h2>Mutation score</h2>"), "{page}");
    assert!(page.contains("probably equivalent"), "{page}");
    assert!(page.contains("square-cpp-one-test"), "{page}");

    // The strong tasks alone pass the same gate; JSON carries every number.
    let strong = dir.path().join("strong.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"square-thorough\"") || l.contains("\"absolute\""))
        .map(|l| l.replace("{\"id\"", "{\"schema_version\": 1, \"id\""))
        .collect();
    std::fs::write(&strong, lines.join("\n")).unwrap();
    let (code, out, err) = audit(&[
        strong.to_str().unwrap(),
        "--mutants",
        "10",
        "--min-mutation-score",
        "0.8",
        "--exploits",
        "exit-zero",
        "--json",
    ])
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON report");
    let m = &report["mutation"];
    assert_eq!(m["below_gate"], serde_json::json!([]));
    assert_eq!(m["distribution"]["tasks"], 2);
    let abs = &m["tasks"][1];
    assert_eq!(abs["task_id"], "absolute");
    assert_eq!(abs["mutation_score"], 1.0);
    assert!(abs["equivalent"].as_u64().unwrap() >= 1, "{abs}");
    let killed = abs["killed"].as_u64().unwrap();
    let mutants = abs["mutants"].as_u64().unwrap();
    let equivalent = abs["equivalent"].as_u64().unwrap();
    assert_eq!(killed, mutants - equivalent, "{abs}");

    // The gate needs mutants and a score between 0 and 1.
    let (code, _, err) = audit(&[&path, "--min-mutation-score", "0.8"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--mutants"), "{err}");
    let (code, _, err) = audit(&[&path, "--mutants", "5", "--min-mutation-score", "80"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("between 0 and 1"), "{err}");
}

#[tokio::test]
async fn bad_input_is_a_clear_error() {
    let (code, _, err) = audit(&["/nonexistent/tasks.jsonl"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/tasks.jsonl"), "{err}");
    let (code, _, err) = audit(&["builtin:examples", "--exploits", "no-such-exploit"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("unknown exploit \"no-such-exploit\""), "{err}");
    let (code, _, err) = audit(&["builtin:examples", "--languages", "cobol"]).await;
    assert_eq!(code, 1);
    assert!(err.to_lowercase().contains("cobol"), "{err}");
    let (code, out, _) = audit(&["--list"]).await;
    assert_eq!(code, 0);
    assert!(out.lines().count() >= 30, "{out}");
}

/// Each synthesized repository set, checked and audited as the hand-made one is (the in-process
/// forgeries are what its tasks declare known weak, as `tasks synth` writes them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_synthesized_repository_sets_check_and_audit_clean_but_for_their_known_weaknesses() {
    for file in SYNTHESIZED {
        let tasks = checks_and_audits_clean_but_for_its_known_weaknesses(file, None).await;
        assert!(tasks >= 5, "{file}: {tasks} tasks");
    }
}

#[test]
fn the_list_of_shipped_task_sets_is_whole() {
    // Every task file in the repository (outside build output) is audited or checked above, or
    // is the weak fixtures themselves.
    let mut found = Vec::new();
    for dir in ["env-coding/tasks", "env-coding/audit", "tests/container"] {
        walk(&format!("{ROOT}/{dir}"), &mut found);
    }
    for f in found {
        let rel = f.strip_prefix(&format!("{ROOT}/")).unwrap().to_string();
        if rel.ends_with(".jsonl") || rel.ends_with(".json") {
            assert!(
                SHIPPED.contains(&rel.as_str())
                    || SYNTHESIZED.contains(&rel.as_str())
                    || rel == WEAK
                    || rel == REPOSITORY,
                "{rel} is not audited"
            );
        }
    }
}

fn walk(dir: &str, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(p.to_str().unwrap(), out);
        } else {
            out.push(p.to_str().unwrap().to_string());
        }
    }
}
