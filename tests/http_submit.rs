//! SandboxFusion's dataset endpoints end to end: a real server (gRPC + HTTP listeners on
//! 127.0.0.1:0) in this process with two task files written here, the real sandbox, a real TCP
//! client (reqwest).

#[path = "support/http_server.rs"]
mod http_server;

use std::collections::BTreeMap;

use codegym::http::datasets::Datasets;
use codegym::server::ServerConfig;
use http_server::HttpServer;
use serde_json::{Value, json};

/// The server and the folder of its task files.
struct Server {
    inner: HttpServer,
    _dir: tempfile::TempDir,
}

const HUMANEVAL: &str = r#"{"task_id": "HumanEval/0", "prompt": "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n", "canonical_solution": "    return a + b\n", "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n", "entry_point": "add"}
{"task_id": "HumanEval/1", "prompt": "def double(x):\n    \"\"\"Return 2 * x.\"\"\"\n", "canonical_solution": "    return 2 * x\n", "test": "def check(candidate):\n    assert candidate(2) == 4\n", "entry_point": "double"}
"#;

const MBPP: &str = r#"{"task_id": 11, "text": "Write a function to square a number.", "code": "def square(x):\n    return x * x", "test_list": ["assert square(2) == 4", "assert square(3) == 9"], "test_setup_code": "", "challenge_test_list": []}
"#;

async fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let he = dir.path().join("HumanEval.jsonl");
    let mbpp = dir.path().join("mbpp.jsonl");
    std::fs::write(&he, HUMANEVAL).unwrap();
    std::fs::write(&mbpp, MBPP).unwrap();
    let files = BTreeMap::from([
        ("humaneval_python".to_string(), he),
        ("mbpp".to_string(), mbpp),
    ]);
    let datasets = Datasets::load(&files).expect("the fixture datasets load");
    let options = codegym::http::HttpOptions {
        datasets,
        ..Default::default()
    };
    Server {
        inner: HttpServer::start(ServerConfig::default(), options).await,
        _dir: dir,
    }
}

