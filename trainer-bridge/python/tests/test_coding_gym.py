"""The coding env as a Gymnasium env: check_env in script and session modes, gymnasium.make, make_vec."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import codegym

PY = "codegym/Code-v0"
SOLUTION = 'print(f"Result: {sum(i * i for i in range(1, 101))}")'


@pytest.mark.parametrize("mode", ["script", "session"])
def test_check_env_passes(server_address, mode):
    env = codegym.make(PY, address=server_address, mode=mode)
    try:
        assert isinstance(env, codegym.CodingEnv)
        with warnings.catch_warnings():
            # Every warning of the checker is a failure here (observation outside its space, ...).
            warnings.simplefilter("error")
            check_env(env, skip_render_check=True)
    finally:
        env.close()


def test_metadata_says_what_sandbox_runs_the_programs(server_address):
    env = codegym.make(PY, address=server_address)
    try:
        sandbox = env.metadata["sandbox"]
        assert sandbox["isolation_level"] == sandbox["required_level"] == "strict"
        layers = {layer["name"]: layer["active"] for layer in sandbox["layers"]}
        assert layers["pid namespace"] and layers["seccomp"] and layers["landlock"]
        assert "python" in sandbox["languages"]
        assert "render_modes" in env.metadata  # Gymnasium's own keys stay
    finally:
        env.close()


@pytest.mark.parametrize("mode", ["script", "session"])
def test_observations_lie_in_the_space_and_timings_in_info(server_address, mode):
    env = codegym.make(PY, address=server_address, env_kwargs={"mode": mode})
    try:
        obs, info = env.reset(seed=3, options={"task_id": "sum-of-squares"})
        assert obs in env.observation_space
        assert obs["prompt"] and obs["stdout"] == "" and obs["exit_code"] == -1
        assert info["task_id"] == "sum-of-squares"
        again, _ = env.reset(seed=3, options={"task_id": "sum-of-squares"})
        assert again == obs
        obs, reward, terminated, truncated, info = env.step(SOLUTION)
        assert obs in env.observation_space
        assert obs["stdout"].strip() == "Result: 338350" and obs["exit_code"] == 0
        assert obs["prompt"] == again["prompt"]
        assert not set(obs) & {"wall_ms", "cpu_ms", "peak_rss_bytes"}
        assert set(info["execution"]) >= {"wall_ms", "cpu_ms", "peak_rss_bytes"}
        assert reward == 1.0 and terminated and not truncated
        assert info["solved"] is True and "reward_breakdown" in info
        # Same seed, same action: the same observation (timings differ, and live in info only).
        env.reset(seed=3, options={"task_id": "sum-of-squares"})
        obs2, *_ = env.step(SOLUTION)
        assert obs2 == obs
    finally:
        env.close()


def test_gymnasium_make_after_import(server_address):
    assert PY in gym.registry and "classic/CartPole-v1" in gym.registry
    env = gym.make(PY, address=server_address, mode="script")
    try:
        assert isinstance(env.unwrapped, codegym.CodingEnv)
        obs, _ = env.reset(seed=0)
        assert obs in env.observation_space
        obs, reward, *_ = env.step("print('hi')")
        assert obs["stdout"] == "hi\n"
    finally:
        env.close()


@pytest.mark.parametrize("env_id", [PY, "codegym/Python-v0"])
def test_the_former_id_is_an_alias_that_keeps_working(server_address, env_id):
    # Through the client and through Gymnasium, both ids are the coding env and solve its task.
    for env in (codegym.make(env_id, address=server_address), gym.make(env_id, address=server_address)):
        try:
            assert isinstance(env.unwrapped, codegym.CodingEnv)
            env.reset(seed=0, options={"task_id": "sum-of-squares"})
            obs, reward, terminated, *_ = env.step(SOLUTION)
            assert obs["stdout"].strip() == "Result: 338350"
            assert reward == 1.0 and terminated
        finally:
            env.close()


def test_gymnasium_make_vec(server_address):
    envs = gym.make_vec(PY, num_envs=2, vectorization_mode="sync", address=server_address)
    try:
        obs, infos = envs.reset(seed=[1, 2])
        assert len(obs["prompt"]) == 2
        obs, rewards, terminated, truncated, infos = envs.step(("print(1)", "print(2)"))
        assert obs["stdout"] == ("1\n", "2\n")
        assert list(obs["exit_code"]) == [0, 0]
    finally:
        envs.close()


def test_codegym_make_vec_coding(server_address):
    envs = codegym.make_vec(PY, 2, address=server_address)
    try:
        envs.reset(seed=5)
        obs, *_ = envs.step(("print(3)", "import sys; sys.exit(4)"))
        assert obs["stdout"][0] == "3\n" and list(obs["exit_code"]) == [0, 4]
    finally:
        envs.close()


def test_client_options_are_separate_from_env_kwargs(server_address):
    env = codegym.make(
        PY, address=server_address, client=codegym.ClientOptions(timeout=120.0), env_kwargs={"mode": "session"}
    )
    try:
        assert env.env_kwargs == {"mode": "session"}
        assert env._client.timeout == 120.0
    finally:
        env.close()
    with pytest.raises(codegym.CodegymError):
        codegym.make(PY, address=server_address, no_such_kwarg=1)
