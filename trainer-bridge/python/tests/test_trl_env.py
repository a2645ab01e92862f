"""`environment_factory` classes driven the way TRL's GRPOTrainer drives them (TRL 1.16 contract,
read from its source: no-argument constructor, `reset(**row)`, public methods as tools called with
keyword arguments, `str(result)` to the model, exceptions as tool errors, `get_reward()`)."""

from __future__ import annotations

import inspect
import typing

import pytest

import codegym

SOLUTION = 'print(f"Result: {sum(i * i for i in range(1, 101))}")'


def trl_tools(instance: object) -> dict[str, typing.Callable]:
    """The tools TRL finds on an environment instance."""
    return {
        name: method
        for name, method in inspect.getmembers(instance, inspect.ismethod)
        if not name.startswith("_") and name not in ("reset", "get_reward")
    }


def assert_schema_ready(method: typing.Callable) -> None:
    """What transformers' `get_json_schema` needs: type hints and a Google-style `Args:` section."""
    hints = typing.get_type_hints(method)
    params = [p for p in inspect.signature(method).parameters]
    assert "return" in hints and all(p in hints for p in params)
    doc = inspect.getdoc(method) or ""
    assert "Args:" in doc and all(f"{p}:" in doc for p in params)


def call_tool(tools: dict, name: str, **arguments: typing.Any) -> str:
    """TRL's tool execution: result as text, or an error payload."""
    try:
        return str(tools[name](**arguments))
    except Exception as e:  # noqa: BLE001 - TRL turns any exception into an error message
        return str({"error": str(e)})


def test_script_mode_episode(server_address):
    cls = codegym.environment_factory(server_address)
    env = cls()  # TRL: no arguments
    tools = trl_tools(env)
    assert set(tools) == {"run_python"}
    assert_schema_ready(tools["run_python"])
    row = {"prompt": [{"role": "user", "content": "..."}], "task_id": "sum-of-squares"}
    assert env.reset(**row) is None  # the row's prompt already asks the task
    out = call_tool(tools, "run_python", code="print('Result: 1')")
    assert "exit code: 0" in out and "not solved" in out
    assert env.get_reward() < 1.0
    out = call_tool(tools, "run_python", code=SOLUTION)
    assert "solved" in out and env.get_reward() == 1.0 and env.done
    assert "error" in call_tool(tools, "run_python", code="print(1)")  # the episode is over
    # The instance is reused for the next rollout; without a prompt column reset returns the task.
    prompt = env.reset(task_id="hello-world")
    assert isinstance(prompt, str) and "Hello, world!" in prompt
    assert env.get_reward() == 0.0
    assert codegym.environment_reward([env]) == [0.0]


def test_session_mode_tools(server_address):
    cls = codegym.environment_factory(server_address, mode="session")
    env = cls()
    tools = trl_tools(env)
    assert set(tools) == {"run_python", "write_file", "read_file"}
    for tool in tools.values():
        assert_schema_ready(tool)
    task = {
        "id": "read-data",
        "prompt": "Print the sum of the numbers in data.txt.",
        "reward": {"version": 1, "components": [{"type": "contains", "text": "6"}]},
    }
    env.reset(task=task, prompt="x")
    assert "wrote" in call_tool(tools, "write_file", path="data.txt", content="1 2 3\n")
    assert call_tool(tools, "read_file", path="data.txt") == "1 2 3\n"
    call_tool(tools, "run_python", code="nums = [int(x) for x in open('data.txt').read().split()]")
    out = call_tool(tools, "run_python", code="print(sum(nums))")  # the interpreter persists
    assert "6" in out
    assert env.get_reward() == 1.0
    assert "error" in call_tool(tools, "read_file", path="../etc/passwd")


def test_reset_needs_a_task(server_address):
    env = codegym.environment_factory(server_address)()
    with pytest.raises(ValueError):
        env.reset(prompt="p")


def test_transformers_renders_the_tool_schemas():
    """TRL builds tool schemas with transformers' `get_json_schema` (skipped without transformers;
    the verifiers extra brings it, without torch)."""
    get_json_schema = pytest.importorskip("transformers.utils").get_json_schema
    env = codegym.environment_factory("127.0.0.1:1", mode="session")()
    schema = get_json_schema(env.run_python)["function"]
    assert schema["name"] == "run_python" and schema["parameters"]["required"] == ["code"]
    assert schema["parameters"]["properties"]["code"]["type"] == "string"
    write = get_json_schema(env.write_file)["function"]
    assert write["parameters"]["required"] == ["path", "content"]
