"""codegym: gRPC client, Gymnasium environments and TRL reward functions for a codegym server."""

from codegym._errors import CodegymError
from codegym.client import AsyncClient, AsyncSession, Client, EvalItem, Session, StepResult
from codegym.env import RemoteEnv, RemoteVectorEnv, make, make_vec
from codegym.reward import RewardFunction, completion_text, reward_fn

__all__ = [
    "AsyncClient",
    "AsyncSession",
    "Client",
    "CodegymError",
    "EvalItem",
    "RemoteEnv",
    "RemoteVectorEnv",
    "RewardFunction",
    "Session",
    "StepResult",
    "completion_text",
    "make",
    "make_vec",
    "reward_fn",
]