impl Server {
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = reqwest::Client::new()
            .post(format!("http://{}{path}", self.inner.http))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    async fn submit(&self, dataset: &str, id: Value, completion: &str) -> Value {
        let (status, body) = self
            .post(
                "/submit",
                json!({"dataset": dataset, "id": id, "completion": completion, "config": {}}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }
}

#[test]
fn a_bad_dataset_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("broken.jsonl");
    std::fs::write(&bad, "{not json\n").unwrap();
    let files = BTreeMap::from([("mine".to_string(), bad.clone())]);
    let err = Datasets::load(&files).unwrap_err().to_string();
    assert!(err.contains("broken.jsonl"), "{err}");
    assert!(err.contains("mine"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_are_listed_paged_and_found_by_id() {
    let server = start().await;
    let names: Value = reqwest::get(format!("http://{}/list_datasets", server.inner.http))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(names, json!(["humaneval_python", "mbpp"]));

    let (status, all) = server
        .post(
            "/get_prompts",
            json!({"dataset": "humaneval_python", "config": {}}),
        )
        .await;
    assert_eq!(status, 200);
    let ids: Vec<_> = all.as_array().unwrap().iter().map(|p| &p["id"]).collect();
    assert_eq!(ids, [&json!("HumanEval/0"), &json!("HumanEval/1")]);
    assert!(
        all[0]["prompt"]
            .as_str()
            .unwrap()
            .starts_with("def add(a, b):")
    );
    assert_eq!(all[0]["labels"]["entry_point"], "add");

    let (_, page) = server
        .post(
            "/get_prompts",
            json!({"dataset": "humaneval_python", "config": {}, "offset": 1, "limit": 5}),
        )
        .await;
    assert_eq!(page.as_array().unwrap().len(), 1);
    assert_eq!(page[0]["id"], "HumanEval/1");
    let (_, none) = server
        .post(
            "/get_prompts",
            json!({"dataset": "mbpp", "config": {}, "offset": 0, "limit": 0}),
        )
        .await;
    assert_eq!(none, json!([]));

    let (status, hit) = server
        .post(
            "/get_prompt_by_id",
            json!({"dataset": "mbpp", "config": {}, "id": 11}),
        )
        .await;
    assert_eq!(status, 200, "{hit}");
    assert_eq!(hit["id"], 11);
    assert!(
        hit["prompt"]
            .as_str()
            .unwrap()
            .contains("assert square(2) == 4")
    );
    assert_eq!(hit["labels"]["source"], "mbpp");
    let (status, also) = server
        .post(
            "/get_prompt_by_id",
            json!({"dataset": "mbpp", "config": {}, "id": "11"}),
        )
        .await;
    assert_eq!((status, &also["id"]), (200, &json!(11)));

    let (status, miss) = server
        .post(
            "/get_prompt_by_id",
            json!({"dataset": "mbpp", "config": {}, "id": 12}),
        )
        .await;
    assert_eq!(status, 404, "{miss}");
    assert!(miss["detail"].as_str().unwrap().contains("12"), "{miss}");

    let (status, unknown) = server
        .post("/get_prompts", json!({"dataset": "nope", "config": {}}))
        .await;
    assert_eq!(status, 400);
    assert_eq!(unknown["detail"], "no eval class found for dataset nope");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submissions_are_scored_by_the_coding_env() {
    let server = start().await;

    // A chat-style answer with the whole function in a fenced block.
    let right = server
        .submit(
            "humaneval_python",
            json!("HumanEval/0"),
            "Sure:\n```python\ndef add(a, b):\n    return a + b\n```\nDone.",
        )
        .await;
    assert_eq!(right["id"], "HumanEval/0");
    assert_eq!(right["accepted"], true, "{right}");
    assert_eq!(right["extracted_type"], "fenced");
    // What produced the verdict, as every scoring surface reports it.
    assert_eq!(
        right["extra"]["provenance"]["language"], "python",
        "{right}"
    );
    assert!(
        right["extra"]["provenance"]["task_hash"].is_string(),
        "{right}"
    );
    assert!(
        right["extracted_code"]
            .as_str()
            .unwrap()
            .contains("return a + b")
    );
    let tests = right["tests"].as_array().unwrap();
    assert!(!tests.is_empty());
    for t in tests {
        assert_eq!(t["passed"], true, "{t}");
        assert_eq!(t["exec_info"]["status"], "Success", "{t}");
        assert_eq!(t["exec_info"]["message"], "");
        assert_eq!(t["exec_info"]["run_result"]["return_code"], 0);
    }

    // A HumanEval continuation: the prompt is prepended.
    let continued = server
        .submit(
            "humaneval_python",
            json!("HumanEval/1"),
            "    return 2 * x\n",
        )
        .await;
    assert_eq!(continued["accepted"], true, "{continued}");
    assert!(
        continued["extracted_code"]
            .as_str()
            .unwrap()
            .starts_with("def double(x):")
    );

    // MBPP, id as a number (what the pydantic client sends for "11").
    let mbpp = server
        .submit(
            "mbpp",
            json!(11),
            "```python\ndef square(x):\n    return x * x\n```",
        )
        .await;
    assert_eq!((&mbpp["id"], &mbpp["accepted"]), (&json!(11), &json!(true)));

    // Wrong: not accepted, and the failed assertion is in the test's stderr.
    let wrong = server
        .submit(
            "mbpp",
            json!(11),
            "```python\ndef square(x):\n    return x + x\n```",
        )
        .await;
    assert_eq!(wrong["accepted"], false, "{wrong}");
    let failed = wrong["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["passed"] == false)
        .expect("a failed test");
    assert_eq!(failed["exec_info"]["status"], "Failed");
    let run = &failed["exec_info"]["run_result"];
    assert_eq!(run["status"], "Finished");
    assert_ne!(run["return_code"], 0);
    assert!(
        run["stderr"].as_str().unwrap().contains("AssertionError"),
        "{failed}"
    );

    // Hostile: reads /etc/shadow, then exits 0 before any test can run.
    let hostile = server
        .submit(
            "humaneval_python",
            json!("HumanEval/0"),
            "```python\nimport sys\ntry:\n    print(open('/etc/shadow').read())\nexcept Exception as e:\n    print(e)\nsys.exit(0)\ndef add(a, b):\n    return a + b\n```",
        )
        .await;
    assert_eq!(hostile["accepted"], false, "{hostile}");
    assert!(
        hostile["tests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["passed"] == false)
    );
    assert!(
        !hostile.to_string().contains("root:"),
        "shadow leaked: {hostile}"
    );

    // An unknown dataset is SandboxFusion's 400; a bad body is FastAPI's 422.
    let (status, body) = server
        .post(
            "/submit",
            json!({"dataset": "nope", "id": 1, "completion": "x", "config": {}}),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["detail"], "no eval class found for dataset nope");
    let (status, _) = server.post("/submit", json!({"dataset": "mbpp"})).await;
    assert_eq!(status, 422);
}

/// A program that never finishes under its tests (a loop at its top level) is SandboxFusion's
/// `TimeLimitExceeded`, as a run of it alone would be, though it only ran under its tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_never_finishes_is_a_time_limit() {
    let server = start().await;
    let looping = server
        .submit(
            "humaneval_python",
            json!("HumanEval/0"),
            "```python\nwhile True:\n    pass\n```",
        )
        .await;
    assert_eq!(looping["accepted"], false, "{looping}");
    let test = &looping["tests"][0];
    assert_eq!(test["exec_info"]["status"], "Failed", "{test}");
    assert_eq!(
        test["exec_info"]["run_result"]["status"], "TimeLimitExceeded",
        "{test}"
    );
    assert_eq!(test["exec_info"]["run_result"]["return_code"], json!(null));
    // A wrong answer that finishes is no time limit.
    let wrong = server
        .submit(
            "humaneval_python",
            json!("HumanEval/0"),
            "```python
def add(a, b):
    return a - b
```",
        )
        .await;
    let test = &wrong["tests"][0];
    assert_eq!(
        test["exec_info"]["run_result"]["status"], "Finished",
        "{test}"
    );
}
