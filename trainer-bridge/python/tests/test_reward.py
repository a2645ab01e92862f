"""The TRL reward functions: one Evaluate call per batch, sync and async, inline tasks, prefixes,
extraction, `<think>` stripping, and failures that raise (or score None) instead of a silent 0."""

from __future__ import annotations

import asyncio
import socket

import pytest

import codegym

GOOD = 'print(f"Result: {sum(i * i for i in range(1, 101))}")'
WRONG = 'print("Result: 0")'
HOSTILE = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nwhile True: pass"
TASK = "sum-of-squares"
INLINE = {
    "id": "double",
    "prompt": "Read an integer from stdin and print twice its value.",
    "reward": {
        "version": 1,
        "components": [
            {"type": "io_cases", "cases": [{"stdin": "2\n", "stdout": "4\n"}, {"stdin": "5\n", "stdout": "10\n"}]}
        ],
    },
}
ADD_TASK = {
    "id": "add",
    "prompt": "def add(a, b):\n",
    "completion_prefix": "def add(a, b):\n",
    "reward": {
        "version": 1,
        "components": [{"type": "asserts", "asserts": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]}],
    },
}


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


def test_think_and_extraction():
    text = "<think>```python\nprint('no')\n```</think>Answer:\n```python\nprint('yes')\n```"
    assert codegym.extract_program(codegym.strip_think(text)) == "print('yes')\n"
    assert codegym.strip_think("reasoning</think>final") == "final"
    assert codegym.strip_think("ok<think>never closed") == "ok"
    assert codegym.extract_program("no block", "code_block") == ""
    assert codegym.extract_program("x = 1", "auto") == "x = 1"
    assert codegym.extract_program("```python\nx\n```", "raw") == "```python\nx\n```"


BATCH = [fenced(GOOD), fenced(WRONG), [{"role": "assistant", "content": fenced(GOOD)}], fenced(HOSTILE)]


def test_reward_fn_scores_a_batch(server_address):
    reward = codegym.reward_fn(server_address)
    try:
        rewards = reward(prompts=["p"] * 4, completions=BATCH, task_id=[TASK] * 4)
        assert rewards[0] == rewards[2] == 1.0
        assert rewards[1] < 1.0 and rewards[3] < 1.0
        assert reward.__name__.startswith("codegym_")
        assert reward.last[0].solved and not reward.last[1].solved
        assert reward.last[0].breakdown  # per-component rewards for logging
    finally:
        reward.close()


def test_async_reward_fn_scores_the_same(server_address):
    reward = codegym.AsyncRewardFunction(server_address)

    async def run() -> list[float | None]:
        try:
            return await reward(prompts=["p"] * 4, completions=BATCH, task_id=[TASK] * 4)
        finally:
            await reward.close()

    rewards = asyncio.run(run())
    assert rewards[0] == rewards[2] == 1.0 and rewards[1] < 1.0 and rewards[3] < 1.0


def test_trl_logging_hooks_receive_components(server_address):
    reward = codegym.reward_fn(server_address)
    extra: dict[str, list] = {}
    metrics: dict[str, float] = {}
    try:
        reward(
            prompts=["p", "p"],
            completions=[fenced(GOOD), fenced(WRONG)],
            task_id=[TASK, TASK],
            log_extra=lambda column, values: extra.__setitem__(column, values),
            log_metric=lambda name, value: metrics.__setitem__(name, value),
        )
    finally:
        reward.close()
    assert extra["codegym_solved"] == [True, False]
    assert metrics["codegym/solved_rate"] == 0.5


def test_inline_tasks_and_completion_prefixes(server_address):
    reward = codegym.reward_fn(server_address, extract="auto")
    try:
        rewards = reward(
            prompts=["p"] * 4,
            completions=[
                fenced("print(int(input()) * 2)"),
                fenced("print(int(input()) + 2)"),
                "    return a + b\n",  # a HumanEval-style continuation of the prompt
                "    return a - b\n",
            ],
            task=[INLINE, INLINE, ADD_TASK, ADD_TASK],
        )
        assert rewards[0] == 1.0 and rewards[1] < 1.0
        assert rewards[2] == 1.0 and rewards[3] < 1.0
        assert reward.last[2].program.startswith("def add(a, b):\n    return")
    finally:
        reward.close()


