//! False timeouts through the scoring engine (`Scorer::score`) on the real sandbox: a run that
//! hits its wall-clock backstop under its CPU limit is re-run once, the re-run's result counts, the
//! breakdown says so, and a timeout the re-run did not settle is never cached.
//!
//! "Slow only the first time" is real, not mocked: the program sleeps while the clock is before an
//! instant the test picks (a few seconds ahead), as a program does on a machine that stalls it, so
//! its first run is killed at the wall deadline (no CPU used) and its re-run, which starts after
//! that instant, answers at once.

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use codegym_sandbox::Limits;
use env_coding::reward::run::{EvalOptions, Program};
use env_coding::scoring::{Scored, Submission};
use env_coding::tasks::{Task, TaskSet};
use env_coding::timeouts::RerunPolicy;
use env_coding::{CodingConfig, Scorer};
use serde_json::{Value, json};

const SUM: &str = "a, b = map(int, input().split())\nprint(a + b)\n";

fn scorer(policy: RerunPolicy) -> Scorer {
    let config = CodingConfig {
        timeout_rerun: policy,
        ..CodingConfig::default()
    };
    Scorer::new(&config).unwrap_or_else(|e| panic!("scorer setup failed: {e}"))
}

fn off() -> RerunPolicy {
    RerunPolicy {
        enabled: false,
        ..RerunPolicy::default()
    }
}

/// A task whose one component is `component`.
fn task(component: Value) -> Arc<Task> {
    let line = json!({"schema_version": 1, "id": "t", "prompt": "Print the sum of two integers.",
        "reward": {"version": 1, "components": [component]}});
    let set = TaskSet::parse(&line.to_string(), Path::new("inline.jsonl"))
        .unwrap_or_else(|e| panic!("{e}"));
    Arc::clone(set.get("t").expect("the task"))
}

fn judged(time_limit_ms: u64) -> Arc<Task> {
    task(json!({"type": "judge", "time_limit_ms": time_limit_ms,
        "tests": [{"input": "1 2\n", "output": "3\n"}]}))
}

/// `then` (Python), after sleeping while the clock is before `ahead_s` seconds from now.
fn slow_until(ahead_s: f64, then: &str) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let until = now.as_secs_f64() + ahead_s;
    format!("import time\nif time.time() < {until:.3}:\n    time.sleep(600)\n{then}")
}

/// The scorer's options with every run's limits set to `cpu_ms` / `wall_ms`.
fn limited(scorer: &Scorer, cpu_ms: u64, wall_ms: u64) -> EvalOptions {
    EvalOptions {
        limits: Some(Limits {
            cpu_ms,
            wall_ms,
            ..Limits::default()
        }),
        ..scorer.options()
    }
}

async fn score(scorer: &Scorer, task: &Arc<Task>, source: &str, opts: EvalOptions) -> Scored {
    let program = Submission::ScoreOnly(Program::new(source));
    match scorer.score(Arc::clone(task), program, opts).await {
        Ok(s) => s,
        Err(e) => panic!("machinery error: {e}"),
    }
}

fn reruns(s: &Scored) -> Vec<Value> {
    match &s.outcome.breakdown()["timeout_reruns"] {
        Value::Array(a) => a.clone(),
        Value::Null => Vec::new(),
        other => panic!("timeout_reruns is {other}"),
    }
}

fn verdicts(s: &Scored) -> Value {
    s.outcome.components[0].detail["verdicts"].clone()
}

#[tokio::test]
async fn a_sleeper_is_rerun_still_times_out_and_is_not_cached() {
    let scorer = scorer(RerunPolicy::default());
    // CPU limit 500 ms, wall backstop 2.5 s (5 s for the re-run).
    let task = judged(500);
    let sleeper = "import time\ntime.sleep(600)\n";
    let s = score(&scorer, &task, sleeper, scorer.options()).await;
    assert_eq!(verdicts(&s), json!(["TLE"]), "{:?}", s.outcome);
    assert_eq!(s.outcome.reward, 0.0);
    let r = reruns(&s);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["run"], "component 0 test 0");
    assert_eq!(r[0]["cpu_limit_ms"], 500);
    assert!(r[0]["first_wall_ms"].as_u64().unwrap() >= 2_500, "{r:?}");
    assert!(r[0]["first_cpu_ms"].as_u64().unwrap() < 450, "{r:?}");
    let rerun = &r[0]["rerun"];
    assert_eq!(rerun["timed_out"], true, "{r:?}");
    assert_eq!(rerun["false_timeout"], true, "{r:?}");
    assert_eq!(rerun["wall_limit_ms"], 5_000, "{r:?}");
    assert!(rerun["wall_ms"].as_u64().unwrap() >= 5_000, "{r:?}");
    // The timeout may be the machine's: an identical submission runs again.
    let again = score(&scorer, &task, sleeper, scorer.options()).await;
    assert!(!again.cache_hit);
    assert_eq!(reruns(&again).len(), 1);
}

