"""codegym.ServerPool against real `codegym serve` processes: placement, a full server, a draining
server, a server killed mid-session, and addresses from a name."""

from __future__ import annotations

import contextlib
import signal
import time

import grpc
import pytest
from conftest import serve_process

import codegym
from codegym.pool import resolve

CARTPOLE = "classic/CartPole-v1"


def address(printed: list[str]) -> str:
    return printed[0][len("listening on ") :]


@contextlib.contextmanager
def servers(tmp_path, *arg_lists):
    with contextlib.ExitStack() as stack:
        started = [stack.enter_context(serve_process(tmp_path / f"s{i}", *args)) for i, args in enumerate(arg_lists)]
        yield [(proc, address(printed)) for proc, printed in started]


def wait_for(cond, what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def play(session: codegym.PooledSession, seed: int, steps: int = 3) -> list[float]:
    session.reset(seed=seed)
    return [session.step(1).reward for _ in range(steps)]


def test_sessions_spread_over_the_least_loaded_servers_and_stay_pinned(tmp_path):
    with servers(tmp_path, (), (), ()) as running, codegym.ServerPool([a for _, a in running]) as pool:
        assert sorted(pool.health().values()) == ["serving"] * 3
        sessions = [pool.session(CARTPOLE) for _ in range(6)]
        assert sorted(pool.load().values()) == [2, 2, 2]
        assert {s.server for s in sessions} == {a for _, a in running}
        for i, s in enumerate(sessions):
            assert play(s, seed=i) == [1.0, 1.0, 1.0]
        for s in sessions:
            s.close()
        assert sorted(pool.load().values()) == [0, 0, 0]


def test_a_full_server_sheds_load_and_request_errors_are_not_retried(tmp_path):
    with servers(tmp_path, ("--max-sessions", "0"), ()) as running:
        (_, full), (_, open_) = running
        with codegym.ServerPool([full, open_]) as pool:
            sessions = [pool.session(CARTPOLE) for _ in range(4)]
            assert {s.server for s in sessions} == {open_}
            for s in sessions:
                s.close()
            # An unknown env is the same everywhere: raised at once, not moved around.
            with pytest.raises(codegym.CodegymError) as err:
                pool.session("nope/Missing-v0")
            assert err.value.code == grpc.StatusCode.NOT_FOUND
            assert not isinstance(err.value, codegym.ServerLost)


def test_a_draining_server_gets_no_new_sessions(tmp_path):
    with servers(tmp_path, ("--drain-secs", "120"), ()) as running:
        (draining_proc, draining), (_, open_) = running
        with codegym.ServerPool([draining, open_], health_interval=0.1) as pool:
            before = pool.session(CARTPOLE, avoid=open_)
            assert before.server == draining
            draining_proc.send_signal(signal.SIGTERM)
            wait_for(lambda: pool.health()[draining] == "not_serving", "NOT_SERVING")
            # The open session goes on while its server drains; new ones go elsewhere.
            assert play(before, seed=1) == [1.0, 1.0, 1.0]
            after = [pool.session(CARTPOLE) for _ in range(3)]
            assert {s.server for s in after} == {open_}
            for s in [before, *after]:
                s.close()
        draining_proc.kill()  # rather than wait out its drain period


def test_a_killed_server_loses_its_sessions_and_the_episode_replays_elsewhere(tmp_path):
    with servers(tmp_path, (), ()) as running:
        (victim_proc, victim), (_, survivor) = running
        with codegym.ServerPool([victim, survivor], timeout=30.0) as pool:
            session = pool.session(CARTPOLE, avoid=survivor)
            assert session.server == victim
            expected = play(session, seed=7, steps=2)
            session.reset(seed=7)
            victim_proc.kill()
            victim_proc.wait()
            with pytest.raises(codegym.ServerLost) as lost:
                session.step(1)
            assert lost.value.server == victim
            with pytest.raises(codegym.ServerLost):
                session.step(1)  # stays lost
            session.close()
            # The same episode from its start, same seed, on the other server: the same rewards.
            again = pool.session(CARTPOLE, avoid=lost.value.server)
            assert again.server == survivor
            assert play(again, seed=7, steps=2) == expected
            again.close()
            wait_for(lambda: pool.health()[victim] == "down", "the dead server marked down")
            later = [pool.session(CARTPOLE) for _ in range(2)]
            assert {s.server for s in later} == {survivor}
            for s in later:
                s.close()


def test_addresses_resolve_through_the_system_resolver():
    assert "127.0.0.1:7" in resolve(["localhost:7"])
    assert resolve(["http://[::1]:7", "127.0.0.1:7", "127.0.0.1:7"]) == ["127.0.0.1:7", "[::1]:7"]
    for bad in ["https://h:1", "h", "h:x", "http://h:1/path"]:
        with pytest.raises(ValueError, match="bad env server address"):
            resolve([bad])
    with pytest.raises(OSError):
        resolve(["no-such-host.invalid:1"])
