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


def test_vector_env_matches_unpipelined_sync_vector_env(server_address):
    pipelined = codegym.make_vec(CARTPOLE, 3, address=server_address)
    plain = gym.vector.SyncVectorEnv([lambda: codegym.make(CARTPOLE, address=server_address) for _ in range(3)])
    rng = np.random.default_rng(7)
    try:
        obs_a, _ = pipelined.reset(seed=[1, 2, 3])
        obs_b, _ = plain.reset(seed=[1, 2, 3])
        assert obs_a.shape == (3, 4) and not np.array_equal(obs_a[0], obs_a[1])
        np.testing.assert_array_equal(obs_a, obs_b)
        episodes_ended = 0
        for _ in range(60):
            actions = rng.integers(0, 2, size=3)
            obs_a, rew_a, term_a, trunc_a, _ = pipelined.step(actions)
            obs_b, rew_b, term_b, trunc_b, _ = plain.step(actions)
            np.testing.assert_array_equal(obs_a, obs_b)
            np.testing.assert_array_equal(rew_a, rew_b)
            np.testing.assert_array_equal(term_a, term_b)
            np.testing.assert_array_equal(trunc_a, trunc_b)
            episodes_ended += int(term_a.sum())
        # Random actions end CartPole episodes within ~60 steps: autoreset was exercised.
        assert episodes_ended >= 3
    finally:
        pipelined.close()
        plain.close()