def test_rewards_do_not_depend_on_the_observation(server_address):
    # The reward functions ask for no observation (the program runs only as its reward needs);
    # asking for one gives the same rewards and breakdowns.
    completions = [fenced("print(int(input()) * 2)"), "    return a + b\n", "    return a - b\n", fenced(GOOD)]
    columns = {"task": [INLINE, ADD_TASK, ADD_TASK, None], "task_id": [None, None, None, TASK]}
    found = []
    for env_kwargs in (None, {"observe": True}):
        reward = codegym.reward_fn(server_address, extract="auto", env_kwargs=env_kwargs)
        try:
            rewards = reward(prompts=["p"] * 4, completions=completions, **columns)
            found.append((rewards, [s.breakdown for s in reward.last]))
        finally:
            reward.close()
    assert found[0][0] == [1.0, 1.0, 0.0, 1.0]
    assert found[0] == found[1]


def test_thinking_completions(server_address):
    reward = codegym.reward_fn(server_address)
    try:
        thought = f"<think>maybe {fenced(WRONG)}</think>{fenced(GOOD)}"
        assert reward(prompts=["p"], completions=[thought], task_id=[TASK]) == [1.0]
    finally:
        reward.close()


def test_unknown_task_raises_or_scores_none(server_address):
    reward = codegym.reward_fn(server_address)
    try:
        with pytest.raises(codegym.CodegymError, match="no-such-task"):
            reward(prompts=["p", "p"], completions=[fenced(GOOD)] * 2, task_id=["no-such-task", TASK])
    finally:
        reward.close()
    lenient = codegym.reward_fn(server_address, on_error="none")
    try:
        rewards = lenient(prompts=["p", "p"], completions=[fenced(GOOD)] * 2, task_id=["no-such-task", TASK])
        assert rewards == [None, 1.0]
    finally:
        lenient.close()


def test_failing_programs_are_rewards_never_masked(server_address):
    # `on_error="none"` masks samples the machinery could not score; a program that fails (wrong
    # output, a crash, one that kills its parent) is the model's outcome and scores a number.
    reward = codegym.reward_fn(server_address, on_error="none")
    crash = "1 / 0"
    try:
        rewards = reward(
            prompts=["p"] * 4,
            completions=[fenced(WRONG), fenced(crash), fenced(HOSTILE), fenced(GOOD)],
            task_id=[TASK] * 4,
        )
        assert None not in rewards, rewards
        assert all(r < 1.0 for r in rewards[:3]) and rewards[3] == 1.0
        assert all(s.error is None for s in reward.last)
    finally:
        reward.close()


def _dead_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_stopped_server_raises_after_retries_or_scores_none():
    options = codegym.ClientOptions(timeout=5.0, evaluate_timeout=5.0, retries=2, backoff=0.01)
    reward = codegym.reward_fn(_dead_address(), client=options)
    try:
        with pytest.raises(codegym.CodegymError) as err:
            reward(prompts=["p"], completions=[fenced(GOOD)], task_id=[TASK])
        assert err.value.code.name == "UNAVAILABLE"
    finally:
        reward.close()
    lenient = codegym.reward_fn(_dead_address(), client=options, on_error="none")
    try:
        # The same correct program that scores 1.0 on a live server: masked here, never a 0.
        assert lenient(prompts=["p", "p"], completions=[fenced(GOOD)] * 2, task_id=[TASK] * 2) == [None, None]
        assert all(s.error is not None and s.error.code.name == "UNAVAILABLE" for s in lenient.last)
    finally:
        lenient.close()

    async_reward = codegym.AsyncRewardFunction(_dead_address(), client=options)

    async def run() -> None:
        try:
            await async_reward(prompts=["p"], completions=[fenced(GOOD)], task_id=[TASK])
        finally:
            await async_reward.close()

    with pytest.raises(codegym.CodegymError):
        asyncio.run(run())


def test_reward_fn_needs_a_task_column(server_address):
    reward = codegym.reward_fn(server_address)
    try:
        with pytest.raises(ValueError, match="task_id"):
            reward(prompts=["p"], completions=["x"])
        with pytest.raises(ValueError):
            reward(prompts=["p"], completions=["x", "y"], task_id=[TASK])
        assert reward(prompts=[], completions=[], task_id=[]) == []
    finally:
        reward.close()
