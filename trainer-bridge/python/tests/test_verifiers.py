"""The verifiers (0.4, `verifiers.v1`) taskset: resolution by id, loading, tools in a codegym
session, and rewards from `Evaluate`. Skipped when `verifiers` is not installed (`[verifiers]` extra;
not in `[test]`, to keep CI installs small)."""

from __future__ import annotations

import asyncio
import types

import pytest

vf_loaders = pytest.importorskip("verifiers.v1.utils.loaders")

from codegym.verifiers import (  # noqa: E402 - only once verifiers is known to be installed
    CodegymTaskConfig,
    CodegymTaskset,
    CodegymToolset,
    CodegymToolsetConfig,
)

GOOD = '```python\nprint(f"Result: {sum(i * i for i in range(1, 101))}")\n```'


def taskset(address: str) -> CodegymTaskset:
    config_cls = CodegymTaskset.__orig_bases__[0].__args__[1]  # CodegymTasksetConfig
    config = config_cls(id="codegym-taskset", address=address, task=CodegymTaskConfig(address=address))
    return vf_loaders.load_taskset(config)


def test_taskset_resolves_by_id_and_loads_the_servers_tasks(server_address):
    assert vf_loaders.taskset_class("codegym-taskset") is CodegymTaskset
    tasks = list(taskset(server_address))
    by_id = {t.data.task_id: t for t in tasks}
    assert "sum-of-squares" in by_id
    task = by_id["sum-of-squares"]
    assert task.data.system_prompt and "```python" in task.data.system_prompt
    assert "sum of the squares" in task.data.prompt_text


def test_rewards_come_from_evaluate(server_address):
    task = next(t for t in taskset(server_address) if t.data.task_id == "sum-of-squares")
    good = asyncio.run(task.codegym_reward(types.SimpleNamespace(last_reply=f"<think>hmm</think>{GOOD}")))
    bad = asyncio.run(task.score_text("```python\nprint('Result: 0')\n```"))
    assert good == 1.0 and bad < 1.0


def test_toolset_runs_a_multi_turn_session(server_address):
    task = next(t for t in taskset(server_address) if t.data.task_id == "sum-of-squares")
    tools = CodegymToolset(CodegymToolsetConfig(address=server_address, mode="session"))

    async def episode() -> list[str]:
        await tools.setup_task(task)
        return [
            await tools.write_file("n.txt", "100"),
            await tools.run_python("n = int(open('n.txt').read())"),
            await tools.run_python("print(f'Result: {sum(i * i for i in range(1, n + 1))}')"),
            await tools.read_file("../escape"),
        ]

    wrote, first, second, escape = asyncio.run(episode())
    assert "wrote" in wrote and "exit code: 0" in first
    assert "Result: 338350" in second and "solved: True" in second
    assert "error" in escape
