//! `--cross-check` end to end: the real binary, the real coding env and sandbox, the coding env's
//! own checker (inputs derived from the task's tests, the reference run on them), the fake model
//! playing a policy that games a weak task. The rollout records the disagreement with the input
//! and both outputs, its metric counts it, the report shows it, `--on-disagreement zero` takes the
//! reward, an honest policy agrees, a task without a reference is never checked, and
//! `codegym rescore --cross-check 1` finds the same on the stored run. The binary runs through
//! `support/codegym_bin.rs`.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;
#[path = "support/rollout_util.rs"]
mod rollout_util;

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use codegym_bin::{LIMIT, finish, spawn};
use fake_llm::{FakeLlm, FakeScript, Reply, Rule};
use rollout::dataset::record::{
    CrossCheckOutcome, EnvStepRecord, OnDisagreement, StopReason, TrajectoryRecord,
};
use rollout_util::{records, rollout_args};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The gamed `square`: right on the tests' one input (2), wrong on any other.
const GAMED: &str = "def square(x):\n    return 4\n";
const HONEST: &str = "def square(x):\n    return x * x\n";

/// A HumanEval-style `square` task tested only with `candidate(2) == 4`.
fn weak_task(id: &str, tag: &str, reference: bool) -> serde_json::Value {
    let prompt = format!("def square(x):\n    \"\"\"Return x squared ({tag}).\"\"\"\n");
    let mut t = json!({
        "schema_version": 1, "id": id, "prompt": prompt, "completion_prefix": prompt,
        "reward": {"version": 1, "components": [{"type": "check_function", "entry_point": "square",
            "code": "def check(candidate):\n    assert candidate(2) == 4\n"}]},
    });
    if reference {
        t["reference_solution"] = json!(format!("{prompt}    return x * x\n"));
    }
    t
}

/// `gamed` (gamed, with a reference), `honest` (solved honestly) and `noref` (gamed, no
/// reference), and a fake model playing each so.
fn setup(dir: &Path) -> (String, FakeScript) {
    let path = dir.join("tasks.jsonl");
    let mut f = std::fs::File::create(&path).unwrap();
    for t in [
        weak_task("gamed", "gamed", true),
        weak_task("honest", "honest", true),
        weak_task("noref", "noref", false),
    ] {
        writeln!(f, "{t}").unwrap();
    }
    let rule = |tag: &str, program: &str| Rule {
        prompt_contains: Some(format!("({tag})")),
        turn: None,
        reply: Reply::code(program),
    };
    let script = FakeScript {
        rules: vec![
            rule("gamed", GAMED),
            rule("honest", HONEST),
            rule("noref", GAMED),
        ],
        ..FakeScript::default()
    };
    (path.display().to_string(), script)
}

