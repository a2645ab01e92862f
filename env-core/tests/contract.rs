//! `contract.json` (read by the Python package's tests) equals the contract's definitions.

#[test]
fn the_checked_in_contract_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/contract.json");
    let expected = env_core::contract::to_json();
    let pretty = serde_json::to_string_pretty(&expected).expect("serializes") + "\n";
    if std::env::var_os("CODEGYM_WRITE_CONTRACT").is_some() {
        std::fs::write(path, &pretty).expect("contract.json is writable");
    }
    let text = std::fs::read_to_string(path).expect("contract.json is readable");
    assert_eq!(
        text, pretty,
        "contract.json is stale: run CODEGYM_WRITE_CONTRACT=1 cargo test -p env-core --test contract"
    );
}

#[test]
fn tool_call_shapes() {
    use env_core::contract::{is_tool_call, run_code, run_python};
    assert!(is_tool_call(&run_python("print(1)")));
    assert_eq!(run_code("x", "go")["language"], "go");
    assert!(!is_tool_call(&serde_json::json!({"code": "x"})));
    assert!(!is_tool_call(&serde_json::json!({"tool": 3})));
}

#[test]
fn every_tool_name_is_distinct() {
    use env_core::contract::{REPO_TOOLS, TOOLS};
    let mut names: Vec<&str> = TOOLS.iter().chain(REPO_TOOLS).map(|t| t.name).collect();
    let all = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(
        names.len(),
        all,
        "a call's shape follows its tool's name: {names:?}"
    );
}
