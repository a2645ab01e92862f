"""Remote environments as real `gymnasium.Env`s, one `Session` stream each."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from codegym._values import to_gym_space
from codegym.client import Client


class RemoteEnv(gym.Env):
    """A codegym environment served over gRPC.

    Spaces come from the server's `EnvSpec`; `reset(seed, options)` and `step(action)` are one round
    trip each over the session's stream. The server enforces the spec's time limit (truncation).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        env_id: str,
        address: str,
        *,
        timeout: float = 30.0,
        client: Client | None = None,
        **kwargs: Any,
    ) -> None:
        self._owns_client = client is None
        self._client = client if client is not None else Client(address, timeout=timeout)
        self._session = self._client.session()
        try:
            _, spec = self._session.make(env_id, **kwargs)
        except BaseException:
            self._teardown()
            raise
        self.env_id = env_id
        self.remote_spec = spec
        self.observation_space = to_gym_space(spec.observation_space)
        self.action_space = to_gym_space(spec.action_space)
        self.reward_range = (-float("inf"), float("inf"))
        self._closed = False
        # "step" or "reset" when that request was already sent by `_presend_*` (vector pipelining).
        self._present: str | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        # Seeds the local np_random too, as Gymnasium's contract requires of every env.
        super().reset(seed=seed)
        if self._present == "reset" and seed is None and not options:
            self._present = None
            return self._session.recv()
        self._drain_presend()
        return self._session.reset(seed=seed, options=options)

    def step(self, action: Any):
        if self._present == "step":
            self._present = None
            return tuple(self._session.recv())
        self._drain_presend()
        return tuple(self._session.step(action))

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
            except Exception:  # noqa: BLE001 - the response is discarded either way
                pass

    def close(self) -> None:
        if not getattr(self, "_closed", True):
            self._closed = True
            self._teardown()
        super().close()

    def _teardown(self) -> None:
        self._session.close()
        if self._owns_client:
            self._client.close_channel()


def make(env_id: str, address: str = "127.0.0.1:50051", **kwargs: Any) -> RemoteEnv:
    """Gymnasium's `make` for a remote environment; `kwargs` go to the server's `Make`."""
    return RemoteEnv(env_id, address, **kwargs)


class RemoteVectorEnv(gym.vector.SyncVectorEnv):
    """`SyncVectorEnv` over remote sessions, pipelined: each `step` first sends every sub-env's
    request (step, or the next-step autoreset), so the server works on all of them at once, then
    collects the responses through the ordinary `SyncVectorEnv.step`.
    """

    def step(self, actions):
        from gymnasium.vector.utils import iterate
        from gymnasium.vector.vector_env import AutoresetMode

        for i, (env, action) in enumerate(zip(self.envs, iterate(self.action_space, actions))):
            if self.autoreset_mode == AutoresetMode.NEXT_STEP and self._autoreset_envs[i]:
                env._presend_reset()
            else:
                env._presend_step(action)
        return super().step(actions)


def make_vec(env_id: str, num_envs: int, address: str = "127.0.0.1:50051", **kwargs: Any) -> RemoteVectorEnv:
    """`num_envs` remote sessions as a `gymnasium.vector` env (autoreset, batched spaces)."""
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    return RemoteVectorEnv([lambda: make(env_id, address, **kwargs) for _ in range(num_envs)])
