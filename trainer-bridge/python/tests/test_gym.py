"""The Gymnasium env: env_checker, and step-by-step parity with Gymnasium's own CartPole-v1."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env

import codegym

CARTPOLE = "classic/CartPole-v1"


def test_env_checker_passes(server_address):
    env = codegym.make(CARTPOLE, address=server_address)
    try:
        assert isinstance(env, gym.Env)
        assert env.observation_space.shape == (4,) and env.observation_space.dtype == np.float32
        assert env.action_space == gym.spaces.Discrete(2)
        check_env(env, skip_render_check=True)
    finally:
        env.close()
    env.close()  # idempotent


def test_parity_with_gymnasium_cartpole(server_address):
    reference = gym.make("CartPole-v1")
    ours = codegym.make(CARTPOLE, address=server_address)
    rng = np.random.default_rng(1234)
    try:
        for episode in range(4):
            gym_obs, _ = reference.reset(seed=100 + episode)
            state = [float(x) for x in reference.unwrapped.state]
            our_obs, _ = ours.reset(seed=100 + episode, options={"state": state})
            np.testing.assert_allclose(our_obs, gym_obs, rtol=0, atol=1e-6)
            steps = 0
            while True:
                # Random actions give short episodes; a bias towards balance gives long ones too.
                action = int(rng.integers(2)) if episode % 2 == 0 else int(gym_obs[2] + 0.3 * gym_obs[3] > 0)
                gym_obs, gym_r, gym_term, gym_trunc, _ = reference.step(action)
                our_obs, our_r, our_term, our_trunc, _ = ours.step(action)
                steps += 1
                np.testing.assert_allclose(
                    our_obs, gym_obs, rtol=0, atol=1e-6, err_msg=f"episode {episode} step {steps}"
                )
                assert our_r == gym_r
                assert (our_term, our_trunc) == (gym_term, gym_trunc), f"episode {episode} step {steps}"
                if gym_term or gym_trunc:
                    break
            assert steps > 5
    finally:
        ours.close()
        reference.close()


def test_vector_env_runs_independent_sessions(server_address):
    envs = codegym.make_vec(CARTPOLE, 3, address=server_address)
    try:
        obs, _ = envs.reset(seed=[1, 2, 3])
        assert obs.shape == (3, 4)
        assert not np.array_equal(obs[0], obs[1])
        for _ in range(30):
            obs, rewards, terminated, truncated, _ = envs.step(np.array([0, 1, 0]))
            assert obs.shape == (3, 4) and rewards.shape == (3,)
            assert terminated.dtype == np.bool_ and truncated.dtype == np.bool_
    finally:
        envs.close()
