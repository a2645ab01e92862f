"""Remote environments as real `gymnasium.Env`s, one `Session` stream each.

`make` returns a `RemoteEnv` for any server env, and a `CodingEnv` for the coding envs
(`codegym/...`), whose observations are a `gymnasium.spaces.Dict` (see `CodingEnv`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, SupportsFloat, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

from codegym._contract import RUN_PYTHON, TOOL_KEY, tool_call
from codegym._values import AnyText, to_gym_space
from codegym.client import Client, StepResult
from codegym.local import LocalServer, resolve_address
from codegym.options import ClientOptions
from codegym.v1 import env_pb2 as pb

__all__ = [
    "CODING_OBSERVATION_KEYS",
    "CodingEnv",
    "RemoteEnv",
    "RemoteVectorEnv",
    "coding_observation_space",
    "make",
    "make_vec",
]

log = logging.getLogger(__name__)

# Largest text of the coding env's spaces (the server's `MAX_TEXT_LEN`).
_MAX_TEXT = 1 << 20


def _client_for(
    address: str | LocalServer, client: Client | ClientOptions | None, timeout: float | None
) -> tuple[Client, bool]:
    """The client to use and whether the env owns (and so closes) it."""
    if isinstance(client, Client):
        return client, False
    return Client(address, timeout=timeout, options=client), True


class RemoteEnv(gym.Env):
    """A codegym environment served over gRPC.

    Spaces come from the server's `EnvSpec`; `reset(seed, options)` and `step(action)` are one round
    trip each over the session's stream. The server enforces the spec's time limit (truncation).

    Args:
        env_id: The server's env id (`ns/Name-vN`).
        address: `host:port` of `codegym serve`.
        client: A `Client` to share (not closed by the env), or `ClientOptions` for the env's own
            client (deadlines, TLS).
        timeout: Shorthand for `ClientOptions(timeout=...)` (kept for compatibility).
        env_kwargs: Keyword arguments of the server's `Make` (the env's own options).
        **kwargs: Also env kwargs, merged over `env_kwargs` (Gymnasium's `make(id, **kwargs)` style).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        env_id: str,
        address: str | LocalServer = "127.0.0.1:50051",
        *,
        client: Client | ClientOptions | None = None,
        timeout: float | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._closed = True
        address = resolve_address(address)
        self._client, self._owns_client = _client_for(address, client, timeout)
        self._session = self._client.session()
        self.env_kwargs: dict[str, Any] = {**dict(env_kwargs or {}), **kwargs}
        make_kwargs = dict(self.env_kwargs)
        # Host tools are functions here; the server gets their schemas.
        tools = make_kwargs.pop("tools", None)
        if tools:
            from codegym.host_tools import tool_specs

            make_kwargs["tools"] = tool_specs(tools)
            self._session.tools = dict(tools)
        try:
            _, spec = self._session.make(env_id, **make_kwargs)
        except BaseException:
            self._teardown()
            raise
        self.env_id = env_id
        self.address = address
        self.remote_spec = spec
        self.observation_space = to_gym_space(spec.observation_space)
        self.action_space = to_gym_space(spec.action_space)
        # Gymnasium's view of the server's spec (`gymnasium.make` replaces it with the registered one,
        # which says the same). `nondeterministic` is the server's word: coding envs are, by timings.
        self.spec = EnvSpec(
            id=env_id,
            entry_point="codegym.env:_gym_entry_point",
            reward_threshold=spec.reward_threshold if spec.HasField("reward_threshold") else None,
            nondeterministic=bool(spec.nondeterministic),
            kwargs={"env_id": env_id, "address": address, **self.env_kwargs},
        )
        # Gymnasium's `metadata`, plus the server's word on the env (the coding env: its sandbox's
        # isolation level, layers, backend and languages, under "sandbox").
        self.metadata = {**type(self).metadata, **json.loads(spec.metadata_json or "{}")}
        self._closed = False
        # "step" or "reset" when that request was already sent by `_presend_*` (vector pipelining).
        self._present: str | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        # Seeds the local np_random too, as Gymnasium's contract requires of every env.
        super().reset(seed=seed)
        if self._present == "reset" and seed is None and not options:
            self._present = None
            obs, info = self._session.recv()
        else:
            self._drain_presend()
            obs, info = self._session.reset(seed=seed, options=options)
        return self._reset_result(obs, info)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._present == "step":
            self._present = None
            result: StepResult = self._session.recv()
        else:
            self._drain_presend()
            result = self._session.step(action)
        return self._step_result(result)

    def _reset_result(self, obs: Any, info: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """Hook for subclasses: the `(obs, info)` of `reset` from the server's."""
        return obs, info

    def _step_result(self, result: StepResult) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Hook for subclasses: the step tuple from the server's."""
        return result.observation, result.reward, result.terminated, result.truncated, result.info

    def _presend_step(self, action: Any) -> None:
        self._drain_presend()
        self._session.send_step(action)
        self._present = "step"

    def _presend_reset(self) -> None:
        self._drain_presend()
        self._session.send_reset()
        self._present = "reset"

    def _drain_presend(self) -> None:
        # A pre-sent request nobody consumed: read (and drop) its response to stay in order.
        if self._present is not None:
            self._present = None
            try:
                self._session.recv()
            except Exception as err:  # noqa: BLE001 - the response is discarded; say so
                log.debug("discarded the response of a pre-sent request: %s", err)

    def close(self) -> None:
        if not getattr(self, "_closed", True):
            self._closed = True
            self._teardown()
        super().close()

    def _teardown(self) -> None:
        self._session.close()
        if self._owns_client:
            self._client.close_channel()


CODING_OBSERVATION_KEYS = (
    "prompt",
    "stdout",
    "stderr",
    "exit_code",
    "signal",
    "timed_out",
    "memory_exceeded",
    "stdout_truncated",
    "stderr_truncated",
)


def coding_observation_space() -> spaces.Dict:
    """The observation space of `CodingEnv`.

    - `prompt`: the task's prompt (the same text on reset and on every step of the episode);
    - `stdout`, `stderr`: the program's output (empty on reset);
    - `exit_code`: the exit status, or -1 when there is none (reset, nothing ran, killed by a signal);
      exit statuses outside 0..255 are reported as -1 too (with the exact value in `info`);
    - `signal`: the signal that ended the process, 0 for none;
    - `timed_out`, `memory_exceeded`, `stdout_truncated`, `stderr_truncated`: 0 or 1.

    Timings and memory (`wall_ms`, `cpu_ms`, `peak_rss_bytes`) vary from run to run: they are in
    `info["execution"]`, not in the observation.
    """
    flag = spaces.Discrete(2)
    return spaces.Dict(
        {
            "prompt": AnyText(min_length=0, max_length=_MAX_TEXT),
            "stdout": AnyText(min_length=0, max_length=_MAX_TEXT),
            "stderr": AnyText(min_length=0, max_length=_MAX_TEXT),
            "exit_code": spaces.Discrete(257, start=-1),
            "signal": spaces.Discrete(65),
            "timed_out": flag,
            "memory_exceeded": flag,
            "stdout_truncated": flag,
            "stderr_truncated": flag,
        }
    )


_TIMINGS = ("wall_ms", "cpu_ms", "peak_rss_bytes")


class CodingEnv(RemoteEnv):
    """A coding environment (`codegym/Code-v0`) whose observations lie in their declared space.

    Observation: `coding_observation_space()`, a `Dict` of the prompt and the last execution (see
    there). Action: text (Python source or model output, by the env's `extract` kwarg), at most
    1 MiB. `info` of a step holds the server's info (`task_id`, `solved`, `reward_breakdown`, ...)
    plus `execution` (`wall_ms`, `cpu_ms`, `peak_rss_bytes`, `exit_code`, `signal`). Env kwargs are
    the server's: `mode` (`script` / `session`), `tasks`, `extract`, `limits`, `max_episode_steps`.
    """

    def __init__(
        self, env_id: str = "codegym/Code-v0", address: str | LocalServer = "127.0.0.1:50051", **kwargs: Any
    ) -> None:
        super().__init__(env_id, address, **kwargs)
        self.observation_space = coding_observation_space()
        self.action_space = AnyText(min_length=0, max_length=_MAX_TEXT)
        self._prompt = ""

    def _observation(self, execution: Mapping[str, Any] | None) -> dict[str, Any]:
        e = execution or {}
        code = e.get("exit_code")
        signal = int(e.get("signal") or 0)
        return {
            "prompt": self._prompt,
            "stdout": str(e.get("stdout", "")),
            "stderr": str(e.get("stderr", "")),
            "exit_code": int(code) if code is not None and 0 <= code <= 255 else -1,
            "signal": signal if 0 <= signal <= 64 else 0,
            "timed_out": int(bool(e.get("timed_out"))),
            "memory_exceeded": int(bool(e.get("memory_exceeded"))),
            "stdout_truncated": int(bool(e.get("stdout_truncated"))),
            "stderr_truncated": int(bool(e.get("stderr_truncated"))),
        }

    def _reset_result(self, obs: Any, info: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        self._prompt = obs if isinstance(obs, str) else str(obs)
        return self._observation(None), info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Runs `action`: text (source or model output), a tool call (`{"tool": ..., ...}`), or a
        mapping `{"code": ..., "vars": {...}, "variables": bool}` whose `vars` become globals first."""
        plain = isinstance(action, Mapping) and TOOL_KEY not in action
        return super().step(run_python_action(action) if plain else action)

    def _step_result(self, result: StepResult) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        execution = result.observation if isinstance(result.observation, Mapping) else {}
        info = dict(result.info)
        info["execution"] = {k: execution.get(k) for k in (*_TIMINGS, "exit_code", "signal", *_AGENT_FIELDS)}
        return self._observation(execution), result.reward, result.terminated, result.truncated, info


# The results agents read, in `info["execution"]` (JSON values do not fit a fixed space).
_AGENT_FIELDS = (
    "success",
    "has_return_value",
    "return_value",
    "return_value_unrepresentable",
    "variables",
    "dropped_variables",
    "error",
)


def run_python_action(action: Mapping[str, Any]) -> pb.Value:
    """`{"code", "vars"?, "variables"?}` as the coding env's `run_python` tool call."""
    return tool_call(RUN_PYTHON, **action)


def _is_coding(env_id: str) -> bool:
    return env_id.startswith("codegym/") and env_id not in _NOT_CODING


def make(
    env_id: str,
    address: str | LocalServer = "127.0.0.1:50051",
    *,
    client: Client | ClientOptions | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> RemoteEnv:
    """Gymnasium's `make` for a remote environment.

    `client` holds the connection options (`ClientOptions`, or a shared `Client`); `env_kwargs` and
    any other keyword arguments go to the server's `Make`. Coding envs (`codegym/...`) come back as
    `CodingEnv`.
    """
    cls = CodingEnv if _is_coding(env_id) else RemoteEnv
    return cls(env_id, address, client=client, env_kwargs=env_kwargs, **kwargs)


class RemoteVectorEnv(gym.vector.SyncVectorEnv):
    """`SyncVectorEnv` over remote sessions, pipelined: each `step` first sends every sub-env's
    request (step, or the next-step autoreset), so the server works on all of them at once, then
    collects the responses through the ordinary `SyncVectorEnv.step`.
    """

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        from gymnasium.vector.utils import iterate
        from gymnasium.vector.vector_env import AutoresetMode

        for i, (env, action) in enumerate(zip(self.envs, iterate(self.action_space, actions))):
            remote = cast(RemoteEnv, env.unwrapped)
            if self.autoreset_mode == AutoresetMode.NEXT_STEP and self._autoreset_envs[i]:
                remote._presend_reset()
            else:
                remote._presend_step(action)
        return super().step(actions)


def make_vec(
    env_id: str,
    num_envs: int,
    address: str | LocalServer = "127.0.0.1:50051",
    *,
    client: Client | ClientOptions | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> RemoteVectorEnv:
    """`num_envs` remote sessions as a `gymnasium.vector` env (autoreset, batched spaces)."""
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    fns: list[Callable[[], gym.Env]] = [
        lambda: make(env_id, address, client=client, env_kwargs=env_kwargs, **kwargs) for _ in range(num_envs)
    ]
    return RemoteVectorEnv(fns)


def _gym_entry_point(env_id: str, address: str | LocalServer = "127.0.0.1:50051", **kwargs: Any) -> RemoteEnv:
    """Entry point of the ids `import codegym` registers with Gymnasium."""
    return make(env_id, address, **kwargs)


# The server-backed ids `import codegym` registers with Gymnasium, and whether they are deterministic.
# `codegym/Python-v0` is the coding env's former id, an alias the server keeps answering.
GYM_IDS: dict[str, bool] = {
    "codegym/Code-v0": True,
    "codegym/Python-v0": True,
    "codegym/Repo-v0": True,
    "classic/CartPole-v1": False,
}

# Served envs whose observations are not the coding observation: their spaces come from the server.
_NOT_CODING = frozenset({"codegym/Repo-v0"})


def register_gymnasium_envs() -> None:
    """Registers the server-backed envs with Gymnasium (idempotent):
    `gymnasium.make("codegym/Code-v0", address="host:port", **env_kwargs)`.

    The server enforces time limits, so no `TimeLimit` is added on this side.
    """
    for env_id, nondeterministic in GYM_IDS.items():
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point="codegym.env:_gym_entry_point",
            kwargs={"env_id": env_id},
            nondeterministic=nondeterministic,
        )
