"""The sync and asyncio clients against a real server."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import numpy as np
import pytest

import codegym

CARTPOLE = "classic/CartPole-v1"


def test_list_envs_has_cartpole_and_python(client):
    specs = {s.id: s for s in client.list_envs()}
    assert CARTPOLE in specs and "codegym/Code-v0" in specs
    assert specs[CARTPOLE].max_episode_steps == 500
    assert specs[CARTPOLE].action_space.discrete.n == 2


def test_unary_make_reset_step_close(client):
    session_id, spec = client.make(CARTPOLE)
    assert spec.id == CARTPOLE
    obs, info = client.reset(session_id, seed=3)
    assert isinstance(obs, np.ndarray) and obs.shape == (4,) and obs.dtype == np.float32
    assert isinstance(info, dict)
    obs2, _ = client.reset(session_id, seed=3)
    np.testing.assert_array_equal(obs, obs2)
    obs3, reward, terminated, truncated, info = client.step(session_id, 1)
    assert obs3.shape == (4,) and reward == 1.0 and not truncated
    assert isinstance(terminated, bool)
    assert client.close(session_id) is True
    assert client.close(session_id) is False


def test_errors_carry_the_status_code(client):
    with pytest.raises(codegym.CodegymError) as err:
        client.make("nope/Missing-v9")
    assert err.value.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)
    with pytest.raises(codegym.CodegymError) as err:
        client.step("no-such-session", 0)
    assert err.value.code != grpc.StatusCode.OK and err.value.code != grpc.StatusCode.UNAVAILABLE


def test_deadline_exceeded_on_unreachable_server():
    # Nothing listens on port 9 (discard); the call must fail within its deadline, not hang.
    with codegym.Client("127.0.0.1:9", timeout=1.0) as c, pytest.raises(codegym.CodegymError) as err:
        c.list_envs()
    assert err.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def test_session_stream_pipelines_in_order(client):
    with client.session() as s:
        s.make(CARTPOLE)
        s.reset(seed=11)
        # Five steps in flight before reading any response.
        ids = [s.send_step(0) for _ in range(5)]
        results = [s.recv() for _ in ids]
        assert ids == sorted(ids)
        positions = [r.observation[0] for r in results]
        assert len(set(positions)) == 5
        # An in-band error does not end the stream.
        with pytest.raises(codegym.CodegymError):
            s.make("nope/Missing-v9")
        obs, _ = s.reset(seed=11)
        assert obs.shape == (4,)


def test_async_client_and_session(server_address):
    async def main():
        async with codegym.AsyncClient(server_address, timeout=60.0) as c:
            ids = [s.id for s in await c.list_envs()]
            assert CARTPOLE in ids
            session_id, _ = await c.make(CARTPOLE)
            obs, _ = await c.reset(session_id, seed=5)
            step = await c.step(session_id, 0)
            assert step.observation.shape == obs.shape
            assert await c.close(session_id)
            s = c.session()
            await s.make(CARTPOLE)
            first, _ = await s.reset(seed=5)
            np.testing.assert_array_equal(first, obs)
            await s.send_step(0)
            await s.send_step(0)
            a, b = await s.recv(), await s.recv()
            np.testing.assert_array_equal(a.observation, step.observation)
            assert not np.array_equal(a.observation, b.observation)
            await s.close()
            with pytest.raises(codegym.CodegymError):
                await c.make("nope/Missing-v9")

    asyncio.run(main())


def _hello_items():
    # A fresh slow program each call: a cached verdict would not be slow.
    slow = f"import time; time.sleep(1.0); print('Hello, world!')  # {uuid.uuid4()}"
    items = [codegym.EvalItem(action=slow, options={"task_id": "hello-world"})]
    items += [codegym.EvalItem(action="print('Hello, world!')", options={"task_id": "hello-world"}) for _ in range(3)]
    items.append(codegym.EvalItem(action="print('x')", options={"task_id": "no-such-task"}))
    return items


def test_evaluate_stream_yields_each_result_as_it_finishes(client):
    got = list(client.evaluate_stream("codegym/Code-v0", _hello_items()))
    assert sorted(i for i, _ in got) == [0, 1, 2, 3, 4]
    assert got[-1][0] == 0, "the slow program finishes last"
    by_index = dict(got)
    assert isinstance(by_index[4], codegym.CodegymError)
    assert by_index[4].code == grpc.StatusCode.INVALID_ARGUMENT
    assert all(by_index[i].reward == 1.0 for i in range(4))
    # Identical submissions share one verdict: of the three identical items at most one ran.
    hits = [by_index[i].info["cache_hit"] for i in (1, 2, 3)]
    assert hits.count(False) <= 1, hits


def test_async_evaluate_stream(server_address):
    async def main():
        async with codegym.AsyncClient(server_address, timeout=60.0) as c:
            return [pair async for pair in c.evaluate_stream("codegym/Code-v0", _hello_items())]

    got = asyncio.run(main())
    assert sorted(i for i, _ in got) == [0, 1, 2, 3, 4]
    assert got[-1][0] == 0
