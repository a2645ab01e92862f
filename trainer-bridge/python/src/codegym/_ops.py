"""What the sync and async clients share: the messages' Python forms, their codecs, and every unary
call written once, as a generator that yields the `Rpc`s it needs and returns the result.

`Client` drives these generators with blocking calls (`drive`), `AsyncClient` with awaited ones
(`adrive`): one definition of each call's requests and decoding, two transports. The reward
functions' retry policy is written the same way (`codegym.reward`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from codegym._contract import encode_action
from codegym._errors import CodegymError, from_in_band
from codegym._values import decode_value, parse_json_object
from codegym.v1 import env_pb2 as pb

T = TypeVar("T")
Y = TypeVar("Y")


@dataclass(frozen=True)
class StepResult:
    """Gymnasium's step tuple, also unpackable as `obs, reward, terminated, truncated, info`."""

    observation: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]

    def __iter__(self) -> Iterator[Any]:
        return iter((self.observation, self.reward, self.terminated, self.truncated, self.info))


@dataclass(frozen=True)
class EvalItem:
    """One independent reset + step for `evaluate`."""

    action: Any
    options: Mapping[str, Any] | None = None
    seed: int | None = None


@dataclass(frozen=True)
class TaskEntry:
    """One task of a server's task set (`ListTasks`).

    `messages` is the opening of a conversation about the task exactly as `codegym rollout` sends it
    (system prompt + rendered task template), rendered by the server: the one source of the prompts.
    """

    id: str
    prompt: str
    messages: list[dict[str, str]]
    metadata: dict[str, Any]
    completion_prefix: str | None = None
    # The language solutions are written in (SandboxFusion's names: python, cpp, nodejs, ...).
    language: str = "python"


def task_entry(t: pb.TaskEntry) -> TaskEntry:
    return TaskEntry(
        id=t.id,
        prompt=t.prompt,
        messages=json.loads(t.messages_json) if t.messages_json else [],
        metadata=parse_json_object(t.metadata_json),
        completion_prefix=t.completion_prefix if t.HasField("completion_prefix") else None,
        language=t.language or "python",
    )


def dumps(obj: Mapping[str, Any] | None) -> str:
    return json.dumps(dict(obj)) if obj else ""


def step_result(resp: pb.StepResponse) -> StepResult:
    return StepResult(
        decode_value(resp.observation),
        float(resp.reward),
        bool(resp.terminated),
        bool(resp.truncated),
        parse_json_object(resp.info_json),
    )


def eval_request(env_id: str, items: Iterable[EvalItem], kwargs: Mapping[str, Any] | None) -> pb.EvaluateRequest:
    return pb.EvaluateRequest(
        env_id=env_id,
        kwargs_json=dumps(kwargs),
        items=[
            pb.EvaluateItem(seed=i.seed, options_json=dumps(i.options), action=encode_action(i.action)) for i in items
        ],
    )


def eval_result(r: pb.EvaluateResult) -> StepResult | CodegymError:
    return from_in_band(r.error, "Evaluate") if r.HasField("error") else step_result(r.step)


def eval_results(resp: pb.EvaluateResponse) -> list[StepResult | CodegymError]:
    return [eval_result(r) for r in resp.results]


@dataclass(frozen=True)
class Rpc:
    """One unary call an operation needs: the method's name, its request, and whether it scores
    programs (and so gets the evaluate deadline)."""

    method: str
    request: Any
    evaluate: bool = False


# An operation: yields the calls it needs, receives each one's response, returns its result.
Op = Generator[Rpc, Any, T]


def drive(op: Generator[Y, Any, T], handle: Callable[[Y], Any]) -> T:
    """Runs `op` to its result, answering each yielded value with `handle`; a `CodegymError` that
    `handle` raises is thrown into `op` (which may catch it, as the retry policy does)."""
    reply: Any = None
    error: CodegymError | None = None
    while True:
        try:
            wanted = op.send(reply) if error is None else op.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            reply, error = handle(wanted), None
        except CodegymError as err:
            reply, error = None, err


async def adrive(op: Generator[Y, Any, T], handle: Callable[[Y], Awaitable[Any]]) -> T:
    """`drive` with an asynchronous `handle`."""
    reply: Any = None
    error: CodegymError | None = None
    while True:
        try:
            wanted = op.send(reply) if error is None else op.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            reply, error = await handle(wanted), None
        except CodegymError as err:
            reply, error = None, err


def make_request(env_id: str, kwargs: Mapping[str, Any]) -> pb.MakeRequest:
    """The `Make` request, unary or in a session stream."""
    return pb.MakeRequest(env_id=env_id, kwargs_json=dumps(kwargs))


def reset_request(seed: int | None, options: Mapping[str, Any] | None, session_id: str = "") -> pb.ResetRequest:
    """The `Reset` request (in a session stream, `session_id` is the stream's and left empty)."""
    return pb.ResetRequest(session_id=session_id, seed=seed, options_json=dumps(options))


def step_request(action: Any, space: pb.Space | None, session_id: str = "") -> pb.StepRequest:
    """The `Step` request; the action is encoded by the action space when known."""
    return pb.StepRequest(session_id=session_id, action=encode_action(action, space))


def list_envs() -> Op[list[pb.EnvSpec]]:
    resp = yield Rpc("ListEnvs", pb.ListEnvsRequest())
    return list(resp.envs)


def make(env_id: str, kwargs: Mapping[str, Any]) -> Op[tuple[str, pb.EnvSpec]]:
    resp = yield Rpc("Make", make_request(env_id, kwargs))
    return resp.session_id, resp.spec


def reset(session_id: str, seed: int | None, options: Mapping[str, Any] | None) -> Op[tuple[Any, dict[str, Any]]]:
    resp = yield Rpc("Reset", reset_request(seed, options, session_id))
    return decode_value(resp.observation), parse_json_object(resp.info_json)


def step(session_id: str, action: Any, space: pb.Space | None) -> Op[StepResult]:
    resp = yield Rpc("Step", step_request(action, space, session_id))
    return step_result(resp)


def close(session_id: str) -> Op[bool]:
    resp = yield Rpc("Close", pb.CloseRequest(session_id=session_id))
    return bool(resp.closed)


def evaluate(
    env_id: str, items: Sequence[EvalItem], kwargs: Mapping[str, Any] | None
) -> Op[list[StepResult | CodegymError]]:
    resp = yield Rpc("Evaluate", eval_request(env_id, items, kwargs), evaluate=True)
    return eval_results(resp)


def list_tasks(env_id: str, kwargs: Mapping[str, Any] | None, page_size: int) -> Op[list[TaskEntry]]:
    """Every page of `ListTasks`."""
    tasks: list[TaskEntry] = []
    token = ""
    while True:
        req = pb.ListTasksRequest(env_id=env_id, kwargs_json=dumps(kwargs), page_size=page_size, page_token=token)
        resp = yield Rpc("ListTasks", req)
        tasks.extend(task_entry(t) for t in resp.tasks)
        token = resp.next_page_token
        if not token:
            return tasks
