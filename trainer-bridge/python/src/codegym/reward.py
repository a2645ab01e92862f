"""TRL-style reward functions that score a batch of completions through one `Evaluate` call.

`RewardFunction` (sync) and `AsyncRewardFunction` (asyncio; TRL runs async reward functions
concurrently) share one pipeline:

1. the completion's text (a string, or the last assistant message of a chat completion);
2. the program extracted by `codegym.extract`, the rules the server applies to text actions:
   `code_block` (the first Python fenced block outside `<think>` reasoning; none: an empty program),
   `raw` (the whole text without its reasoning, for HumanEval-style continuations) or `auto` (a block
   if there is one, else the text without its reasoning);
3. the completion prefix prepended (HumanEval continuation of the prompt), from the
   `completion_prefix` column or the inline task's `completion_prefix`;
4. sent as a `run_python` tool call, with the task as `task_id` (column `task_id`) or inline
   (a task dict, or its JSON text, in column `task`).

Failures are never a silent reward: retryable errors (UNAVAILABLE, RESOURCE_EXHAUSTED, connection
errors) are retried with exponential backoff, then the call raises `CodegymError`, or, with
`on_error="none"`, the failed samples score `None`: TRL's way to mask a sample. Since TRL 1.6,
`GRPOTrainer` and `RLOOTrainer` leave a completion for which every reward function returned `None`
out of its group's baseline and give it advantage 0 (older TRL summed the `None` to a reward of 0:
keep `raise` there). A failing program is no failure: it scores its reward (often 0), never `None`.
An export's masked rows follow the same rule (`codegym export --on-infra-error mask`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import grpc

from codegym._contract import REWARD_BREAKDOWN, RUN_PYTHON, SOLVED, tool_call
from codegym._errors import CodegymError
from codegym._ops import adrive, drive
from codegym.client import AsyncClient, Client, EvalItem, StepResult
from codegym.extract import answer, extract
from codegym.local import LocalServer, resolve_address
from codegym.options import ClientOptions

__all__ = [
    "AsyncRewardFunction",
    "RewardFunction",
    "ScoredSample",
    "async_reward_fn",
    "completion_text",
    "extract_program",
    "reward_fn",
    "strip_think",
]

log = logging.getLogger(__name__)

ExtractMode = Literal["code_block", "raw", "auto"]
OnError = Literal["raise", "none"]

RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})


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


# `<think>...</think>` reasoning removed (the same rules as the server's; see `codegym.extract`).
strip_think = answer


def extract_program(text: str, mode: ExtractMode = "code_block", *, think: bool = True) -> str:
    """The program in model text (see the module docs for the modes); `think=False` keeps the
    reasoning of a `raw` program (block extraction always skips reasoning, as the server does)."""
    if mode == "raw":
        return answer(text) if think else text
    if mode == "auto":
        return extract(text, "auto") or ""
    if mode == "code_block":
        return extract(text, "fenced") or ""
    raise ValueError(f"unknown extract mode {mode!r} (code_block, raw or auto)")


@dataclass
class ScoredSample:
    """What happened to one completion: the reward (None when it failed) and its details."""

    reward: float | None
    program: str
    task: str
    solved: bool = False
    breakdown: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    error: CodegymError | None = None


def _task_options(task_id: Any, task: Any) -> tuple[dict[str, Any], str, str]:
    """Reset options, a display name and the inline task's completion prefix."""
    if task is not None:
        spec = json.loads(task) if isinstance(task, str) else dict(task)
        return {"task": spec}, str(spec.get("id", "<inline>")), str(spec.get("completion_prefix") or "")
    if task_id is None:
        raise ValueError("each sample needs a task: a `task_id` or an inline `task`")
    return {"task_id": str(task_id)}, str(task_id), ""


