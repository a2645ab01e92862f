"""Datasets for trainers: a server's task set as a `datasets.Dataset` with the columns TRL's
`GRPOTrainer` expects.

Columns: `prompt` (chat messages: the rollout engine's system prompt and task template, rendered by
the server), `task_id`, `completion_prefix` (empty string when the task has none; the reward
functions prepend it), `metadata` (JSON text) and `raw_prompt` (the task's own prompt text).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codegym.client import Client, TaskEntry
from codegym.local import LocalServer, find_codegym_bin
from codegym.options import ClientOptions

if TYPE_CHECKING:
    import datasets

__all__ = ["load_tasks", "task_rows"]


def task_rows(tasks: list[TaskEntry]) -> list[dict[str, Any]]:
    """Dataset rows of listed tasks (see the module docs for the columns)."""
    return [
        {
            "prompt": t.messages,
            "task_id": t.id,
            "completion_prefix": t.completion_prefix or "",
            "metadata": json.dumps(t.metadata, sort_keys=True),
            "raw_prompt": t.prompt,
        }
        for t in tasks
    ]


def _codegym_binary() -> str:
    return find_codegym_bin()


def _tasks_from_file(path: str | os.PathLike[str]) -> list[TaskEntry]:
    """The tasks of a local task file (native, HumanEval or MBPP), parsed and rendered by the
    `codegym tasks list` command: the same parser and prompts as the server."""
    done = subprocess.run(
        [_codegym_binary(), "tasks", "list", "--json", str(Path(path))],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise ValueError(f"codegym tasks list {path}: {done.stderr.strip()}")
    out: list[TaskEntry] = []
    for line in done.stdout.splitlines():
        if line.strip():
            row = json.loads(line)
            out.append(
                TaskEntry(
                    id=row["id"],
                    prompt=row["prompt"],
                    messages=row["messages"],
                    metadata=row.get("metadata") or {},
                    completion_prefix=row.get("completion_prefix"),
                    language=row.get("language") or "python",
                )
            )
    return out


def load_tasks(
    address: str | LocalServer | None = None,
    env_id: str = "codegym/Code-v0",
    *,
    path: str | os.PathLike[str] | None = None,
    client: ClientOptions | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> datasets.Dataset:
    """A task set as a `datasets.Dataset` for `GRPOTrainer(train_dataset=...)`.

    Args:
        address: `host:port` of `codegym serve` (or a `LocalServer`): the tasks of `env_id` made with `env_kwargs`
            and `kwargs` (e.g. `tasks="builtin:examples"`).
        env_id: The env whose task set is listed.
        path: A local task file instead of a server (read by the `codegym` binary: `CODEGYM_BIN`
            or PATH).
        client: Connection options.
        env_kwargs: The env's `make` kwargs choosing the task set; `kwargs` are merged over them.
    """
    import datasets  # the `datasets` extra

    if (address is None) == (path is None):
        raise ValueError("give exactly one of address (a server) or path (a local task file)")
    if path is not None:
        tasks = _tasks_from_file(path)
    else:
        with Client(address, options=client) as c:  # type: ignore[arg-type]
            tasks = c.list_tasks(env_id, {**dict(env_kwargs or {}), **kwargs})
    return datasets.Dataset.from_list(task_rows(tasks))
