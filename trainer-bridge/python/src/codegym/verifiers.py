"""A verifiers (0.4, the `verifiers.v1` API) taskset over a codegym server.

Tasks come from `ListTasks` (the server's task set, or the one the `tasks` kwarg names); rewards
from `Evaluate` (the final reply's program, scored by the task's own reward spec, one component per
metric); tools from a `vf.Toolset` whose `run_python` (and, in session mode, `write_file` /
`read_file`) run in one codegym session per rollout, opened in `setup_task`.

Installed as the taskset package `codegym_taskset` (id `codegym-taskset`) by `pip install
"codegym[verifiers]"`. Configure with `--env.taskset.address host:port` etc.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import verifiers.v1 as vf

from codegym._contract import RUN_PYTHON, SOLVED, TOOL_KEY, tool_call
from codegym._errors import CodegymError
from codegym.client import AsyncClient, AsyncSession, Client, EvalItem
from codegym.reward import extract_program

__all__ = ["CodegymTaskset"]


class CodegymToolsetConfig(vf.ToolsetConfig):
    """Where the toolset's sessions live."""

    address: str = "127.0.0.1:50051"
    env_id: str = "codegym/Code-v0"
    mode: str = "session"
    tasks: str | None = None


class CodegymToolset(vf.Toolset[CodegymToolsetConfig]):
    """`run_python` (+ `write_file`, `read_file` in session mode) in one codegym session per rollout."""

    TOOL_PREFIX = "codegym"

    async def setup_task(self, task: Any) -> None:
        """Opens the rollout's session on its task."""
        cfg = self.config
        self._client = AsyncClient(cfg.address)
        self._session: AsyncSession | None = self._client.session()
        kwargs: dict[str, Any] = {"mode": cfg.mode}
        if cfg.tasks:
            kwargs["tasks"] = cfg.tasks
        await self._session.make(cfg.env_id, **kwargs)
        await self._session.reset(options=task_options(task.data))

    async def _step(self, call: dict[str, Any]) -> str:
        if getattr(self, "_session", None) is None:
            raise RuntimeError("no codegym session: setup_task did not run")
        try:
            result = await self._session.step(call)  # type: ignore[union-attr]
        except CodegymError as err:
            return f"error: {err.details}"
        obs = result.observation
        if isinstance(obs, str):
            return obs
        return (
            f"exit code: {obs.get('exit_code')}; solved: {bool(result.info.get(SOLVED))}\n"
            f"stdout:\n{obs.get('stdout', '')}\nstderr:\n{obs.get('stderr', '')}"
        )

    @vf.tool
    async def run_python(self, code: str) -> str:
        """Run a Python program in the sandbox (session mode: in the episode's persistent interpreter)
        and check it against the task's tests. Returns the exit code, stdout and stderr."""
        return await self._step({TOOL_KEY: RUN_PYTHON, "code": code})

    @vf.tool
    async def write_file(self, path: str, content: str) -> str:
        """Write a text file (relative path) in the program's working directory (session mode)."""
        return await self._step({"tool": "write_file", "path": path, "content": content})

    @vf.tool
    async def read_file(self, path: str) -> str:
        """Read a text file (relative path) from the program's working directory (session mode)."""
        return await self._step({"tool": "read_file", "path": path})


class CodegymData(vf.TaskData):
    """A codegym task: its id on the server, or an inline task."""

    task_id: str | None = None
    task_json: str | None = None
    completion_prefix: str | None = None


def task_options(data: Any) -> dict[str, Any]:
    """Reset options of a task's data."""
    if getattr(data, "task_json", None):
        return {"task": json.loads(data.task_json)}
    return {"task_id": data.task_id}


class CodegymTaskConfig(vf.TaskConfig):
    """Where rewards are computed."""

    address: str = "127.0.0.1:50051"
    env_id: str = "codegym/Code-v0"
    tasks: str | None = None
    extract: str = "code_block"
    tools: CodegymToolsetConfig = CodegymToolsetConfig()


class CodegymTask(vf.Task[CodegymData, vf.State, CodegymTaskConfig]):
    """One coding task; its reward is codegym's, from `Evaluate`."""

    @classmethod
    def toolsets(cls, config: CodegymTaskConfig) -> list[vf.Toolset]:
        return [CodegymToolset(config.tools)]

    async def score_text(self, text: str) -> float:
        """The codegym reward of a final reply. Server failures raise (never a silent 0)."""
        program = (self.data.completion_prefix or "") + extract_program(text, self.config.extract)  # type: ignore[arg-type]
        # Only the reward is read: no run for an observation (see `RewardFunction`).
        kwargs: dict[str, Any] = {"observe": False}
        if self.config.tasks:
            kwargs["tasks"] = self.config.tasks
        item = EvalItem(action=tool_call(RUN_PYTHON, code=program), options=task_options(self.data))
        async with AsyncClient(self.config.address) as client:
            (result,) = await client.evaluate(self.config.env_id, [item], kwargs)
        if isinstance(result, CodegymError):
            raise result
        return float(result.reward)

    @vf.reward
    async def codegym_reward(self, trace: vf.Trace) -> float:
        """codegym's reward for the program in the final reply."""
        return await self.score_text(trace.last_reply)


class CodegymTasksetConfig(vf.TasksetConfig):
    """Which server and task set."""

    address: str = "127.0.0.1:50051"
    env_id: str = "codegym/Code-v0"
    tasks: str | None = None
    task: CodegymTaskConfig = CodegymTaskConfig()


class CodegymTaskset(vf.Taskset[CodegymTask, CodegymTasksetConfig]):
    """The tasks of a codegym server (`ListTasks`), prompted as `codegym rollout` prompts them."""

    def load(self) -> Iterable[CodegymTask]:
        cfg = self.config
        kwargs = {"tasks": cfg.tasks} if cfg.tasks else {}
        with Client(cfg.address) as client:
            listed = client.list_tasks(cfg.env_id, kwargs)
        for t in listed:
            system = next((m["content"] for m in t.messages if m["role"] == "system"), None)
            user = [m for m in t.messages if m["role"] != "system"]
            data = CodegymData(
                id=t.id,
                name=t.id,
                prompt=user,
                system_prompt=system,
                task_id=t.id,
                completion_prefix=t.completion_prefix,
            )
            yield CodegymTask(data, cfg.task)
