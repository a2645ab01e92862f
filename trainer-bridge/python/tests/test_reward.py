"""The TRL reward function: one Evaluate call scores a batch of string and chat completions."""

from __future__ import annotations

import pytest

import codegym

GOOD = 'print(f"Result: {sum(i * i for i in range(1, 101))}")'
WRONG = 'print("Result: 0")'
TASK = "sum-of-squares"


def fenced(code: str) -> str:
    return f"Here is my solution:\n\n```python\n{code}\n```\n"


def test_completion_text_accepts_strings_and_messages():
    assert codegym.completion_text("abc") == "abc"
    chat = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a1"},
        {"role": "assistant", "content": "a2"},
    ]
    assert codegym.completion_text(chat) == "a2"
    assert codegym.completion_text([{"role": "user", "content": "q"}]) == ""
    with pytest.raises(TypeError):
        codegym.completion_text(42)


def test_reward_fn_scores_a_batch(server_address):
    reward = codegym.reward_fn(server_address)
    try:
        prompts = ["Compute the sum of squares"] * 4
        completions = [
            fenced(GOOD),
            fenced(WRONG),
            [{"role": "assistant", "content": fenced(GOOD)}],
            [{"role": "assistant", "content": fenced("raise SystemExit(3)")}],
        ]
        rewards = reward(prompts=prompts, completions=completions, task_id=[TASK] * 4)
        assert len(rewards) == 4 and all(isinstance(r, float) for r in rewards)
        assert rewards[0] == rewards[2]
        assert rewards[0] > rewards[1] and rewards[0] > rewards[3]
        assert reward.__name__.startswith("codegym_")
    finally:
        reward.close()


def test_reward_fn_unknown_task_scores_error_reward(server_address):
    reward = codegym.reward_fn(server_address, error_reward=-1.0)
    try:
        rewards = reward(prompts=["p", "p"], completions=[fenced(GOOD), fenced(GOOD)], task_id=["no-such-task", TASK])
        assert rewards[0] == -1.0
        assert rewards[1] > 0.0
    finally:
        reward.close()


def test_reward_fn_needs_the_task_column(server_address):
    reward = codegym.reward_fn(server_address)
    try:
        with pytest.raises(ValueError, match="task_id"):
            reward(prompts=["p"], completions=["x"])
        with pytest.raises(ValueError):
            reward(prompts=["p"], completions=["x", "y"], task_id=[TASK])
        assert reward(prompts=[], completions=[], task_id=[]) == []
    finally:
        reward.close()
