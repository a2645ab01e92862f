"""`codegym/Repo-v0` from Python against a real `codegym serve` over the shipped repository set:
`gymnasium.make`, an agent's tool calls as text actions, and `submit` scored with the hidden tests
in a fresh copy (the fix earns 1, the untouched repository 0)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest
from conftest import serve

import codegym

TASKS = Path(__file__).resolve().parents[3] / "env-coding" / "tasks" / "repository"
TASK = "inflection/ordinal-teens"
FIX = {
    "tool": "str_replace",
    "path": "inflection/__init__.py",
    "old": "if number in (11, 12, 13):",
    "new": "if number % 100 in (11, 12, 13):",
}


@pytest.fixture(scope="module")
def repo_server(tmp_path_factory) -> Iterator[str]:
    with serve(tmp_path_factory.mktemp("repo-server"), "--tasks-dir", str(TASKS), "--packages") as printed:
        yield printed[0][len("listening on ") :]


def _episode(address: str, calls: list[dict[str, str]]) -> tuple[float, bool, dict]:
    codegym.register_gymnasium_envs()
    env = gym.make("codegym/Repo-v0", address=address, tasks=str(TASKS / "tasks.jsonl"))
    try:
        obs, info = env.reset(options={"task_id": TASK})
        assert env.observation_space.contains(obs) and "ordinalize(111)" in obs
        assert info["task_id"] == TASK
        reward, terminated, info = 0.0, False, {}
        for call in [*calls, {"tool": "submit"}]:
            obs, reward, terminated, truncated, info = env.step(json.dumps(call))
            assert env.observation_space.contains(obs) and not truncated
        return float(reward), terminated, info
    finally:
        env.close()


def test_the_fix_resolves_the_task(repo_server):
    reward, terminated, info = _episode(repo_server, [{"tool": "view", "path": "inflection/__init__.py"}, FIX])
    assert (reward, terminated, info["solved"]) == (1.0, True, True), info
    assert "number % 100" in info["patch"]


def test_the_untouched_repository_does_not(repo_server):
    reward, terminated, info = _episode(repo_server, [{"tool": "bash", "command": "ls"}])
    assert (reward, terminated, info["solved"]) == (0.0, True, False), info