class _Base:
    """The pipeline shared by the sync and async reward functions."""

    def __init__(
        self,
        address: str | LocalServer,
        env_id: str = "codegym/Code-v0",
        *,
        task_column: str = "task_id",
        inline_task_column: str = "task",
        prefix_column: str | None = "completion_prefix",
        extract: ExtractMode = "code_block",
        think: bool = True,
        env_kwargs: Mapping[str, Any] | None = None,
        client: ClientOptions | None = None,
        on_error: OnError = "raise",
        error_reward: float | None = None,
        timeout: float | None = None,
        log_components: bool = True,
    ) -> None:
        if on_error not in ("raise", "none"):
            raise ValueError(f"on_error must be 'raise' or 'none', got {on_error!r}")
        if extract not in ("code_block", "raw", "auto"):
            raise ValueError(f"unknown extract mode {extract!r} (code_block, raw or auto)")
        self.address = resolve_address(address)
        self.env_id = env_id
        self.task_column = task_column
        self.inline_task_column = inline_task_column
        self.prefix_column = prefix_column
        self.extract = extract
        self.think = think
        # A reward is all a reward function reads: the server skips the run that only makes an
        # observation (a unit-test task then runs once in the sandbox, for the same reward).
        self.env_kwargs = {"observe": False, **(env_kwargs or {})}
        self.options = client or ClientOptions()
        if timeout is not None:
            self.options = dataclasses.replace(self.options, evaluate_timeout=timeout)
        self.on_error = on_error
        self.error_reward = error_reward
        self.log_components = log_components
        # Every sample of the last call, for logging (reward breakdown, solved, execution).
        self.last: list[ScoredSample] = []
        # TRL logs each reward function under its __name__.
        self.__name__ = f"codegym_{env_id.split('/')[-1]}"

    def _prepare(
        self, completions: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[list[EvalItem], list[ScoredSample]]:
        n = len(completions)
        ids = kwargs.get(self.task_column)
        inline = kwargs.get(self.inline_task_column)
        if ids is None and inline is None:
            raise ValueError(
                f"reward function needs the dataset column {self.task_column!r} (task ids) "
                f"or {self.inline_task_column!r} (inline tasks) in kwargs"
            )
        for name, column in ((self.task_column, ids), (self.inline_task_column, inline)):
            if column is not None and len(column) != n:
                raise ValueError(f"{n} completions but {len(column)} values of {name!r}")
        prefixes = kwargs.get(self.prefix_column) if self.prefix_column else None
        items: list[EvalItem] = []
        samples: list[ScoredSample] = []
        for i, completion in enumerate(completions):
            task_inline = inline[i] if inline is not None else None
            options, name, inline_prefix = _task_options(ids[i] if ids is not None else None, task_inline or None)
            program = extract_program(completion_text(completion), self.extract, think=self.think)
            prefix = str(prefixes[i] or "") if prefixes is not None else inline_prefix
            program = prefix + program
            action = tool_call(RUN_PYTHON, code=program)
            items.append(EvalItem(action=action, options=options))
            samples.append(ScoredSample(reward=None, program=program, task=name))
        return items, samples

    def _settle(
        self, samples: list[ScoredSample], results: Sequence[StepResult | CodegymError], pending: list[int]
    ) -> list[int]:
        """Records results; returns the indices whose failure is retryable."""
        retry: list[int] = []
        for i, result in zip(pending, results):
            sample = samples[i]
            if isinstance(result, CodegymError):
                sample.error = result
                if result.code in RETRYABLE:
                    retry.append(i)
                continue
            sample.error = None
            sample.reward = float(result.reward)
            sample.solved = bool(result.info.get(SOLVED, result.terminated))
            sample.breakdown = dict(result.info.get(REWARD_BREAKDOWN) or {})
            sample.info = dict(result.info)
        return retry

    def _finish(self, samples: list[ScoredSample], kwargs: Mapping[str, Any]) -> list[float | None]:
        self.last = samples
        failed = [s for s in samples if s.error is not None]
        if failed:
            if self.error_reward is not None:
                for s in failed:
                    log.warning(
                        "codegym could not evaluate task %s (scored %s): %s", s.task, self.error_reward, s.error
                    )
                    s.reward = self.error_reward
            elif self.on_error == "raise":
                first = failed[0]
                raise CodegymError(
                    first.error.code,  # type: ignore[union-attr]
                    f"{len(failed)} of {len(samples)} completions could not be scored "
                    f"(first: task {first.task}: {first.error})",
                    "Evaluate",
                )
            else:
                for s in failed:
                    log.warning("codegym could not evaluate task %s (reward None): %s", s.task, s.error)
        if self.log_components:
            self._log(samples, kwargs)
        return [s.reward for s in samples]

    def _log(self, samples: list[ScoredSample], kwargs: Mapping[str, Any]) -> None:
        """Per-sample columns and mean metrics through TRL's `log_extra` / `log_metric` when given."""
        log_extra: Callable[[str, list[Any]], None] | None = kwargs.get("log_extra")
        log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
        if log_extra is not None:
            log_extra("codegym_solved", [s.solved for s in samples])
            names = sorted({k for s in samples for k, v in s.breakdown.items() if isinstance(v, (int, float))})
            for name in names:
                log_extra(f"codegym_{name}", [s.breakdown.get(name) for s in samples])
        if log_metric is not None and samples:
            log_metric("codegym/solved_rate", sum(s.solved for s in samples) / len(samples))
            log_metric("codegym/error_rate", sum(s.error is not None for s in samples) / len(samples))

    def _failed_call(self, samples: list[ScoredSample], pending: list[int], err: CodegymError) -> None:
        for i in pending:
            samples[i].error = err

    def _score(
        self, completions: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> Generator[list[EvalItem] | float, Any, list[float | None]]:
        """The scoring of a batch and its retry policy, written once: yields a batch of items to
        evaluate (and receives their results, or has the call's `CodegymError` thrown in) or a delay
        in seconds to wait; returns the rewards. The sync and async functions drive it."""
        if not completions:
            return []
        items, samples = self._prepare(completions, kwargs)
        pending = list(range(len(items)))
        for attempt in range(self.options.retries + 1):
            try:
                results = yield [items[i] for i in pending]
            except CodegymError as err:
                self._failed_call(samples, pending, err)
                if err.code not in RETRYABLE:
                    break
            else:
                pending = self._settle(samples, results, pending)
            if not pending or attempt == self.options.retries:
                break
            yield self.options.delay(attempt)
        return self._finish(samples, kwargs)


class RewardFunction(_Base):
    """`reward(prompts, completions, **columns) -> list[float | None]` for TRL's trainers.

    Args:
        address: `host:port` of `codegym serve`, or a running `LocalServer`.
        env_id: The coding env scoring the completions.
        task_column: Dataset column of task ids (TRL passes every column as a keyword argument).
        inline_task_column: Dataset column of inline tasks (a task dict or its JSON text).
        prefix_column: Column of completion prefixes (HumanEval-style continuation); None: only
            inline tasks' own `completion_prefix` applies.
        extract: How the program is found in the completion: `code_block`, `raw` or `auto`.
        think: In `raw` mode, drop `<think>...</think>` reasoning (block extraction always skips it).
        env_kwargs: Kwargs of the coding env (e.g. `{"tasks": "builtin:examples"}`). `observe`
            defaults to False here: the program runs only as its reward needs (no observation is
            read), for the same reward; `{"observe": True}` runs it for its observation too.
        client: Connection options (deadlines, TLS, retries and backoff).
        on_error: `raise` (default): a batch with a sample that cannot be scored (the server
            unavailable after the retries, its sandbox failing, an unknown task) raises
            `CodegymError`. `none`: that sample scores None, which TRL (>= 1.6) masks: out of its
            group's baseline, advantage 0. Beside other reward functions, None masks only this
            function's term. A failing program is an outcome and always scores a number.
        error_reward: If set, a sample that cannot be scored scores this (explicit opt-in; logged).
        timeout: Shorthand for `ClientOptions(evaluate_timeout=...)`.
        log_components: Log `solved` and the reward breakdown through TRL's `log_extra`/`log_metric`.

    After each call, `last` holds a `ScoredSample` per completion (program, reward breakdown, info).
    """

    def __init__(self, address: str | LocalServer, env_id: str = "codegym/Code-v0", **options: Any) -> None:
        super().__init__(address, env_id, **options)
        self._client = Client(address, options=self.options)

    def __call__(
        self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs: Any
    ) -> list[float | None]:
        def answer(wanted: list[EvalItem] | float) -> Any:
            if isinstance(wanted, list):
                return self._client.evaluate(self.env_id, wanted, self.env_kwargs)
            time.sleep(wanted)
            return None

        return drive(self._score(completions, kwargs), answer)

    def close(self) -> None:
        """Closes the gRPC channel."""
        self._client.close_channel()


class AsyncRewardFunction(_Base):
    """The asyncio form of `RewardFunction` (same options): `await reward(prompts, completions, ...)`.

    TRL (>= 1.x) awaits async reward functions (callable instances with an `async __call__` included)
    on its own event loop, concurrently with other reward functions. The channel is created lazily on
    the loop of the first call.
    """

    def __init__(self, address: str | LocalServer, env_id: str = "codegym/Code-v0", **options: Any) -> None:
        super().__init__(address, env_id, **options)
        self._client: AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _client_here(self) -> AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = AsyncClient(self.address, options=self.options)
            self._loop = loop
        return self._client

    async def __call__(
        self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs: Any
    ) -> list[float | None]:
        client = self._client_here() if completions else None

        async def answer(wanted: list[EvalItem] | float) -> Any:
            if isinstance(wanted, list):
                assert client is not None  # a batch is only asked for when there are completions
                return await client.evaluate(self.env_id, wanted, self.env_kwargs)
            await asyncio.sleep(wanted)
            return None

        return await adrive(self._score(completions, kwargs), answer)

    async def close(self) -> None:
        """Closes the gRPC channel."""
        if self._client is not None:
            await self._client.close_channel()
            self._client = None


def reward_fn(address: str | LocalServer, env_id: str = "codegym/Code-v0", **options: Any) -> RewardFunction:
    """A TRL reward function backed by a codegym server (see `RewardFunction` for the options)."""
    return RewardFunction(address, env_id, **options)


def async_reward_fn(address: str | LocalServer, env_id: str = "codegym/Code-v0", **options: Any) -> AsyncRewardFunction:
    """An asyncio TRL reward function backed by a codegym server (see `RewardFunction`)."""
    return AsyncRewardFunction(address, env_id, **options)
