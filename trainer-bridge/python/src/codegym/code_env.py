"""`CodeEnvironment`: a code environment as agent frameworks use one.

The shape of msgflux's code environments (`BaseCodeEnvironment`): `env(code, vars=...)` returns an
`ExecutionResult` with the value of the last expression, the variables after the run and the
exception that ended it; `acall` for asyncio; `reset`, `shutdown`, `register_tool(name, func)` and
`register_tools`. Behind it is one `codegym/Code-v0` episode on the server, in `session` mode by
default (variables persist across calls, like a notebook), every program in the server's sandbox.

    with codegym.CodeEnvironment("127.0.0.1:50051") as env:
        env("import math\\nr = 2")
        env("math.pi * r ** 2").return_value           # 12.566...
        env("len(doc.split())", vars={"doc": text})    # injected as a global first
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from codegym.client import Client
from codegym.env import run_python_action
from codegym.host_tools import tool_specs
from codegym.options import ClientOptions

__all__ = ["CodeEnvironment", "ExecutionResult"]

# The task of every episode (required by `reset`; never scored: the env is made with `grade: False`).
_FREE_TASK = {
    "id": "code-environment",
    "prompt": "",
    "reward": {"version": 1, "components": [{"type": "exit_code"}]},
}


@dataclass
class ExecutionResult:
    """One run's outcome, as an agent reads it.

    `return_value` is the JSON value of the program's last expression statement (None when the last
    statement is not an expression; check `has_return_value`); when it has no JSON form,
    `return_value_repr` holds its capped `repr`. `variables` are the JSON-serializable top-level
    names (`dropped_variables` says which were left out and why). `error` is `"Type: message"` of
    the exception (or limit) that ended the program, with `error_type` the type alone.
    """

    success: bool
    output: str
    stderr: str
    return_value: Any = None
    has_return_value: bool = False
    return_value_repr: str | None = None
    variables: dict[str, Any] = field(default_factory=dict)
    dropped_variables: list[dict[str, str]] = field(default_factory=list)
    error: str | None = None
    error_type: str | None = None
    exit_code: int | None = None
    timed_out: bool = False
    memory_exceeded: bool = False
    execution_time_ms: int = 0
    memory_used_bytes: int = 0

    @classmethod
    def from_execution(cls, e: Mapping[str, Any], info: Mapping[str, Any]) -> ExecutionResult:
        err = e.get("error")
        unrep = e.get("return_value_unrepresentable")
        return cls(
            success=bool(e.get("success")),
            output=str(e.get("stdout", "")),
            stderr=str(e.get("stderr", "")),
            return_value=e.get("return_value"),
            has_return_value=bool(e.get("has_return_value")),
            return_value_repr=unrep["repr"] if unrep else None,
            variables=dict(e.get("variables") or {}),
            dropped_variables=list(e.get("dropped_variables") or []),
            error=f"{err['type_name']}: {err['message']}" if err else None,
            error_type=err["type_name"] if err else None,
            exit_code=e.get("exit_code"),
            timed_out=bool(e.get("timed_out")),
            memory_exceeded=bool(e.get("memory_exceeded")),
            execution_time_ms=int(info.get("execution_time_ms", e.get("wall_ms", 0)) or 0),
            memory_used_bytes=int(info.get("memory_used_bytes", e.get("peak_rss_bytes", 0)) or 0),
        )


class CodeEnvironment:
    """A sandboxed Python environment on a codegym server, callable with code.

    Args:
        address: `host:port` of `codegym serve`.
        mode: `"session"` (default: one interpreter, variables persist across calls) or `"script"`
            (a fresh process per call; `vars` of `reset` are set again in every run).
        variables: Report the top-level variables after each call (default True).
        timeout: Wall-clock limit of each call in seconds (can only lower the server's limit).
        client: `ClientOptions` or a shared `Client`.
        env_kwargs: More `make` kwargs of `codegym/Code-v0` (e.g. `limits`, `tool_limits`).
        tools: Host tools, `{name: function}`: inside the sandbox each is a Python function whose
            calls run here (see `codegym.host_tools`).
    """

    def __init__(
        self,
        address: str = "127.0.0.1:50051",
        *,
        mode: str = "session",
        variables: bool = True,
        timeout: float | None = None,
        client: Client | ClientOptions | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        tools: Mapping[str, Callable[..., Any]] | None = None,
    ) -> None:
        # Ungraded (`grade: False`): the façade runs code, nothing scores it or ends the episode.
        kwargs: dict[str, Any] = {"mode": mode, "variables": variables, "grade": False, "max_episode_steps": 1 << 30}
        if timeout is not None:
            ms = max(1, int(timeout * 1000))
            kwargs["limits"] = {"wall_ms": ms, "cpu_ms": ms}
        kwargs.update(env_kwargs or {})
        if isinstance(client, Client):
            self._client, self._owns = client, False
        else:
            self._client, self._owns = Client(address, options=client), True
        self._kwargs = kwargs
        self._tools: dict[str, Callable[..., Any]] = dict(tools or {})
        self._lock = threading.Lock()  # one call at a time on the session's stream
        self._closed = False
        self._session: Any = None
        try:
            self._open()
        except BaseException:
            self.shutdown()
            raise

    def _open(self) -> None:
        """A new session made with the current tools, reset."""
        session = self._client.session()
        kwargs = dict(self._kwargs)
        if self._tools:
            kwargs["tools"] = tool_specs(self._tools)
            session.tools = self._tools
        self._session = session
        session.make("codegym/Code-v0", **kwargs)
        self.reset()

    def register_tool(self, name: str | Callable[..., Any], func: Callable[..., Any] | None = None) -> None:
        """Adds a host tool (its schema from the signature and docstring): msgflux's
        `register_tool("name", func)`, or a bare `register_tool(func)` under the function's own
        name. Tools are declared when the session is made, so this starts a fresh session: the
        namespace is reset."""
        if isinstance(name, str) and callable(func):
            tool_name, tool = name, func
        elif callable(name) and func is None:
            tool_name, tool = name.__name__, name
        else:
            raise TypeError("register_tool takes (name: str, func: Callable) or (func: Callable)")
        self.register_tools({tool_name: tool})

    def register_tools(self, tools: Mapping[str, Callable[..., Any]]) -> None:
        """Adds several host tools at once (msgflux's `register_tools`), starting one fresh session."""
        self._tools.update(tools)
        with self._lock:
            if self._session is not None:
                self._session.close()
        self._open()

    @property
    def tools(self) -> dict[str, Callable[..., Any]]:
        """The registered host tools by name."""
        return dict(self._tools)

    def __call__(
        self, action: str, *, timeout: float | None = None, vars: Mapping[str, Any] | None = None
    ) -> ExecutionResult:
        """Runs the code `action`; `vars` become global names first (session mode: in the live
        namespace). `timeout` is msgflux's per-call limit: the session's limits are fixed when it is
        made (the constructor's `timeout`), so a per-call value is refused rather than ignored."""
        if timeout is not None:
            raise ValueError(
                "CodeEnvironment limits every call by the constructor's `timeout`; a per-call timeout is not supported"
            )
        call = run_python_action({"code": action, "vars": dict(vars) if vars else None})
        with self._lock:
            result = self._session.step(call)
        return ExecutionResult.from_execution(result.observation, result.info)

    async def acall(
        self, action: str, *, timeout: float | None = None, vars: Mapping[str, Any] | None = None
    ) -> ExecutionResult:
        """`__call__` for asyncio: the blocking round trip runs on a worker thread."""
        return await asyncio.to_thread(self.__call__, action, timeout=timeout, vars=vars)

    def reset(self, vars: Mapping[str, Any] | None = None) -> None:
        """A fresh namespace (a new interpreter in session mode), with `vars` set in it."""
        options: dict[str, Any] = {"task": _FREE_TASK}
        if vars:
            options["vars"] = dict(vars)
        with self._lock:
            self._session.reset(options=options)

    def shutdown(self) -> None:
        """Ends the session (idempotent)."""
        if not self._closed:
            self._closed = True
            if self._session is not None:
                self._session.close()
            if self._owns:
                self._client.close_channel()

    def __enter__(self) -> CodeEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
