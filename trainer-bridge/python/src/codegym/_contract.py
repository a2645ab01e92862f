"""The coding envs' contract with their clients: info keys, tool-call actions and their fields.

The Rust crate `env-core` defines it once (`env_core::contract`) and checks it into
`env-core/contract.json`; `tests/test_contract.py` proves this module equal to that file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from codegym._values import encode_value
from codegym.v1 import env_pb2 as pb

VERSION = 2

# Keys of the info a coding env's reset and step return.
SOLVED = "solved"
TASK_ID = "task_id"
LANGUAGE = "language"
REWARD_BREAKDOWN = "reward_breakdown"
STEP = "step"
MODE = "mode"
EXECUTION_TIME_MS = "execution_time_ms"
MEMORY_USED_BYTES = "memory_used_bytes"
DATA_CONTEXT = "data_context"
CACHE_HIT = "cache_hit"
PROVENANCE = "provenance"
INFO_KEYS: tuple[str, ...] = (
    SOLVED,
    TASK_ID,
    LANGUAGE,
    REWARD_BREAKDOWN,
    STEP,
    MODE,
    EXECUTION_TIME_MS,
    MEMORY_USED_BYTES,
    DATA_CONTEXT,
    CACHE_HIT,
    PROVENANCE,
)

# A tool call is a JSON object naming its tool under TOOL_KEY, with the tool's fields.
TOOL_KEY = "tool"
RUN_PYTHON = "run_python"
RUN_CODE = "run_code"
WRITE_FILE = "write_file"
READ_FILE = "read_file"

# Each tool's (required fields, optional fields).
TOOLS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    RUN_PYTHON: (("code",), ("vars", "variables")),
    RUN_CODE: (("code", "language"), ()),
    WRITE_FILE: (("path", "content"), ()),
    READ_FILE: (("path",), ()),
}

# The repository env's tools (`codegym/Repo-v0`); every tool name is distinct across both tables,
# so a call's shape follows its name whichever env it goes to.
BASH = "bash"
VIEW = "view"
CREATE = "create"
STR_REPLACE = "str_replace"
SUBMIT = "submit"
REPO_TOOLS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    BASH: (("command",), ()),
    VIEW: (("path",), ("start", "end")),
    CREATE: (("path", "content"), ()),
    STR_REPLACE: (("path", "old", "new"), ()),
    SUBMIT: ((), ()),
}
_SHAPES = {**TOOLS, **REPO_TOOLS}


def tool_call(tool: str, **fields: Any) -> pb.Value:
    """The action of a call of `tool` (fields left None are left out), checked against its shape:
    `tool_call("run_python", code="print(1)")`."""
    return tool_call_value({TOOL_KEY: tool, **{k: v for k, v in fields.items() if v is not None}})


def tool_call_value(call: Mapping[str, Any]) -> pb.Value:
    """A tool-call mapping (`{"tool": ..., ...fields}`) as the one action shape the server accepts
    (a JSON `Value`); an unknown tool, or a missing or unknown field, is a `ValueError`."""
    tool = call.get(TOOL_KEY)
    if tool not in _SHAPES:
        raise ValueError(
            f"unknown tool {tool!r}: the coding envs' tools are {', '.join(TOOLS)}; "
            f"the repository env's are {', '.join(REPO_TOOLS)}"
        )
    required, optional = _SHAPES[tool]
    fields = set(call) - {TOOL_KEY}
    missing = [f for f in required if f not in fields]
    unknown = sorted(fields - set(required) - set(optional))
    if missing or unknown:
        raise ValueError(
            f"a {tool} call needs {', '.join(required) or 'no field'}"
            + (f" and may have {', '.join(optional)}" if optional else "")
            + f" (missing: {missing or 'none'}, unknown: {unknown or 'none'})"
        )
    return pb.Value(json=json.dumps(dict(call)))


def parse_tool_call(text: str) -> Mapping[str, Any] | None:
    """`text` as a tool call when it is the JSON of one (an object with a string `tool`), else None:
    the server reads such text the same way."""
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) and isinstance(value.get(TOOL_KEY), str) else None


def action_value(action: Any) -> Any:
    """An action for a coding env as the client sends it: a tool-call mapping (or a JSON string of
    one) becomes the JSON `Value` the server accepts; anything else is left to `encode_value`."""
    if isinstance(action, Mapping) and TOOL_KEY in action:
        return tool_call_value(action)
    if isinstance(action, str):
        call = parse_tool_call(action)
        if call is not None:
            return tool_call_value(call)
    return action


def encode_action(action: Any, space: pb.Space | None = None) -> pb.Value:
    """`action` as the `Value` a step or an evaluation item sends: tool calls (a mapping, or the JSON
    text of one, for an untyped or text action space) as JSON, everything else by `encode_value`."""
    if space is None or space.WhichOneof("kind") == "text":
        action = action_value(action)
    return encode_value(action, space)
