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

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        # Seeds the local np_random too, as Gymnasium's contract requires of every env.
        super().reset(seed=seed)
        return self._session.reset(seed=seed, options=options)

    def step(self, action: Any):
        return tuple(self._session.step(action))

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


def make_vec(env_id: str, num_envs: int, address: str = "127.0.0.1:50051", **kwargs: Any) -> gym.vector.SyncVectorEnv:
    """`num_envs` remote sessions as a `gymnasium.vector.SyncVectorEnv` (autoreset, batched spaces).

    Each sub-env has its own session stream; the steps run one after another, so this is for
    convenience and compatibility with vector-env code, not for throughput.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    return gym.vector.SyncVectorEnv([lambda: make(env_id, address, **kwargs) for _ in range(num_envs)])
