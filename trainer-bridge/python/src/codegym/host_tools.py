"""Host tools served by the client: Python functions the sandboxed program calls.

`codegym.make(..., tools={"search": search})` declares each tool to the server at make (its JSON
schema derived from the signature and docstring by `tool_spec`) and serves the calls that arrive on
the session's stream: sync functions on a thread pool, async functions on the client's event loop.
A tool's return value must be JSON-serializable; an exception it raises reaches the program as a
`RuntimeError` carrying `"Type: message"`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any, get_type_hints

from codegym.v1 import env_pb2 as pb

__all__ = ["answer", "answer_async", "tool_spec", "tool_specs"]

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


def tool_spec(name: str, fn: Callable[..., Any]) -> dict[str, Any]:
    """`{"name", "description", "parameters"}` of `fn`: the docstring's first paragraph, and a JSON
    Schema object with one property per parameter (typed from simple annotations; required when it
    has no default)."""
    doc = inspect.getdoc(fn) or ""
    description = doc.split("\n\n", 1)[0].strip()
    try:
        hints = get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable annotations: untyped parameters
        hints = {}
    properties: dict[str, Any] = {}
    required: list[str] = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        prop: dict[str, Any] = {}
        origin = getattr(hints.get(p.name), "__origin__", hints.get(p.name))
        if origin in _JSON_TYPES:
            prop["type"] = _JSON_TYPES[origin]
        properties[p.name] = prop
        if p.default is p.empty:
            required.append(p.name)
    return {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }


def tool_specs(tools: Mapping[str, Callable[..., Any]]) -> list[dict[str, Any]]:
    """The `tools` make kwarg for `tools`."""
    for name, fn in tools.items():
        if not callable(fn):
            raise TypeError(f"tool {name!r} is not callable")
    return [tool_spec(name, fn) for name, fn in tools.items()]


def _result(call: pb.ToolCall, value: Any = None, error: BaseException | None = None) -> pb.ToolResult:
    if error is None:
        try:
            return pb.ToolResult(call_id=call.call_id, result_json=json.dumps(value, allow_nan=False))
        except (TypeError, ValueError) as err:
            error = err
    return pb.ToolResult(call_id=call.call_id, error=f"{type(error).__name__}: {error}")


def answer(tools: Mapping[str, Callable[..., Any]], call: pb.ToolCall) -> pb.ToolResult:
    """Runs one call (on the calling thread; async tools on a private loop)."""
    fn = tools.get(call.name)
    if fn is None:
        return _result(call, error=LookupError(f"unknown tool {call.name!r}"))
    try:
        args, kwargs = json.loads(call.args_json or "[]"), json.loads(call.kwargs_json or "{}")
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = asyncio.run(_await(value))
    except Exception as err:  # noqa: BLE001 - the tool's failure is the program's exception
        return _result(call, error=err)
    return _result(call, value)


async def _await(value: Any) -> Any:
    return await value


async def answer_async(tools: Mapping[str, Callable[..., Any]], call: pb.ToolCall) -> pb.ToolResult:
    """Runs one call for an asyncio client: async tools on the loop, sync ones on its executor."""
    fn = tools.get(call.name)
    if fn is None:
        return _result(call, error=LookupError(f"unknown tool {call.name!r}"))
    try:
        args, kwargs = json.loads(call.args_json or "[]"), json.loads(call.kwargs_json or "{}")
        if inspect.iscoroutinefunction(fn):
            value = await fn(*args, **kwargs)
        else:
            value = await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kwargs))
            if inspect.isawaitable(value):
                value = await value
    except Exception as err:  # noqa: BLE001 - the tool's failure is the program's exception
        return _result(call, error=err)
    return _result(call, value)
