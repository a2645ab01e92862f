"""Sync (`Client`) and asyncio (`AsyncClient`) clients of `codegym.v1.EnvService`.

Both run the calls defined once in `codegym._ops` (each a generator of the RPCs it needs): `Client`
with blocking calls, `AsyncClient` with awaited ones. The session streams (`Session`, `AsyncSession`)
differ in transport only: a request queue and a reader thread, or `grpc.aio`'s stream.

Every unary call has a deadline (`timeout` seconds; `evaluate_timeout` for batch scoring, which runs
programs). Failures raise `CodegymError` with the gRPC status code.
"""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

import grpc

from codegym import _ops as ops
from codegym._errors import CodegymError, from_in_band, from_rpc_error
from codegym._ops import EvalItem, Rpc, StepResult, TaskEntry, eval_request, eval_result, step_result
from codegym._values import decode_value, parse_json_object
from codegym.local import LocalServer, resolve_address
from codegym.options import ClientOptions
from codegym.v1 import env_pb2 as pb
from codegym.v1 import env_pb2_grpc as pb_grpc

__all__ = ["AsyncClient", "AsyncSession", "Client", "EvalItem", "Session", "StepResult", "TaskEntry"]

# Observations of coding envs carry program output; the default 4 MiB is too tight for a batch.
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]


def _session_result(resp: pb.SessionResponse, expected: int, owner: Session | AsyncSession) -> Any:
    """Decodes one `SessionResponse`; remembers the spec on `owner` so steps encode by action space."""
    if resp.request_id != expected:
        raise CodegymError(grpc.StatusCode.INTERNAL, f"response {resp.request_id} for request {expected}", "Session")
    kind = resp.WhichOneof("kind")
    if kind == "error":
        raise from_in_band(resp.error, "Session")
    if kind == "make":
        owner.spec = resp.make.spec
        owner.action_space = resp.make.spec.action_space
        return resp.make.session_id, resp.make.spec
    if kind == "reset":
        return decode_value(resp.reset.observation), parse_json_object(resp.reset.info_json)
    if kind == "step":
        return step_result(resp.step)
    if kind == "close":
        return bool(resp.close.closed)
    raise CodegymError(grpc.StatusCode.INTERNAL, f"unexpected response kind {kind!r}", "Session")


def _resolve_options(
    options: ClientOptions | None, timeout: float | None, evaluate_timeout: float | None
) -> ClientOptions:
    """`options` (default `ClientOptions()`) with the explicit deadlines laid over it."""
    opts = options or ClientOptions()
    if timeout is not None:
        opts = dataclasses.replace(opts, timeout=timeout)
    if evaluate_timeout is not None:
        opts = dataclasses.replace(opts, evaluate_timeout=evaluate_timeout)
    return opts


