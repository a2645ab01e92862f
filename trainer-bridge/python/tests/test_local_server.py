"""`codegym.LocalServer`: a real `codegym serve` started and stopped by the package itself, and the
package's entry points (`make`, `reward_fn`, `load_tasks`, `Client`) taking it as the address."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest
from conftest import codegym_bin

import codegym

GOOD = "```python\nprint('Hello, world!')\n```"
WRONG = "```python\nprint('bye')\n```"


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_a_local_server_drives_cartpole_evaluate_and_tasks():
    with codegym.LocalServer(binary=codegym_bin(), stderr=subprocess.DEVNULL) as server:
        assert server.running
        host, port = server.address.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        env = codegym.make("classic/CartPole-v1", server)
        try:
            obs, _ = env.reset(seed=7)
            assert obs.shape == (4,)
            steps, done = 0, False
            while not done:
                obs, _, terminated, truncated, _ = env.step(steps % 2)
                done = terminated or truncated
                steps += 1
            assert steps > 1
        finally:
            env.close()
        reward = codegym.reward_fn(server)
        try:
            rewards = reward(prompts=["p", "p"], completions=[GOOD, WRONG], task_id=["hello-world"] * 2)
            assert rewards[0] == 1.0 and rewards[1] < 1.0
        finally:
            reward.close()
        tasks = codegym.load_tasks(server, tasks="builtin:examples")
        assert "hello-world" in tasks["task_id"]
        with codegym.Client(server) as client:
            assert client.address == server.address
        pid = server._proc.pid
    assert not server.running
    assert _gone(pid), "the server outlived its with block"
    with pytest.raises(RuntimeError, match="not running"):
        codegym.reward_fn(server)


def test_http_facades_and_serve_options():
    with codegym.LocalServer(
        binary=codegym_bin(), http=True, max_sessions=4, drain_secs=0, stderr=subprocess.DEVNULL
    ) as server:
        assert server.http_address is not None and server.http_address.startswith("127.0.0.1:")
        # SandboxFusion's run_code on the HTTP facade.
        body = b'{"code": "print(6 * 7)", "language": "python"}'
        req = urllib.request.Request(
            f"http://{server.http_address}/run_code", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert b"42" in resp.read()


def test_a_server_that_cannot_start_is_an_error():
    server = codegym.LocalServer(binary=codegym_bin(), no_such_flag=True, stderr=subprocess.DEVNULL)
    with pytest.raises(RuntimeError, match="exited"):
        server.start()
    assert not server.running


def test_the_server_stops_at_interpreter_exit(tmp_path):
    script = textwrap.dedent(
        f"""
        import subprocess, codegym
        server = codegym.LocalServer(binary={str(codegym_bin())!r}, stderr=subprocess.DEVNULL).start()
        print(server._proc.pid, flush=True)
        # no stop(), no with: atexit stops it
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120, env={**os.environ}
    )
    assert done.returncode == 0, done.stderr
    assert _gone(int(done.stdout.strip())), "the server outlived the interpreter"


def test_the_binary_is_found_through_codegym_bin(monkeypatch):
    monkeypatch.setenv("CODEGYM_BIN", str(codegym_bin()))
    assert codegym.find_codegym_bin() == str(codegym_bin())
    monkeypatch.delenv("CODEGYM_BIN")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(codegym.local, "_scripts_dirs", list)
    with pytest.raises(FileNotFoundError, match="no codegym binary"):
        codegym.find_codegym_bin()