#[tokio::test]
async fn a_busy_loop_is_not_rerun_and_its_timeout_is_cached() {
    let scorer = scorer(RerunPolicy::default());
    let task = judged(500);
    let busy = "while True:\n    pass\n";
    let s = score(&scorer, &task, busy, scorer.options()).await;
    assert_eq!(verdicts(&s), json!(["TLE"]), "{:?}", s.outcome);
    assert!(reruns(&s).is_empty(), "{:?}", s.outcome.breakdown());
    assert!(s.outcome.breakdown().get("timeout_reruns").is_none());
    let again = score(&scorer, &task, busy, scorer.options()).await;
    assert!(
        again.cache_hit,
        "a timeout the CPU proves is the program's verdict"
    );
}

#[tokio::test]
async fn a_judge_test_slow_only_the_first_time_passes_on_its_rerun() {
    let scorer = scorer(RerunPolicy::default());
    // CPU limit 2 s, wall backstop 6 s: the first run starts well before the instant (4.5 s
    // ahead) and is killed after it, the re-run starts after it.
    let task = judged(2_000);
    let program = slow_until(4.5, SUM);
    let s = score(&scorer, &task, &program, scorer.options()).await;
    assert_eq!(verdicts(&s), json!(["AC"]), "{:?}", s.outcome);
    assert_eq!(s.outcome.reward, 1.0);
    assert!(s.outcome.solved);
    let r = reruns(&s);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["run"], "component 0 test 0");
    assert!(r[0]["first_wall_ms"].as_u64().unwrap() >= 6_000, "{r:?}");
    assert_eq!(r[0]["rerun"]["timed_out"], false, "{r:?}");
    // Settled by its re-run: the verdict is the program's, and shared.
    let again = score(&scorer, &task, &program, scorer.options()).await;
    assert!(again.cache_hit);
    assert_eq!(again.outcome, s.outcome);
}

#[tokio::test]
async fn an_io_case_slow_only_the_first_time_passes_on_its_rerun() {
    let scorer = scorer(RerunPolicy::default());
    let task = task(json!({"type": "io_cases", "cases": [
        {"stdin": "1 2\n", "stdout": "3\n"}, {"stdin": "5 5\n", "stdout": "10\n"}]}));
    let opts = limited(&scorer, 2_000, 5_000);
    let s = score(&scorer, &task, &slow_until(3.5, SUM), opts).await;
    assert_eq!(s.outcome.reward, 1.0, "{:?}", s.outcome.breakdown());
    assert!(s.outcome.penalties.is_empty());
    let mut runs: Vec<String> = reruns(&s)
        .iter()
        .map(|r| {
            assert_eq!(r["rerun"]["timed_out"], false, "{r}");
            r["run"].as_str().unwrap().to_string()
        })
        .collect();
    runs.sort();
    assert_eq!(runs, ["component 0 case 0", "component 0 case 1"]);
}

#[tokio::test]
async fn the_plain_run_is_rerun_when_the_reward_reads_it() {
    let scorer = scorer(RerunPolicy::default());
    let task = task(json!({"type": "stdout", "expected": "hello"}));
    let opts = limited(&scorer, 2_000, 5_000);
    let run = Submission::Run(Program::new(slow_until(3.5, "print('hello')\n")));
    let s = match scorer.score(Arc::clone(&task), run, opts).await {
        Ok(s) => s,
        Err(e) => panic!("machinery error: {e}"),
    };
    assert_eq!(s.outcome.reward, 1.0, "{:?}", s.outcome.breakdown());
    // The observation is the re-run's.
    assert!(
        !s.execution.timed_out && s.execution.stdout == "hello\n",
        "{:?}",
        s.execution
    );
    let r = reruns(&s);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["run"], "program");
}

#[tokio::test]
async fn with_reruns_off_the_false_timeout_stands_listed_and_uncached() {
    let scorer = scorer(off());
    let task = judged(1_000);
    let program = slow_until(2.0, SUM);
    let s = score(&scorer, &task, &program, scorer.options()).await;
    assert_eq!(verdicts(&s), json!(["TLE"]), "{:?}", s.outcome);
    let r = reruns(&s);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["rerun"], Value::Null, "{r:?}");
    // The same program, now past its instant: it is run (not the cached timeout) and passes.
    let again = score(&scorer, &task, &program, scorer.options()).await;
    assert!(!again.cache_hit);
    assert_eq!(verdicts(&again), json!(["AC"]), "{:?}", again.outcome);
}

#[tokio::test]
async fn a_bad_policy_is_refused() {
    let config = CodingConfig {
        timeout_rerun: RerunPolicy {
            cpu_percent: 0,
            ..RerunPolicy::default()
        },
        ..CodingConfig::default()
    };
    let e = Scorer::new(&config).expect_err("cpu_percent 0");
    assert!(e.to_string().contains("cpu_percent"), "{e}");
}
