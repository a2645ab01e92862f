"""Issue 12 from Python against a real `codegym serve`: return values, variables, errors and
injected vars through `codegym.make` and the `codegym.CodeEnvironment` façade."""

from __future__ import annotations

import asyncio

import pytest

import codegym


def test_make_exposes_return_value_variables_and_vars(server_address):
    env = codegym.make("codegym/Code-v0", server_address, mode="session", variables=True, max_episode_steps=8)
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
    env = codegym.make("codegym/Code-v0", server_address, max_episode_steps=8)
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


def search(query: str, limit: int = 3) -> list:
    """Search the docs.

    Returns matching titles."""
    return [f"{query}-{i}" for i in range(limit)]


async def lookup(key: str) -> dict:
    """Look a key up."""
    await asyncio.sleep(0.01)
    return {"key": key}


def broken(x):
    raise ValueError(f"bad {x}")


def test_tool_schema_from_signature_and_docstring():
    from codegym.host_tools import tool_spec

    spec = tool_spec("search", search)
    assert spec["description"] == "Search the docs."
    assert spec["parameters"] == {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
    }


def test_make_serves_host_tools(server_address):
    tools = {"search": search, "lookup": lookup, "broken": broken}
    env = codegym.make("codegym/Code-v0", server_address, tools=tools, grade=False, max_episode_steps=8)
    try:
        env.reset(options={"task_id": "sum-of-squares"})
        _, _, _, _, info = env.step("[search('q', limit=2), lookup('k')]")
        assert info["execution"]["return_value"] == [["q-0", "q-1"], {"key": "k"}]
        _, _, _, _, info = env.step("broken(1)")
        err = info["execution"]["error"]
        assert err["type_name"] == "RuntimeError" and "ValueError: bad 1" in err["message"]
        src = (
            "import threading\nout = {}\n"
            "ts = [threading.Thread(target=lambda i=i: out.__setitem__(i, search(str(i), limit=1)[0]))"
            " for i in range(6)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n[out[i] for i in range(6)]"
        )
        _, _, _, _, info = env.step(src)
        assert info["execution"]["return_value"] == [f"{i}-0" for i in range(6)]
    finally:
        env.close()


def test_unary_make_with_tools_is_failed_precondition(client):
    with pytest.raises(codegym.CodegymError) as err:
        client.make("codegym/Code-v0", tools=[{"name": "search"}])
    assert "FAILED_PRECONDITION" in str(err.value) and "Session" in str(err.value)


def test_code_environment_tools_and_register_tool(server_address):
    with codegym.CodeEnvironment(server_address, tools={"search": search}) as env:
        env("docs = search('rust')")
        assert env("len(docs)").return_value == 3
        env.register_tool(lookup)
        r = env("[lookup('a')['key'], search('b', 1)]")
        assert r.return_value == ["a", ["b-0"]], r.stderr
        # msgflux's signature: the name first, then the function.
        env.register_tool("find", lookup)
        r = env("[find('c')['key'], lookup('d')['key']]")
        assert r.return_value == ["c", "d"], r.stderr
        with pytest.raises(TypeError):
            env.register_tool("nameless")
        env.register_tools({"s2": search, "l2": lookup})
        assert set(env.tools) == {"search", "lookup", "find", "s2", "l2"}
        assert env("[l2('e')['key'], len(s2('f', 2))]").return_value == ["e", 2]


def test_code_environment_has_msgflux_signatures(server_address):
    """msgflux's `BaseCodeEnvironment`: `env(action, *, timeout=None, vars=None)`, the same for `acall`,
    `reset()`, `shutdown()`. The limits are the session's, so a per-call timeout is refused, not ignored."""
    env = codegym.CodeEnvironment(server_address)
    try:
        assert env(action="x = 1\nx + 1", timeout=None, vars=None).return_value == 2
        assert asyncio.run(env.acall(action="x * 3", vars={"x": 5})).return_value == 15
        with pytest.raises(ValueError, match="per-call timeout"):
            env("1", timeout=2.0)
        env.reset()
        assert not env("'x' in globals()").return_value
    finally:
        env.shutdown()
    env.shutdown()  # idempotent


def test_async_client_serves_async_tools(server_address):
    async def main():
        async with codegym.AsyncClient(server_address) as c:
            s = c.session()
            s.tools = {"lookup": lookup, "search": search}
            from codegym.host_tools import tool_specs

            await s.make("codegym/Code-v0", grade=False, tools=tool_specs(s.tools))
            await s.reset(options={"task_id": "sum-of-squares"})
            result = await s.step("[lookup('z'), search('y', 1)]")
            await s.close()
            return result.observation

    obs = asyncio.run(main())
    assert obs["return_value"] == [{"key": "z"}, ["y-0"]], obs["stderr"]
