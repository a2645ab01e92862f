//! Data tasks (issue 13) on real sandboxed Python, on both backends: a sales-CSV task in the spirit
//! of Flyte's AutoCoder example (total revenue, units and row count as typed outputs, the region and
//! a discount as command-line inputs, the CSV given by path relative to the task file), solved by a
//! reference program and failed by wrong ones, and programs that attack the input files and the
//! outputs directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use codegym_sandbox::{Backend, Limits, Sandbox, SandboxConfig};
use env_coding::reward::RewardOutcome;
use env_coding::reward::run::{EvalOptions, Program, run_and_score};
use env_coding::tasks::{Task, TaskSet};
use env_core::{ExecutionResult, OutputValue};
use serde_json::json;

const SALES: &str = "date,region,product,units,price\n\
2024-01-01,west,widget,3,9.50\n\
2024-01-01,east,gadget,2,20.00\n\
2024-01-02,west,gadget,1,20.00\n\
2024-01-03,north,widget,5,9.50\n\
2024-01-03,east,widget,4,9.50\n";

/// The reference: argparse inputs, the CSV from the work dir, outputs under `$CODEGYM_OUTPUTS`.
/// `{revenue}`, `{units}`, `{rows}` let the wrong programs below replace one expression each.
const TEMPLATE: &str = r#"
import argparse, csv, os
p = argparse.ArgumentParser()
p.add_argument("--region", required=True)
p.add_argument("--discount", type=float, default=0.0)
a = p.parse_args()
rows = [r for r in csv.DictReader(open("sales.csv")) if a.region in ("all", r["region"])]
revenue = sum(int(r["units"]) * float(r["price"]) for r in rows) * (1 - a.discount)
units = sum(int(r["units"]) for r in rows)
out = os.environ["CODEGYM_OUTPUTS"]
def put(name, value):
    with open(os.path.join(out, name), "w") as f:
        f.write(value)
put("total_revenue", {revenue})
put("units", {units})
put("rows", {rows})
"#;

fn program(revenue: &str, units: &str, rows: &str) -> String {
    TEMPLATE
        .replace("{revenue}", revenue)
        .replace("{units}", units)
        .replace("{rows}", rows)
}

fn reference() -> String {
    program("repr(revenue)", "str(units)", "str(len(rows))")
}

/// A task file in a temp dir, with the CSV beside it in `data/`.
fn task_set(dir: &Path) -> TaskSet {
    std::fs::create_dir_all(dir.join("data")).expect("data dir");
    std::fs::write(dir.join("data/sales.csv"), SALES).expect("csv");
    let task = json!({
        "schema_version": 1,
        "id": "sales-summary",
        "prompt": "Summarise sales.csv for --region, after --discount.",
        "files": {"sales.csv": {"path": "data/sales.csv"}},
        "inputs": {"region": "west", "discount": 0},
        "outputs": {"total_revenue": "float", "units": "int", "rows": "int"},
        "reward": {"version": 1, "components": [
            {"type": "output", "name": "total_revenue", "expected": 48.5, "tolerance": 0.01},
            {"type": "output", "name": "units", "expected": 4},
            {"type": "output", "name": "rows", "expected": 2}
        ]}
    });
    let path = dir.join("tasks.jsonl");
    std::fs::write(&path, format!("{task}\n")).expect("task file");
    TaskSet::load(&path).unwrap_or_else(|e| panic!("load: {e}"))
}

fn sandbox(backend: Backend, n: u32) -> (Sandbox, PathBuf) {
    let root = PathBuf::from(format!(
        "/dev/shm/codegym-data-test-{}-{n}",
        std::process::id()
    ));
    std::fs::create_dir_all(&root).expect("work root");
    let config = SandboxConfig {
        work_root: Some(root.clone()),
        uid_base: 2_700_000 + (std::process::id() % 1000) * 100 + n * 16,
        uid_count: 16,
        backend,
        ..SandboxConfig::default()
    };
    let sb = Sandbox::new(config).unwrap_or_else(|e| panic!("sandbox: {e}"));
    (sb, root)
}