fn args(
    base_url: &str,
    tasks_file: &str,
    tasks: &[&str],
    out: &Path,
    extra: &[&str],
) -> Vec<String> {
    let ids: Vec<String> = tasks.iter().map(|t| t.to_string()).collect();
    let mut a = rollout_args(base_url, &ids, 2, out);
    a.extend(["--tasks", tasks_file].map(String::from));
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// The one rewarded step of an episode.
fn step(r: &TrajectoryRecord) -> &EnvStepRecord {
    let steps: Vec<_> = r.turns.iter().flat_map(|t| &t.env_steps).collect();
    assert_eq!(steps.len(), 1, "{}", r.episode_id);
    steps[0]
}

/// One scrape of the rollout's metrics: the value of `codegym_reward_cross_checks_total` for
/// `outcome` (0 before it is first counted).
async fn cross_checks_metric(addr: &str, outcome: &str) -> f64 {
    let body = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap();
    scrape
        .samples
        .iter()
        .filter(|s| {
            s.metric == "codegym_reward_cross_checks_total"
                && s.labels.get("outcome") == Some(outcome)
        })
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gamed_weak_task_disagrees_in_the_record_the_metric_the_report_and_rescore() {
    let dir = tempfile::tempdir().unwrap();
    let (tasks_file, mut script) = setup(dir.path());
    // Slow answers keep the run serving metrics after its first episodes (one at a time).
    script.latency_ms = 400;
    let server = FakeLlm::start(script).await.unwrap();
    let out = dir.path().join("run.jsonl");
    let extra = [
        "--cross-check",
        "1",
        "--concurrency",
        "1",
        "--metrics-addr",
        "127.0.0.1:0",
    ];
    let a = args(
        &server.base_url(),
        &tasks_file,
        &["gamed", "honest", "noref"],
        &out,
        &extra,
    );
    let mut child = spawn(&a);
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let metrics = tokio::time::timeout(LIMIT, async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            if let Some(rest) = line.strip_prefix("metrics listening on ") {
                return rest.trim().to_string();
            }
        }
        panic!("no metrics line on stderr")
    })
    .await
    .unwrap();
    // The two `gamed` episodes come first: both disagree before the run is over.
    tokio::time::timeout(LIMIT, async {
        while cross_checks_metric(&metrics, "disagree").await < 2.0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the metric counts both disagreements while the run serves it");
    let (code, stdout, stderr_rest) = finish(child).await;
    assert_eq!(code, 0, "{stdout}\n{stderr_rest}");
    assert!(
        stdout.contains("cross-checks: agree 2, disagree 2, unavailable 0, error 0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("disagreeing with the reference: gamed"),
        "{stdout}"
    );

    let all = records(&out);
    assert_eq!(all.len(), 6);
    for r in &all {
        let s = step(r);
        // The default penalty is none: every episode keeps its reward and is solved.
        assert!(r.solved && s.reward == 1.0 && r.stop_reason == StopReason::Solved);
        match r.task_id.as_str() {
            "gamed" => {
                let c = s.cross_check.as_ref().expect("the gamed step was checked");
                assert_eq!(c.outcome, CrossCheckOutcome::Disagree);
                assert_eq!((c.action, c.original_reward), (OnDisagreement::Keep, 1.0));
                assert!(c.inputs > 1 && c.disagreeing >= 1, "{c:?}");
                assert!(!c.disagreements.is_empty() && c.disagreements.len() <= 3);
                // An input other than the test's, the reference's square and the program's 4.
                let d = &c.disagreements[0];
                let x: f64 = serde_json::from_str::<Vec<f64>>(&d.input).unwrap()[0];
                assert_ne!(x, 2.0, "{d:?}");
                assert_eq!(d.candidate, "4", "{d:?}");
                assert_eq!(d.reference.parse::<f64>().unwrap(), x * x, "{d:?}");
            }
            "honest" => {
                let c = s.cross_check.as_ref().expect("the honest step was checked");
                assert_eq!(c.outcome, CrossCheckOutcome::Agree, "{c:?}");
                assert!(c.inputs > 1 && c.disagreeing == 0 && c.disagreements.is_empty());
            }
            _ => assert!(
                s.cross_check.is_none(),
                "a task without a reference was checked"
            ),
        }
    }

    // The report: its text and its page.
    let page = dir.path().join("report.html");
    let (code, stdout, stderr) = finish(spawn([
        "report",
        out.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]))
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("cross-checks: agree 2, disagree 2, unavailable 0, error 0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("disagreeing with the reference: gamed"),
        "{stdout}"
    );
    let html = std::fs::read_to_string(&page).unwrap();
    let open = r#"<script type="application/json" id="report-data">"#;
    let start = html.find(open).unwrap() + open.len();
    let end = start + html[start..].find("</script>").unwrap();
    let data: serde_json::Value = serde_json::from_str(&html[start..end]).unwrap();
    assert_eq!(
        data["cross_checks"],
        json!({"agree": 2, "disagree": 2, "unavailable": 0, "error": 0})
    );
    assert_eq!(data["disagreeing_tasks"], json!(["gamed"]));
    assert!(html.contains(r#"<section id="cross-checks" hidden>"#));

    // The stored run, rescored with cross-checks: the same steps, the same findings.
    let rescored = dir.path().join("rescored.jsonl");
    let (code, stdout, stderr) = finish(spawn([
        "rescore",
        out.to_str().unwrap(),
        "-o",
        rescored.to_str().unwrap(),
        "--tasks",
        &tasks_file,
        "--cross-check",
        "1",
    ]))
    .await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("cross-checks: agree 2, disagree 2, unavailable 0, error 0"),
        "{stdout}"
    );
    let again = records(&rescored);
    assert_eq!(again.len(), 6);
    for r in &again {
        let before = all.iter().find(|b| b.episode_id == r.episode_id).unwrap();
        assert_eq!(
            step(r).cross_check,
            step(before).cross_check,
            "{}",
            r.episode_id
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_disagreement_zero_takes_the_reward_and_a_rescore_can_give_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let (tasks_file, script) = setup(dir.path());
    let server = FakeLlm::start(script).await.unwrap();
    let out = dir.path().join("zero.jsonl");
    let extra = ["--cross-check", "1", "--on-disagreement", "zero"];
    let (code, stdout, stderr) = finish(spawn(args(
        &server.base_url(),
        &tasks_file,
        &["gamed", "honest"],
        &out,
        &extra,
    )))
    .await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    // The gamed episodes are no longer solved: pass@1 is the honest task's alone.
    assert!(stdout.contains("pass@1: 0.5000"), "{stdout}");
    let all = records(&out);
    for r in &all {
        let s = step(r);
        let c = s.cross_check.as_ref().unwrap();
        if r.task_id == "gamed" {
            assert_eq!(
                (c.outcome, c.action),
                (CrossCheckOutcome::Disagree, OnDisagreement::Zero)
            );
            assert_eq!((s.reward, c.original_reward), (0.0, 1.0));
            assert_eq!(
                (r.total_reward, r.final_reward, r.solved),
                (0.0, 0.0, false)
            );
            // The env did end the episode as solved; the record says what the check made of it.
            assert_eq!(r.stop_reason, StopReason::Solved);
        } else {
            assert_eq!(
                (c.outcome, c.action),
                (CrossCheckOutcome::Agree, OnDisagreement::Keep)
            );
            assert_eq!((s.reward, r.total_reward, r.solved), (1.0, 1.0, true));
        }
    }

    // A rescoring keeps a zeroed step zeroed; cross-checked again with `keep`, the reward is back.
    for (extra, reward) in [(&[][..], 0.0), (&["--cross-check", "1"][..], 1.0)] {
        let rescored = dir.path().join("rescored.jsonl");
        let mut a = vec![
            "rescore",
            out.to_str().unwrap(),
            "-o",
            rescored.to_str().unwrap(),
            "--tasks",
            &tasks_file,
        ];
        a.extend(extra);
        let (code, stdout, stderr) = finish(spawn(&a)).await;
        assert_eq!(code, 0, "{stdout}\n{stderr}");
        for r in records(&rescored).iter().filter(|r| r.task_id == "gamed") {
            let s = step(r);
            let c = s.cross_check.as_ref().unwrap();
            assert_eq!(
                (c.outcome, c.original_reward),
                (CrossCheckOutcome::Disagree, 1.0)
            );
            assert_eq!(
                (s.reward, r.total_reward, r.final_reward, r.solved),
                (reward, reward, reward, reward == 1.0),
                "{extra:?}"
            );
        }
    }
}
