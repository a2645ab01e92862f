//! `codegym report` end to end: a real rollout (real coding env, the fake model server answering
//! with hostile text) turned into the HTML page, checked for what must hold without a browser:
//! self-contained, the data block intact and unbreakable, the numbers those of the dataset.
//! The browser half (charts render, a trajectory opens, filters work, hostile text does not run)
//! is `tests/browser/report.test.mjs`; with `CODEGYM_REPORT_KEEP_DIR=DIR` this test leaves its
//! dataset and page there for it. The test spawns the `codegym` binary, hence the
//! `disallowed_methods` allowance.

#[path = "support/rollout_util.rs"]
mod rollout_util;

use std::path::Path;

use fake_llm::{Fault, FaultRule, Reply, Rule};
use rollout_util::{records, rollout_args, script, task_ids};
use trajectory::aggregate::Tally;

const BIN: &str = env!("CARGO_BIN_EXE_codegym");

/// Model text that would run script in the page if it ever reached it as markup.
const HOSTILE: &str = "Done </script><script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\"> <!-- \u{2028}";

#[allow(clippy::disallowed_methods)] // the test runs the binary under test
fn codegym(args: &[&str]) -> std::process::Output {
    std::process::Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run codegym")
}

/// `codegym ARGS` on a blocking thread: the fake model server answers on the test's runtime.
async fn codegym_off_runtime(args: Vec<String>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        codegym(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap()
}

/// The stdout of a run that must have succeeded.
fn succeeded(out: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts a run failed with `want` in its stderr.
fn failed_with(out: &std::process::Output, want: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains(want), "{stderr}");
}

const DATA_OPEN: &str = r#"<script type="application/json" id="report-data">"#;

/// Where the page's data block's JSON starts and ends.
fn data_span(page: &str) -> (usize, usize) {
    let start = page.find(DATA_OPEN).expect("data block") + DATA_OPEN.len();
    let end = start
        + page[start..]
            .find("</script>")
            .expect("end of the data block");
    (start, end)
}

/// The JSON of the page's data block.
fn data_block(page: &str) -> serde_json::Value {
    let (start, end) = data_span(page);
    serde_json::from_str(&page[start..end]).expect("the data block is JSON")
}

/// The page without its data block's JSON.
fn without_data(page: &str) -> String {
    let (start, end) = data_span(page);
    format!("{}{}", &page[..start], &page[end..])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_report_is_self_contained_escaped_and_faithful() {
    let tasks = task_ids(3);
    let mut fake = script(0);
    // The second task's answers carry hostile text, in the message and in the program's output.
    let hostile_task = env_coding::tasks::TaskSet::builtin_examples()
        .get(&tasks[1])
        .unwrap()
        .prompt
        .clone();
    // A JSON string literal is a Python string literal too.
    let program = format!("print({})", serde_json::to_string(HOSTILE).unwrap());
    fake.rules.insert(
        0,
        Rule {
            prompt_contains: Some(hostile_task),
            turn: None,
            reply: Reply::Text(format!("{HOSTILE}\n```python\n{program}\n```\n")),
        },
    );
    let server = fake_llm::FakeLlm::start(fake).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let keep = std::env::var_os("CODEGYM_REPORT_KEEP_DIR");
    let base = keep.as_deref().map_or(dir.path(), Path::new);
    std::fs::create_dir_all(base).unwrap();
    let run = base.join("run.jsonl");
    let _ = std::fs::remove_file(&run);
    let page_path = base.join("report.html");
    let mut args = rollout_args(&server.base_url(), &tasks, 3, &run);
    // Every rewarded program compared with its task's reference: the page shows the outcomes.
    args.extend(["--cross-check", "1"].map(String::from));
    succeeded(&codegym_off_runtime(args).await);
    let dataset = records(&run);
    assert_eq!(dataset.len(), 9);

    let out = codegym(&[
        "report",
        run.to_str().unwrap(),
        "-o",
        page_path.to_str().unwrap(),
    ]);
    let said = succeeded(&out);
    assert!(said.contains("(9 episodes)"), "{said}");
    let page = std::fs::read_to_string(&page_path).unwrap();

    // Self-contained: nothing is loaded from anywhere (outside the data block's JSON strings no
    // element has a source), and the policy forbids it anyway.
    let markup = without_data(&page);
    assert!(!markup.contains(" src="), "an element with a source");
    assert_eq!(
        markup.matches("href=").count(),
        1,
        "only the empty data: icon"
    );
    assert!(markup.contains("href=\"data:,\""));
    assert!(page.contains("default-src 'none'"));
    // Exactly two script elements: the data block and the page's script; the hostile text stays
    // inside the data block's JSON as escapes.
    assert_eq!(page.matches("<script").count(), 2);
    assert!(
        !page.contains("<script>window") && !page.contains("<img"),
        "hostile text reached the page as markup"
    );
    assert!(!page.contains('\u{2028}'));

    let data = data_block(&page);
    assert_eq!(data["episodes"], 9);
    let shown = data["records"].as_array().unwrap();
    assert_eq!(shown.len(), 9);
    let text = serde_json::to_string(shown).unwrap();
    assert!(
        text.contains("window.__pwned = 1"),
        "the hostile text is shown, as text"
    );
    let solved = dataset.iter().filter(|r| r.solved).count();
    assert_eq!(data["solved"], solved);
    // The solved episodes ran their task's reference: every check agrees, on the page and in the
    // command's text.
    assert_eq!(
        data["cross_checks"],
        serde_json::json!({"agree": solved, "disagree": 0, "unavailable": 0, "error": 0})
    );
    assert!(data.get("disagreeing_tasks").is_none());
    assert!(
        said.contains(&format!("cross-checks: agree {solved}, disagree 0")),
        "{said}"
    );
    // pass@k is the trajectory crate's, for every k the samples allow (3 per task: k = 1, 2, 3).
    let per_task: Vec<(u64, u64)> = tasks
        .iter()
        .map(|t| {
            let mine: Vec<_> = dataset.iter().filter(|r| &r.task_id == t).collect();
            (
                mine.len() as u64,
                mine.iter().filter(|r| r.solved).count() as u64,
            )
        })
        .collect();
    let pass_at_k = data["pass_at_k"].as_object().unwrap();
    assert_eq!(pass_at_k.len(), 3);
    for k in 1..=3 {
        let want = trajectory::mean_pass_at_k(per_task.iter().copied(), k).unwrap();
        let got = pass_at_k[&format!("pass@{k}")].as_f64().unwrap();
        assert!((got - want).abs() < 1e-12, "pass@{k}");
    }
    let stops: u64 = data["stop_reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[1].as_u64().unwrap())
        .sum();
    assert_eq!(stops, 9);
}

#[test]
fn a_missing_or_empty_dataset_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.html");
    let missing = codegym(&[
        "report",
        "/nonexistent/run.jsonl",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/run.jsonl"));
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let res = codegym(&[
        "report",
        empty.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!res.status.success());
    assert!(String::from_utf8_lossy(&res.stderr).contains("no trajectory records"));
    let junk = dir.path().join("junk.jsonl");
    std::fs::write(&junk, "{\"not\": \"a record\"}\n").unwrap();
    let res = codegym(&[
        "report",
        junk.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!res.status.success());
    assert!(
        String::from_utf8_lossy(&res.stderr).contains("junk.jsonl:1:"),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    assert!(!out.exists(), "no page for a bad dataset");
}

/// The numbers `summary.json`, `codegym report` and `codegym evaluate` give for one run agree: all
/// three come from the one aggregation, errored episodes left out of every rate and mean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_report_and_evaluate_agree_on_a_run_with_errored_episodes() {
    let tasks = task_ids(3);
    let mut fake = script(0);
    // Quota errors are not retried: two episodes end `error` (not samples); a context-length stop
    // is the model's outcome (a sample).
    fake.faults = vec![
        FaultRule::at(Fault::QuotaExceeded, [0, 5]),
        FaultRule::at(Fault::ContextLength, [2]),
    ];
    let server = fake_llm::FakeLlm::start(fake).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run.jsonl");
    let mut args = rollout_args(&server.base_url(), &tasks, 4, &run);
    args.extend(["--concurrency", "2"].map(String::from));
    let out = codegym_off_runtime(args).await;
    let summary_path = rollout::dataset::sidecar(&run, ".summary.json");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&summary_path)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr))),
    )
    .unwrap();
    let page = dir.path().join("r.html");
    succeeded(&codegym(&[
        "report",
        run.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]));
    let report = data_block(&std::fs::read_to_string(&page).unwrap());
    let records = trajectory::read::read_latest(&run).unwrap();
    let aggregate = serde_json::to_value(Tally::of_records(&records).aggregate()).unwrap();

    assert_eq!(summary["errored"], 2, "{summary}");
    assert_eq!(summary["episodes"], 12);
    for field in [
        "episodes",
        "errored",
        "sampled_episodes",
        "solved",
        "solved_rate",
        "pass_at_k",
        "mean_final_reward",
        "mean_total_reward",
    ] {
        assert_eq!(
            summary[field], report[field],
            "summary.json vs report: {field}"
        );
        assert_eq!(
            summary[field], aggregate[field],
            "summary.json vs aggregate: {field}"
        );
    }
    assert!(summary["pass_at_k"].get("pass@1").is_some(), "{summary}");

    // `codegym evaluate` scores samples (errored episodes never reach it) and aggregates them with
    // the same code: its pass@k for the sampled episodes is the summary's.
    let results: Vec<_> = records
        .iter()
        .filter(|r| !r.needs_rerun())
        .map(|r| env_coding::completions::SampleResult {
            task_id: r.task_id.clone(),
            completion: String::new(),
            passed: r.solved,
            reward: r.final_reward,
            reward_breakdown: serde_json::Value::Null,
        })
        .collect();
    let evaluate = env_coding::completions::pass_at_ks(&results, &[1, 2, 4]);
    assert_eq!(
        serde_json::to_value(evaluate).unwrap(),
        summary["pass_at_k"]
    );
}

/// `codegym report` and `codegym export` read through the one reader: a torn last line (a run
/// killed mid-write) is ignored, a corrupt line before it is an error naming the file and line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_and_export_ignore_a_torn_last_line_and_name_a_corrupt_one() {
    let tasks = task_ids(2);
    let server = fake_llm::FakeLlm::start(script(0)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run.jsonl");
    succeeded(&codegym_off_runtime(rollout_args(&server.base_url(), &tasks, 1, &run)).await);
    let text = std::fs::read_to_string(&run).unwrap();
    let first = text.lines().next().unwrap();
    let page = dir.path().join("r.html");
    let exported = dir.path().join("rl.jsonl");
    let report = |input: &Path| {
        codegym(&[
            "report",
            input.to_str().unwrap(),
            "-o",
            page.to_str().unwrap(),
        ])
    };
    let export = |input: &Path| {
        codegym(&[
            "export",
            "--in",
            input.to_str().unwrap(),
            "--out",
            exported.to_str().unwrap(),
            "--format",
            "sft",
        ])
    };

    let torn = dir.path().join("torn.jsonl");
    std::fs::write(&torn, format!("{text}{}", &first[..first.len() / 2])).unwrap();
    assert!(succeeded(&report(&torn)).contains("(2 episodes)"));
    succeeded(&export(&torn));

    let corrupt = dir.path().join("corrupt.jsonl");
    std::fs::write(&corrupt, format!("{first}\n{{broken\n{text}")).unwrap();
    let want = format!("{}:2: not a trajectory record", corrupt.display());
    failed_with(&report(&corrupt), &want);
    failed_with(&export(&corrupt), &want);
}