fn opts() -> EvalOptions {
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

async fn score(sb: &Sandbox, task: &Task, source: &str) -> (ExecutionResult, RewardOutcome) {
    let mut p = Program::new(source);
    p.data = task.data.clone();
    run_and_score(sb, &task.reward, &p, opts())
        .await
        .unwrap_or_else(|e| panic!("infrastructure error: {e}"))
}

fn value(r: &ExecutionResult, name: &str) -> serde_json::Value {
    match r.outputs.get(name) {
        Some(OutputValue::Value(v)) => v.clone(),
        other => panic!("{name}: {other:?}\nstderr: {}", r.stderr),
    }
}

fn error(r: &ExecutionResult, name: &str) -> String {
    match r.outputs.get(name) {
        Some(OutputValue::Error(e)) => e.clone(),
        other => panic!("{name}: expected an error, got {other:?}"),
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Every scenario on one backend.
async fn scenarios(backend: Backend, n: u32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let set = task_set(dir.path());
    let task = set.get("sales-summary").expect("task").clone();
    let (sb, root) = sandbox(backend, n);

    // The reference solves it; the outputs are typed values.
    let (r, o) = score(&sb, &task, &reference()).await;
    assert!(
        o.solved,
        "{backend:?}: {:?}\nstderr: {}",
        o.breakdown(),
        r.stderr
    );
    assert_eq!(value(&r, "total_revenue"), json!(48.5));
    assert_eq!(value(&r, "units"), json!(4));
    assert_eq!(value(&r, "rows"), json!(2));

    // Inputs arrive as `--name value`, in name order.
    let (r, _) = score(&sb, &task, "import sys; print(sys.argv[1:])").await;
    assert_eq!(r.stdout, "['--discount', '0', '--region', 'west']\n");

    // Wrong type: units written as a float. Partial credit for the other two outputs.
    let (r, o) = score(
        &sb,
        &task,
        &program("repr(revenue)", "repr(float(units))", "str(len(rows))"),
    )
    .await;
    assert!(
        error(&r, "units").contains("not a valid int"),
        "{:?}",
        r.outputs
    );
    assert!(!o.solved);
    assert!((o.reward - 2.0 / 3.0).abs() < 1e-9, "{}", o.reward);

    // Missing file: rows never written.
    let src = reference().replace("put(\"rows\", str(len(rows)))", "");
    let (r, o) = score(&sb, &task, &src).await;
    assert!(error(&r, "rows").contains("missing"), "{:?}", r.outputs);
    assert!((o.reward - 2.0 / 3.0).abs() < 1e-9);

    // A value within tolerance still counts; one beyond it does not.
    let (_, o) = score(
        &sb,
        &task,
        &program("repr(revenue + 0.005)", "str(units)", "str(len(rows))"),
    )
    .await;
    assert!(o.solved, "{:?}", o.breakdown());
    let (r, o) = score(
        &sb,
        &task,
        &program("repr(revenue + 1)", "str(units)", "str(len(rows))"),
    )
    .await;
    assert_eq!(value(&r, "total_revenue"), json!(49.5));
    assert!((o.reward - 2.0 / 3.0).abs() < 1e-9);

    // A crash before writing anything: every output is missing, a reward of 0, not an error.
    let (r, o) = score(&sb, &task, "raise SystemExit(3)").await;
    assert_eq!(r.exit_code, Some(3));
    assert_eq!(r.outputs.len(), 3);
    assert_eq!(o.reward, 0.0);

    // Other inputs for the same program: the east region.
    let mut east = Task::clone(&task);
    east.data.inputs.insert("region".into(), json!("east"));
    let (r, o) = score(&sb, &east, &reference()).await;
    assert_eq!(value(&r, "total_revenue"), json!(78.0));
    assert_eq!(value(&r, "rows"), json!(2));
    assert!(!o.solved);

    hostile(&sb, &task).await;

    // The host's copy of the data is untouched, and the next run sees the original again.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("data/sales.csv")).expect("csv"),
        SALES
    );
    let (_, o) = score(&sb, &task, &reference()).await;
    assert!(o.solved);
    drop(sb);
    let _ = std::fs::remove_dir_all(root);
}

/// Attacks on the input files and the outputs dir: writes are refused (when runs get their own
/// uid), planted links and FIFOs are reported as bad outputs, never followed, never hang the host.
async fn hostile(sb: &Sandbox, task: &Task) {
    let src = r#"
import os
def attempt(what, f):
    try:
        f()
        print(what, "ALLOWED")
    except OSError as e:
        print(what, "denied", type(e).__name__)
attempt("append", lambda: open("sales.csv", "a").write("1999-01-01,west,x,1000,1000\n"))
attempt("chmod", lambda: os.chmod("sales.csv", 0o666))
out = os.environ["CODEGYM_OUTPUTS"]
os.symlink("/etc/hostname", os.path.join(out, "rows"))
os.mkfifo(os.path.join(out, "units"))
with open(os.path.join(out, "total_revenue"), "w") as f:
    f.write("1" * (2 << 20))
"#;
    let (r, o) = score(sb, task, src).await;
    if is_root() {
        assert!(
            r.stdout.contains("append denied PermissionError"),
            "{}",
            r.stdout
        );
        assert!(
            r.stdout.contains("chmod denied PermissionError"),
            "{}",
            r.stdout
        );
    }
    assert!(error(&r, "rows").contains("rows"), "{:?}", r.outputs);
    assert!(
        error(&r, "units").contains("not a regular file"),
        "{:?}",
        r.outputs
    );
    assert!(
        error(&r, "total_revenue").contains("larger than"),
        "{:?}",
        r.outputs
    );
    assert_eq!(o.reward, 0.0);
    // The program may replace its own copy (it owns the work dir), which changes nothing else.
    let (r, _) = score(
        sb,
        task,
        "import os; os.unlink('sales.csv'); open('sales.csv', 'w').write('x'); print('replaced')",
    )
    .await;
    assert_eq!(r.stdout, "replaced\n", "{}", r.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sales_task_on_the_fresh_backend() {
    scenarios(Backend::Fresh, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sales_task_on_the_warm_backend() {
    scenarios(Backend::WarmFork, 1).await;
}

#[test]
fn task_data_round_trips_and_inline_tasks_refuse_paths() {
    let dir = tempfile::tempdir().expect("tempdir");
    let set = task_set(dir.path());
    let task: &Arc<Task> = set.get("sales-summary").expect("task");
    let ctx = task.data.context.as_ref().expect("a data context");
    assert!(
        ctx.text.contains("File sales.csv: 5 rows, 5 columns"),
        "{}",
        ctx.text
    );
    // Loaded by path, serialised inline: the inline form parses back to the same task.
    let inline = serde_json::to_value(task.as_ref()).expect("json");
    assert_eq!(inline["files"]["sales.csv"]["text"], json!(SALES));
    assert_eq!(
        &Task::from_json(inline.clone()).expect("inline"),
        task.as_ref()
    );
    let mut with_path = inline;
    with_path["files"] = json!({"sales.csv": {"path": "data/sales.csv"}});
    let e = Task::from_json(with_path).unwrap_err();
    assert!(e.contains("only allowed in a task file"), "{e}");
}

/// The env's side: an inline data task in reset options, other inputs as a reset option, the data
/// context in reset's info, and the same fields in `Evaluate` items.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_options_and_evaluate_items_carry_data() {
    use env_coding::{CodingConfig, PYTHON_ENV_ID, register};
    use env_core::{EvalItem, Registry, Value};

    let mut reg = Registry::new();
    register(&mut reg, CodingConfig::default()).unwrap_or_else(|e| panic!("register: {e}"));
    let kwargs = json!({"extract": "raw"})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let dir = tempfile::tempdir().expect("tempdir");
    let set = task_set(dir.path());
    let inline =
        serde_json::to_value(set.get("sales-summary").expect("task").as_ref()).expect("json");
    let options = |extra: serde_json::Value| {
        let mut o = json!({"task": inline.clone()});
        if let (Some(o), Some(extra)) = (o.as_object_mut(), extra.as_object()) {
            o.extend(extra.clone());
        }
        o.as_object().cloned().unwrap_or_default()
    };
    let outputs = |obs: &Value| match obs {
        Value::Execution(r) => r.outputs.clone(),
        other => panic!("not an execution: {other:?}"),
    };

    let mut env = reg.make_async(PYTHON_ENV_ID, &kwargs).await.expect("make");
    let (_, info) = env.reset(Some(1), options(json!({}))).await.expect("reset");
    let ctx = info["data_context"].as_str().expect("data_context");
    assert!(ctx.contains("- units: int, no nulls"), "{ctx}");
    let step = env.step(Value::Text(reference())).await.expect("step");
    assert_eq!(step.reward, 1.0);
    assert!(step.terminated);

    // The same task on other inputs (a reset option): the outputs follow, the hidden expectations
    // (for the west region) no longer hold.
    env.reset(
        Some(1),
        options(json!({"inputs": {"region": "all", "discount": 0.5}})),
    )
    .await
    .expect("reset");
    let step = env.step(Value::Text(reference())).await.expect("step");
    let out = outputs(&step.obs);
    assert_eq!(out["rows"], OutputValue::Value(json!(5)));
    assert_eq!(out["total_revenue"], OutputValue::Value(json!(87.0)));
    assert!(step.reward < 1.0);

    // Bad data options are the client's error.
    for bad in [
        json!({"inputs": {"--x": 1}}),
        json!({"files": {"../x": {"text": ""}}}),
        json!({"files": {"a.csv": {"path": "/etc/passwd"}}}),
    ] {
        let e = env.reset(None, options(bad.clone())).await.unwrap_err();
        assert!(
            matches!(e, env_core::EnvError::InvalidOptions(_)),
            "{bad}: {e}"
        );
    }

    // Evaluate items: other files inline.
    let evaluator = reg.evaluator(PYTHON_ENV_ID).expect("evaluator");
    let items = vec![EvalItem {
        seed: None,
        options: options(
            json!({"files": {"sales.csv": {"text": "date,region,product,units,price\n"}}}),
        ),
        action: Value::Text(reference()),
    }];
    let results = evaluator
        .evaluate(kwargs.clone(), items)
        .await
        .expect("evaluate");
    let step = results.into_iter().next().expect("one").expect("step");
    assert_eq!(outputs(&step.obs)["rows"], OutputValue::Value(json!(0)));
    assert_eq!(step.reward, 0.0);
}

/// Session mode: the interpreter's work dir has the read-only input files; the reward replays the
/// session's program with the task's inputs and reads its typed outputs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_mode_sees_the_files_and_scores_outputs() {
    use env_coding::{CodingConfig, PYTHON_ENV_ID, register};
    use env_core::{Registry, Value};

    let mut reg = Registry::new();
    register(&mut reg, CodingConfig::default()).unwrap_or_else(|e| panic!("register: {e}"));
    let kwargs = json!({"extract": "raw", "mode": "session"})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let dir = tempfile::tempdir().expect("tempdir");
    let set = task_set(dir.path());
    let inline =
        serde_json::to_value(set.get("sales-summary").expect("task").as_ref()).expect("json");
    let mut env = reg.make_async(PYTHON_ENV_ID, &kwargs).await.expect("make");
    let options = json!({"task": inline})
        .as_object()
        .cloned()
        .unwrap_or_default();
    env.reset(None, options).await.expect("reset");
    let step = env
        .step(Value::Text(
            "import os\nprint(open('sales.csv').readline().strip(), os.access('sales.csv', os.W_OK))".into(),
        ))
        .await
        .expect("step");
    match &step.obs {
        Value::Execution(r) => {
            let writable = if is_root() { "False" } else { "True" };
            assert_eq!(
                r.stdout,
                format!("date,region,product,units,price {writable}\n"),
                "{}",
                r.stderr
            )
        }
        other => panic!("{other:?}"),
    }
    let step = env.step(Value::Text(reference())).await.expect("step");
    assert_eq!(step.reward, 1.0, "{:?}", step.info);
}
