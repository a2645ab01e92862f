"""codegym: gRPC client, Gymnasium environments, TRL reward functions and datasets for a codegym server.

`import codegym` registers the server-backed envs with Gymnasium, so
`gymnasium.make("codegym/Code-v0", address="host:port")` works.
"""

from codegym._contract import tool_call
from codegym._errors import CodegymError
from codegym.client import AsyncClient, AsyncSession, Client, EvalItem, Session, StepResult, TaskEntry
from codegym.code_env import CodeEnvironment, ExecutionResult
from codegym.env import (
    CodingEnv,
    RemoteEnv,
    RemoteVectorEnv,
    coding_observation_space,
    make,
    make_vec,
    register_gymnasium_envs,
)
from codegym.local import LocalServer, find_codegym_bin
from codegym.options import ClientOptions
from codegym.pool import PooledSession, ServerLost, ServerPool
from codegym.reward import (
    AsyncRewardFunction,
    RewardFunction,
    ScoredSample,
    async_reward_fn,
    completion_text,
    extract_program,
    reward_fn,
    strip_think,
)
from codegym.tasks import load_tasks
from codegym.trl import CodegymEnv, CodegymSessionEnv, environment_factory, environment_reward

register_gymnasium_envs()

__all__ = [
    "AsyncClient",
    "AsyncRewardFunction",
    "AsyncSession",
    "Client",
    "ClientOptions",
    "CodeEnvironment",
    "CodegymEnv",
    "CodegymError",
    "CodegymSessionEnv",
    "CodingEnv",
    "EvalItem",
    "ExecutionResult",
    "LocalServer",
    "PooledSession",
    "RemoteEnv",
    "RemoteVectorEnv",
    "RewardFunction",
    "ScoredSample",
    "ServerLost",
    "ServerPool",
    "Session",
    "StepResult",
    "TaskEntry",
    "async_reward_fn",
    "coding_observation_space",
    "completion_text",
    "environment_factory",
    "environment_reward",
    "extract_program",
    "find_codegym_bin",
    "load_tasks",
    "make",
    "make_vec",
    "register_gymnasium_envs",
    "reward_fn",
    "strip_think",
    "tool_call",
]
