"""Issue 12 from Python against a real `codegym serve`: return values, variables, errors and
injected vars through `codegym.make` and the `codegym.CodeEnvironment` façade."""

from __future__ import annotations

import asyncio

import pytest

import codegym


def test_make_exposes_return_value_variables_and_vars(server_address):
    env = codegym.make("codegym/Python-v0", server_address, mode="session", variables=True, max_episode_steps=8)
    try:
        env.reset(options={"task_id": "sum-of-squares", "vars": {"base": 40}})
        obs, _, _, _, info = env.step({"code": "x = base + 1"})
        assert obs["exit_code"] == 0, obs["stderr"]
        assert info["execution"]["has_return_value"] is False
        assert info["execution"]["variables"] == {"base": 40, "x": 41}
        _, _, _, _, info = env.step({"code": "x + extra", "vars": {"extra": 1}})
        assert info["execution"]["return_value"] == 42
        assert info["execution"]["success"] is True
        assert isinstance(info["execution_time_ms"], int) and isinstance(info["memory_used_bytes"], int)
        _, _, _, _, info = env.step({"code": "{'k': [1, None]}", "variables": False})
        assert info["execution"]["return_value"] == {"k": [1, None]}
        assert info["execution"]["variables"] is None
        _, _, _, _, info = env.step("1 / 0")  # plain text actions report too
        assert info["execution"]["error"] == {"type_name": "ZeroDivisionError", "message": "division by zero"}
        assert info["execution"]["success"] is False
        with pytest.raises(ValueError):
            env.step({"source": "1"})
    finally:
        env.close()


def test_bad_vars_raise_invalid_argument(server_address):
    env = codegym.make("codegym/Python-v0", server_address, max_episode_steps=8)
    try:
        env.reset(options={"task_id": "sum-of-squares"})
        with pytest.raises(codegym.CodegymError) as err:
            env.step({"code": "1", "vars": {"not a name": 1}})
        assert "INVALID_ARGUMENT" in str(err.value) and "identifier" in str(err.value)
    finally:
        env.close()


def test_code_environment_facade(server_address):
    with codegym.CodeEnvironment(server_address) as env:
        r = env("import math\nr = 2\nprint('hi')")
        assert r.success and r.output == "hi\n" and not r.has_return_value
        assert r.variables == {"r": 2}
        r = env("round(math.pi * r ** 2, 3)")
        assert r.return_value == 12.566 and r.has_return_value
        r = env("len(doc.split()) + n", vars={"doc": "a b c", "n": 1})
        assert r.return_value == 4
        r = env("lambda: 1")
        assert r.return_value is None and r.return_value_repr and "lambda" in r.return_value_repr
        r = env("raise KeyError('missing')")
        assert not r.success and r.error_type == "KeyError" and "missing" in (r.error or "")
        # Many calls: an ungraded episode never ends on its own.
        for i in range(5):
            assert env(f"r + {i}").return_value == 2 + i
        assert asyncio.run(env.acall("r * 10")).return_value == 20
        env.reset(vars={"fresh": True})
        r = env("fresh")
        assert r.return_value is True
        assert "r" not in r.variables


def test_code_environment_script_mode_and_timeout(server_address):
    with codegym.CodeEnvironment(server_address, mode="script", timeout=1.0) as env:
        env.reset(vars={"k": 3})
        assert env("y = k * 2\ny").return_value == 6
        assert env("'y' in globals()").return_value is False  # script mode: a fresh process each call
        r = env("while True: pass")
        assert r.timed_out and r.error_type == "TimeoutError" and not r.success
