"""The package's copy of the env <-> client contract equals the Rust definition (`env-core/contract.json`,
which a Rust test keeps equal to `env_core::contract`), and tool calls reach the server in the one shape
it accepts: as a dict, as the helper's value, or as the JSON text of one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from codegym.v1 import env_pb2 as pb

import codegym
from codegym import _contract as contract

CONTRACT = json.loads((Path(__file__).resolve().parents[3] / "env-core" / "contract.json").read_text())
GOOD = 'print(f"Result: {sum(i * i for i in range(1, 101))}")'


def test_the_python_contract_is_the_rust_one():
    assert contract.VERSION == CONTRACT["version"]
    assert list(contract.INFO_KEYS) == CONTRACT["info_keys"]
    assert contract.TOOL_KEY == CONTRACT["tool_key"]
    for table, key in ((contract.TOOLS, "tools"), (contract.REPO_TOOLS, "repo_tools")):
        tools = {name: {"required": list(req), "optional": list(opt)} for name, (req, opt) in table.items()}
        assert tools == CONTRACT[key]


def test_tool_calls_are_checked_before_sending():
    with pytest.raises(ValueError, match="unknown tool 'rm_rf'"):
        codegym.tool_call("rm_rf")
    with pytest.raises(ValueError, match=r"missing: \['language'\]"):
        codegym.tool_call("run_code", code="x")
    with pytest.raises(ValueError, match=r"unknown: \['source'\]"):
        contract.tool_call_value({"tool": "run_python", "code": "x", "source": "y"})
    with pytest.raises(ValueError, match=r"missing: \['old', 'new'\]"):
        codegym.tool_call("str_replace", path="a.py")
    assert codegym.tool_call("submit").json == '{"tool": "submit"}'
    assert contract.parse_tool_call("print(1)") is None
    assert contract.parse_tool_call('{"a": 1}') is None
    assert contract.parse_tool_call(' {"tool": "read_file", "path": "a"} ') == {"tool": "read_file", "path": "a"}


@pytest.mark.parametrize(
    "action",
    [
        {"tool": "run_python", "code": GOOD},
        json.dumps({"tool": "run_python", "code": GOOD}),
        codegym.tool_call("run_python", code=GOOD),
        {"tool": "run_code", "code": GOOD, "language": "python"},
    ],
    ids=["dict", "json-text", "helper", "run_code-dict"],
)
def test_evaluate_takes_every_form_of_a_tool_call(server_address, action):
    with codegym.Client(server_address) as client:
        (result,) = client.evaluate("codegym/Python-v0", [codegym.EvalItem(action, {"task_id": "sum-of-squares"})])
    assert not isinstance(result, codegym.CodegymError), result
    assert result.reward == 1.0
    assert result.info[contract.SOLVED] is True


def test_the_server_reads_the_json_text_of_a_tool_call(server_address):
    """Sent as raw text (past the client's own conversion), the call is still a call to the server."""
    text = json.dumps({"tool": "run_python", "code": GOOD})
    bad = json.dumps({"tool": "run_python", "source": GOOD})
    with codegym.Client(server_address) as client:
        items = [codegym.EvalItem(pb.Value(text=t), {"task_id": "sum-of-squares"}) for t in (text, bad)]
        good_result, bad_result = client.evaluate("codegym/Python-v0", items)
    assert not isinstance(good_result, codegym.CodegymError), good_result
    assert good_result.reward == 1.0
    assert isinstance(bad_result, codegym.CodegymError)
    assert "bad tool call" in bad_result.details