class Client:
    """Blocking client. Use as a context manager, or call `close_channel()`.

    `options` (a `ClientOptions`) sets deadlines and TLS; `timeout`/`evaluate_timeout` override it.
    """

    def __init__(
        self,
        address: str | LocalServer,
        *,
        timeout: float | None = None,
        evaluate_timeout: float | None = None,
        options: ClientOptions | None = None,
    ) -> None:
        address = resolve_address(address)
        self.address = address
        self.options = _resolve_options(options, timeout, evaluate_timeout)
        self.timeout = self.options.timeout
        self.evaluate_timeout = self.options.evaluate_timeout
        creds = self.options.credentials()
        if creds is None:
            self._channel = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
        else:
            self._channel = grpc.secure_channel(address, creds, options=_CHANNEL_OPTIONS)
        self._stub = pb_grpc.EnvServiceStub(self._channel)

    def _call(self, rpc: Rpc) -> Any:
        timeout = (self.evaluate_timeout if rpc.evaluate else None) or self.timeout
        try:
            return getattr(self._stub, rpc.method)(rpc.request, timeout=timeout)
        except grpc.RpcError as err:
            raise from_rpc_error(err, rpc.method) from None

    # Each call is written once in `codegym._ops`; these run it with blocking calls.
    def list_envs(self) -> list[pb.EnvSpec]:
        return ops.drive(ops.list_envs(), self._call)

    def make(self, env_id: str, **kwargs: Any) -> tuple[str, pb.EnvSpec]:
        """Creates a session; returns `(session_id, spec)`."""
        return ops.drive(ops.make(env_id, kwargs), self._call)

    def reset(
        self, session_id: str, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        return ops.drive(ops.reset(session_id, seed, options), self._call)

    def step(self, session_id: str, action: Any, space: pb.Space | None = None) -> StepResult:
        return ops.drive(ops.step(session_id, action, space), self._call)

    def close(self, session_id: str) -> bool:
        return ops.drive(ops.close(session_id), self._call)

    def evaluate(
        self, env_id: str, items: Sequence[EvalItem], kwargs: Mapping[str, Any] | None = None
    ) -> list[StepResult | CodegymError]:
        """Scores every item in one call; a failed item is a `CodegymError` in its slot."""
        return ops.drive(ops.evaluate(env_id, items, kwargs), self._call)

    def evaluate_stream(
        self, env_id: str, items: Sequence[EvalItem], kwargs: Mapping[str, Any] | None = None
    ) -> Iterator[tuple[int, StepResult | CodegymError]]:
        """Like `evaluate`, but yields `(item index, result)` as each item finishes (completion order),
        so scoring overlaps with whatever the caller does next. Closing the iterator cancels the call."""
        call = self._stub.EvaluateStream(
            eval_request(env_id, items, kwargs), timeout=self.evaluate_timeout or self.timeout
        )
        try:
            for r in call:
                yield r.index, eval_result(r.result)
        except grpc.RpcError as err:
            raise from_rpc_error(err, "EvaluateStream") from None
        finally:
            call.cancel()

    def list_tasks(
        self, env_id: str, kwargs: Mapping[str, Any] | None = None, *, page_size: int = 0
    ) -> list[TaskEntry]:
        """Every task of the env's task set (the one `make(env_id, **kwargs)` draws from), all pages."""
        return ops.drive(ops.list_tasks(env_id, kwargs, page_size), self._call)

    def session(self, timeout: float | None = None) -> Session:
        """A pipelined `Session` stream; `timeout` bounds the whole stream (None: no deadline)."""
        return Session(self._stub, timeout)

    def close_channel(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_channel()


_END = object()


class Session:
    """One env session bound to one bidirectional stream; the server closes it when the stream ends.

    `send_*` queue a request and return its id without waiting (pipelining); `recv()` returns the
    next response in request order. `make`/`reset`/`step`/`close` are send + recv.
    """

    def __init__(self, stub: pb_grpc.EnvServiceStub, timeout: float | None) -> None:
        self._requests: queue.Queue[Any] = queue.Queue()
        self._next_id = 0
        self._pending: list[int] = []
        self._lock = threading.Lock()
        self.action_space: pb.Space | None = None
        self.spec: pb.EnvSpec | None = None
        self._responses = stub.Session(iter(self._requests.get, _END), timeout=timeout)
        self._closed = False
        # Host tools this session serves (set before `make` declares them), and the
        # thread pool their calls run on.
        self.tools: dict[str, Any] = {}
        self._tool_pool: Any = None

    def _send(self, **kind: Any) -> int:
        if self._closed:
            raise CodegymError(grpc.StatusCode.FAILED_PRECONDITION, "session stream is closed", "Session")
        with self._lock:
            rid = self._next_id
            self._next_id += 1
            self._pending.append(rid)
        self._requests.put(pb.SessionRequest(request_id=rid, **kind))
        return rid

    def send_make(self, env_id: str, **kwargs: Any) -> int:
        return self._send(make=ops.make_request(env_id, kwargs))

    def send_reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> int:
        return self._send(reset=ops.reset_request(seed, options))

    def send_step(self, action: Any) -> int:
        return self._send(step=ops.step_request(action, self.action_space))

    def send_close(self) -> int:
        return self._send(close=pb.CloseRequest())

    def recv(self) -> Any:
        """The next response: `(session_id, spec)`, `(obs, info)`, a `StepResult` or a bool."""
        with self._lock:
            if not self._pending:
                raise CodegymError(grpc.StatusCode.FAILED_PRECONDITION, "no request in flight", "Session")
            expected = self._pending.pop(0)
        while True:
            try:
                resp = next(self._responses)
            except StopIteration:
                raise CodegymError(grpc.StatusCode.UNAVAILABLE, "stream ended", "Session") from None
            except grpc.RpcError as err:
                raise from_rpc_error(err, "Session") from None
            if resp.WhichOneof("kind") != "tool_call":
                return _session_result(resp, expected, self)
            self._serve_tool(resp.tool_call)

    def _serve_tool(self, call: pb.ToolCall) -> None:
        """Runs a tool call on the pool; its result goes out as soon as it is ready."""
        from codegym.host_tools import answer

        if self._tool_pool is None:
            self._tool_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="codegym-tool")
        future = self._tool_pool.submit(answer, self.tools, call)

        def reply(f: Future[pb.ToolResult]) -> None:
            if not self._closed:
                self._requests.put(pb.SessionRequest(tool_result=f.result()))

        future.add_done_callback(reply)

    def make(self, env_id: str, **kwargs: Any) -> tuple[str, pb.EnvSpec]:
        self.send_make(env_id, **kwargs)
        return cast("tuple[str, pb.EnvSpec]", self.recv())

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        self.send_reset(seed, options)
        return cast("tuple[Any, dict[str, Any]]", self.recv())

    def step(self, action: Any) -> StepResult:
        self.send_step(action)
        return cast("StepResult", self.recv())

    def close(self) -> None:
        """Ends the stream (the server closes the session). Idempotent."""
        if not self._closed:
            self._closed = True
            self._requests.put(_END)
            if self._tool_pool is not None:
                self._tool_pool.shutdown(wait=False, cancel_futures=True)
            self._responses.cancel()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # Unblocks gRPC's request-consumer thread, which would otherwise wait on the queue forever.
        if not getattr(self, "_closed", True):
            self._requests.put(_END)


class AsyncClient:
    """asyncio client (grpc.aio) with the same methods as `Client`, as coroutines."""

    def __init__(
        self,
        address: str | LocalServer,
        *,
        timeout: float | None = None,
        evaluate_timeout: float | None = None,
        options: ClientOptions | None = None,
    ) -> None:
        address = resolve_address(address)
        self.address = address
        self.options = _resolve_options(options, timeout, evaluate_timeout)
        self.timeout = self.options.timeout
        self.evaluate_timeout = self.options.evaluate_timeout
        creds = self.options.credentials()
        if creds is None:
            self._channel = grpc.aio.insecure_channel(address, options=_CHANNEL_OPTIONS)
        else:
            self._channel = grpc.aio.secure_channel(address, creds, options=_CHANNEL_OPTIONS)
        self._stub = pb_grpc.EnvServiceStub(self._channel)

    async def _call(self, rpc: Rpc) -> Any:
        timeout = (self.evaluate_timeout if rpc.evaluate else None) or self.timeout
        try:
            return await getattr(self._stub, rpc.method)(rpc.request, timeout=timeout)
        except grpc.RpcError as err:
            raise from_rpc_error(err, rpc.method) from None

    # Each call is written once in `codegym._ops`; these run it with awaited calls.
    async def list_envs(self) -> list[pb.EnvSpec]:
        return await ops.adrive(ops.list_envs(), self._call)

    async def make(self, env_id: str, **kwargs: Any) -> tuple[str, pb.EnvSpec]:
        return await ops.adrive(ops.make(env_id, kwargs), self._call)

    async def reset(
        self, session_id: str, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        return await ops.adrive(ops.reset(session_id, seed, options), self._call)

    async def step(self, session_id: str, action: Any, space: pb.Space | None = None) -> StepResult:
        return await ops.adrive(ops.step(session_id, action, space), self._call)

    async def close(self, session_id: str) -> bool:
        return await ops.adrive(ops.close(session_id), self._call)

    async def evaluate(
        self, env_id: str, items: Sequence[EvalItem], kwargs: Mapping[str, Any] | None = None
    ) -> list[StepResult | CodegymError]:
        return await ops.adrive(ops.evaluate(env_id, items, kwargs), self._call)

    async def evaluate_stream(
        self, env_id: str, items: Sequence[EvalItem], kwargs: Mapping[str, Any] | None = None
    ) -> AsyncIterator[tuple[int, StepResult | CodegymError]]:
        """`(item index, result)` as each item finishes (see `Client.evaluate_stream`)."""
        call = self._stub.EvaluateStream(
            eval_request(env_id, items, kwargs), timeout=self.evaluate_timeout or self.timeout
        )
        try:
            async for r in call:
                yield r.index, eval_result(r.result)
        except grpc.RpcError as err:
            raise from_rpc_error(err, "EvaluateStream") from None
        finally:
            call.cancel()

    async def list_tasks(
        self, env_id: str, kwargs: Mapping[str, Any] | None = None, *, page_size: int = 0
    ) -> list[TaskEntry]:
        """Every task of the env's task set, all pages (see `Client.list_tasks`)."""
        return await ops.adrive(ops.list_tasks(env_id, kwargs, page_size), self._call)

    def session(self, timeout: float | None = None) -> AsyncSession:
        return AsyncSession(self._stub, timeout)

    async def close_channel(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close_channel()


class AsyncSession:
    """The asyncio form of `Session`: `await send_*()` pipelines, `await recv()` reads in order."""

    def __init__(self, stub: pb_grpc.EnvServiceStub, timeout: float | None) -> None:
        self._call = stub.Session(timeout=timeout)
        self._next_id = 0
        self._pending: list[int] = []
        self.action_space: pb.Space | None = None
        self.spec: pb.EnvSpec | None = None
        self._closed = False
        # Host tools this session serves, their running calls, one writer at a time.
        self.tools: dict[str, Any] = {}
        self._tool_tasks: set[Any] = set()
        self._write_lock: Any = None

    async def _send(self, **kind: Any) -> int:
        rid = self._next_id
        self._next_id += 1
        self._pending.append(rid)
        try:
            await self._write(pb.SessionRequest(request_id=rid, **kind))
        except grpc.RpcError as err:
            raise from_rpc_error(err, "Session") from None
        return rid

    async def _write(self, request: pb.SessionRequest) -> None:
        if self._write_lock is None:
            self._write_lock = asyncio.Lock()
        async with self._write_lock:
            await self._call.write(request)

    async def _serve_tool(self, call: pb.ToolCall) -> None:
        """Answers a tool call (async tools on this loop) and sends the result."""
        from codegym.host_tools import answer_async

        result = await answer_async(self.tools, call)
        if not self._closed:
            try:
                await self._write(pb.SessionRequest(tool_result=result))
            except grpc.RpcError:
                pass  # the stream is gone: nobody waits for the result

    async def send_make(self, env_id: str, **kwargs: Any) -> int:
        return await self._send(make=ops.make_request(env_id, kwargs))

    async def send_reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> int:
        return await self._send(reset=ops.reset_request(seed, options))

    async def send_step(self, action: Any) -> int:
        return await self._send(step=ops.step_request(action, self.action_space))

    async def send_close(self) -> int:
        return await self._send(close=pb.CloseRequest())

    async def recv(self) -> Any:
        if not self._pending:
            raise CodegymError(grpc.StatusCode.FAILED_PRECONDITION, "no request in flight", "Session")
        expected = self._pending.pop(0)
        while True:
            try:
                resp = await self._call.read()
            except grpc.RpcError as err:
                raise from_rpc_error(err, "Session") from None
            if resp is grpc.aio.EOF:
                raise CodegymError(grpc.StatusCode.UNAVAILABLE, "stream ended", "Session")
            if resp.WhichOneof("kind") != "tool_call":
                return _session_result(resp, expected, self)
            task = asyncio.get_running_loop().create_task(self._serve_tool(resp.tool_call))
            self._tool_tasks.add(task)
            task.add_done_callback(self._tool_tasks.discard)

    async def make(self, env_id: str, **kwargs: Any) -> tuple[str, pb.EnvSpec]:
        await self.send_make(env_id, **kwargs)
        return cast("tuple[str, pb.EnvSpec]", await self.recv())

    async def reset(
        self, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        await self.send_reset(seed, options)
        return cast("tuple[Any, dict[str, Any]]", await self.recv())

    async def step(self, action: Any) -> StepResult:
        await self.send_step(action)
        return cast("StepResult", await self.recv())

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._call.cancel()
