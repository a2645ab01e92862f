"""TRL-style reward functions that score a batch of completions through one `Evaluate` call."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from codegym._errors import CodegymError
from codegym.client import Client, EvalItem

log = logging.getLogger(__name__)


def completion_text(completion: Any) -> str:
    """The text to execute: a string as is; for a chat message list, the last assistant content."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return str(completion.get("content") or "")
    if isinstance(completion, Sequence):
        messages = [m for m in completion if isinstance(m, Mapping)]
        for m in reversed(messages):
            if m.get("role", "assistant") == "assistant":
                return str(m.get("content") or "")
        return ""
    raise TypeError(f"a completion must be a string or a list of chat messages, got {type(completion).__name__}")


class RewardFunction:
    """`reward(prompts, completions, **kwargs) -> list[float]` for TRL's trainers.

    The task of each completion comes from the dataset column `task_column` (TRL passes every extra
    column as a keyword argument, one value per completion). Items the server could not evaluate
    score `error_reward`.
    """

    def __init__(
        self,
        address: str,
        env_id: str = "codegym/Python-v0",
        *,
        task_column: str = "task_id",
        env_kwargs: Mapping[str, Any] | None = None,
        error_reward: float = 0.0,
        timeout: float = 600.0,
    ) -> None:
        self.address = address
        self.env_id = env_id
        self.task_column = task_column
        self.env_kwargs = dict(env_kwargs or {})
        self.error_reward = error_reward
        self._client = Client(address, evaluate_timeout=timeout)
        # TRL logs each reward function under its __name__.
        self.__name__ = f"codegym_{env_id.split('/')[-1]}"

    def __call__(
        self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs: Any
    ) -> list[float]:
        tasks = kwargs.get(self.task_column)
        if tasks is None:
            raise ValueError(f"reward function needs the dataset column {self.task_column!r} in kwargs")
        if len(tasks) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(tasks)} values of {self.task_column!r}")
        if not completions:
            return []
        items = [EvalItem(action=completion_text(c), options={"task_id": str(t)}) for c, t in zip(completions, tasks)]
        results = self._client.evaluate(self.env_id, items, self.env_kwargs)
        rewards: list[float] = []
        for task, result in zip(tasks, results):
            if isinstance(result, CodegymError):
                log.warning("codegym could not evaluate task %s: %s", task, result)
                rewards.append(self.error_reward)
            else:
                rewards.append(result.reward)
        return rewards

    def close(self) -> None:
        self._client.close_channel()


def reward_fn(address: str, env_id: str = "codegym/Python-v0", **options: Any) -> RewardFunction:
    """A TRL reward function backed by a codegym server (see `RewardFunction` for the options)."""
    return RewardFunction(address, env_id, **options)
