"""`ListTasks` and `codegym.load_tasks`: a task set as a dataset with GRPOTrainer's columns."""

from __future__ import annotations

import json

import datasets
import grpc
import pytest
from conftest import codegym_bin

import codegym


def test_list_tasks_pages_through_the_task_set(client):
    everything = client.list_tasks("codegym/Code-v0")
    paged = client.list_tasks("codegym/Code-v0", page_size=2)
    assert [t.id for t in paged] == [t.id for t in everything]
    assert len(everything) > 2 and "sum-of-squares" in {t.id for t in everything}
    task = next(t for t in everything if t.id == "sum-of-squares")
    system, user = task.messages
    assert system["role"] == "system" and "```python" in system["content"]
    assert user == {"role": "user", "content": task.prompt}
    assert task.language == "python"


def test_list_tasks_errors(client):
    with pytest.raises(codegym.CodegymError) as err:
        client.list_tasks("classic/CartPole-v1")
    assert err.value.code == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(codegym.CodegymError) as err:
        client.list_tasks("codegym/Code-v0", {"tasks": "/etc/passwd"})
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    from codegym.v1 import env_pb2 as pb

    with pytest.raises(grpc.RpcError) as raw:
        client._stub.ListTasks(pb.ListTasksRequest(env_id="codegym/Code-v0", page_token="nope"), timeout=30)
    assert raw.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_load_tasks_feeds_grpo_columns_and_the_reward(server_address):
    ds = codegym.load_tasks(server_address, "codegym/Code-v0")
    assert isinstance(ds, datasets.Dataset)
    assert {"prompt", "task_id", "completion_prefix"} <= set(ds.column_names)
    row = ds[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert json.loads(row["metadata"]) is not None
    # The columns TRL passes to reward functions are the ones the reward function reads.
    batch = ds.select(range(2))
    reward = codegym.reward_fn(server_address)
    try:
        scores = reward(
            prompts=batch["prompt"],
            completions=["```python\nprint('nothing useful')\n```"] * 2,
            task_id=batch["task_id"],
            completion_prefix=batch["completion_prefix"],
        )
    finally:
        reward.close()
    assert all(isinstance(s, float) for s in scores)


def test_load_tasks_from_a_local_file(tmp_path, monkeypatch, server_address):
    monkeypatch.setenv("CODEGYM_BIN", str(codegym_bin()))
    path = tmp_path / "tasks.jsonl"
    task = {
        "id": "add",
        "prompt": "def add(a, b):\n",
        "completion_prefix": "def add(a, b):\n",
        "reward": {"version": 1, "components": [{"type": "asserts", "asserts": ["assert add(1, 2) == 3"]}]},
    }
    path.write_text(json.dumps({"schema_version": 1, **task}) + "\n")
    local = codegym.load_tasks(path=path)
    assert local["task_id"] == ["add"] and local["completion_prefix"] == ["def add(a, b):\n"]
    served = codegym.load_tasks(server_address)
    # One source of the prompts: the file's rows render like the server's.
    assert local[0]["prompt"][0] == served[0]["prompt"][0]
    with pytest.raises(ValueError):
        codegym.load_tasks()


def test_tasks_carry_their_language(tmp_path, monkeypatch):
    # Issue 14: a C++ task's entry names its language, and its opening asks for C++.
    from codegym.tasks import _tasks_from_file

    monkeypatch.setenv("CODEGYM_BIN", str(codegym_bin()))
    path = tmp_path / "cpp.jsonl"
    task = {
        "schema_version": 1,
        "id": "a-plus-b",
        "prompt": "Read two integers, print their sum.",
        "language": "cpp",
        "reward": {"version": 1, "components": [{"type": "judge", "tests": [{"input": "1 2", "output": "3"}]}]},
    }
    path.write_text(json.dumps(task) + "\n")
    (entry,) = _tasks_from_file(path)
    assert entry.language == "cpp"
    assert "```cpp" in entry.messages[0]["content"]
