"""TRL's `environment_factory`: a codegym session per rollout, with tools the model calls.

`GRPOTrainer(environment_factory=cls)` (TRL >= 0.29) builds instances with `cls()`, calls
`reset(**row)` with the dataset row's columns at the start of every rollout, exposes every public
method other than `reset` / `get_reward` as a tool (schema from the type hints and the Google-style
docstring), calls tools as `method(**arguments)` and shows `str(result)` to the model (an exception
becomes `{"error": ...}`), and reads the episode's reward from `get_reward()` (TRL >= 1.8) or, with
older versions, through a reward function given `environments=[...]` (`environment_reward`).

`environment_factory(address, ...)` returns such a class bound to a server:

```python
env_cls = codegym.environment_factory("localhost:50051")                 # script mode: run_python
env_cls = codegym.environment_factory("localhost:50051", mode="session")  # + write_file, read_file
```
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import grpc

from codegym._contract import RUN_PYTHON, SOLVED, TOOL_KEY
from codegym._errors import CodegymError
from codegym.client import Client, Session, StepResult
from codegym.options import ClientOptions

__all__ = ["CodegymEnv", "CodegymSessionEnv", "environment_factory", "environment_reward"]


def _format(result: StepResult) -> str:
    """What the model sees after a tool call."""
    if isinstance(result.observation, str):  # read_file / write_file observe text
        return result.observation
    obs = result.observation if isinstance(result.observation, Mapping) else {}
    status = "solved" if result.info.get(SOLVED) else "not solved yet"
    if obs.get("timed_out"):
        status += " (timed out)"
    if obs.get("memory_exceeded"):
        status += " (memory limit exceeded)"
    return (
        f"exit code: {obs.get('exit_code')}\nchecks: {status} (reward {result.reward:.3f})\n"
        f"stdout:\n{obs.get('stdout', '')}\nstderr:\n{obs.get('stderr', '')}"
    )


class CodegymEnv:
    """One codegym episode per rollout, in script mode: each `run_python` runs a whole program.

    Configure with `environment_factory(...)` (TRL calls the class with no arguments). Dataset rows
    need `task_id` (a task of the server's set, as `codegym.load_tasks` makes) or `task` (an inline
    task dict or its JSON). `reward`, `solved` and `done` describe the current episode.
    """

    address: ClassVar[str] = "127.0.0.1:50051"
    env_id: ClassVar[str] = "codegym/Code-v0"
    env_kwargs: ClassVar[dict[str, Any]] = {"mode": "script"}
    client_options: ClassVar[ClientOptions] = ClientOptions()
    _shared: ClassVar[Client | None] = None
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self._session: Session | None = None
        self.reward = 0.0
        self.solved = False
        self.done = False
        self.steps = 0
        self.task_id: str | None = None
        self._failure: CodegymError | None = None

    @classmethod
    def _client(cls) -> Client:
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = Client(cls.address, options=cls.client_options)
            return cls._shared

    def _ensure_session(self) -> Session:
        if self._session is None:
            session = self._client().session()
            try:
                session.make(self.env_id, **self.env_kwargs)
            except BaseException:
                session.close()
                raise
            self._session = session
        return self._session

    def reset(self, **kwargs: Any) -> str | None:
        """Starts an episode on the row's task (`task_id` or inline `task` column). Returns None
        when the row has a `prompt` (it already asks the task), else the task's prompt."""
        options: dict[str, Any]
        if kwargs.get("task"):
            task = kwargs["task"]
            options = {"task": json.loads(task) if isinstance(task, str) else dict(task)}
        elif kwargs.get("task_id") is not None:
            options = {"task_id": str(kwargs["task_id"])}
        else:
            raise ValueError("the dataset row needs a `task_id` or `task` column")
        try:
            obs, info = self._ensure_session().reset(options=options)
        except CodegymError as err:
            if err.code == grpc.StatusCode.UNAVAILABLE and self._session is not None:
                # The stream broke (server restart): one new session, then give up.
                self._drop_session()
                obs, info = self._ensure_session().reset(options=options)
            else:
                raise
        self.reward, self.solved, self.done, self.steps = 0.0, False, False, 0
        self._failure = None
        self.task_id = str(info.get("task_id", ""))
        return None if kwargs.get("prompt") else str(obs)

    def _step(self, call: dict[str, Any]) -> str:
        if self._session is None:
            raise RuntimeError("reset() was not called")
        if self.done:
            raise ValueError("the episode is over (the task is solved or the step limit was reached)")
        try:
            result = self._session.step(call)
        except CodegymError as err:
            if err.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL):
                self._failure = err
            raise
        self.steps += 1
        if call[TOOL_KEY] == RUN_PYTHON:
            self.reward = float(result.reward)
            self.solved = bool(result.info.get(SOLVED, result.terminated))
            self._failure = None
        self.done = bool(result.terminated or result.truncated)
        return _format(result)

    def run_python(self, code: str) -> str:
        """Runs a Python program in the sandbox and checks it against the task's tests.

        Args:
            code: The complete Python program to run.

        Returns:
            The exit code, whether the checks pass, and the program's stdout and stderr.
        """
        return self._step({TOOL_KEY: RUN_PYTHON, "code": code})

    def get_reward(self) -> float:
        """The episode's reward: that of the last program run (0.0 when none was run).

        Raises `CodegymError` when the server failed and no program was scored, rather than
        reporting a reward the program did not earn.
        """
        if self._failure is not None:
            raise self._failure
        return self.reward

    def _drop_session(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def __del__(self) -> None:
        session = getattr(self, "_session", None)
        if session is not None:
            session.close()


class CodegymSessionEnv(CodegymEnv):
    """`CodegymEnv` in session mode: one persistent interpreter per episode (variables survive
    between `run_python` calls), plus files in the episode's private work directory."""

    env_kwargs: ClassVar[dict[str, Any]] = {"mode": "session"}

    def write_file(self, path: str, content: str) -> str:
        """Writes a text file in the working directory of the program.

        Args:
            path: Relative path of the file, without `..`.
            content: The file's full text.

        Returns:
            A confirmation.
        """
        return self._step({"tool": "write_file", "path": path, "content": content})

    def read_file(self, path: str) -> str:
        """Reads a text file from the working directory of the program.

        Args:
            path: Relative path of the file, without `..`.

        Returns:
            The file's text.
        """
        return self._step({"tool": "read_file", "path": path})


def environment_factory(
    address: str,
    env_id: str = "codegym/Code-v0",
    *,
    mode: str = "script",
    client: ClientOptions | None = None,
    **env_kwargs: Any,
) -> type[CodegymEnv]:
    """A `CodegymEnv` (script) or `CodegymSessionEnv` (session) class bound to a server, for
    `GRPOTrainer(environment_factory=...)`. `env_kwargs` go to the env's `make` (e.g. `tasks`)."""
    base: type[CodegymEnv] = CodegymSessionEnv if mode == "session" else CodegymEnv
    attrs = {
        "address": address,
        "env_id": env_id,
        "env_kwargs": {**env_kwargs, "mode": mode},
        "client_options": client or ClientOptions(),
        "_shared": None,
        "_shared_lock": threading.Lock(),
    }
    return type(base.__name__, (base,), attrs)


def environment_reward(environments: Sequence[CodegymEnv], **kwargs: Any) -> list[float]:
    """A reward function for TRL < 1.8 (no `get_reward`): each rollout's environment's reward."""
    return [env.get_reward() for env in environments]
