"""The Python quick start from an installed wheel alone: run by tests/wheel/check.sh with the
interpreter of a fresh venv that holds only the built wheel, on a PATH without cargo."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import codegym


def main() -> None:
    assert shutil.which("cargo") is None, "cargo must not be on PATH here"
    binary = Path(codegym.find_codegym_bin())
    assert binary.is_relative_to(sys.prefix), f"{binary} is not the venv's own binary"
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith("codegym "), version
    print(version.strip(), "from", binary)

    with codegym.LocalServer() as server:
        env = codegym.make("classic/CartPole-v1", server)
        try:
            env.reset(seed=3)
            steps, done = 0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(steps % 2)
                assert reward == 1.0
                done = terminated or truncated
                steps += 1
        finally:
            env.close()
        print(f"CartPole: an episode of {steps} steps on {server.address}")

        with codegym.Client(server, timeout=120.0) as client:
            items = [
                codegym.EvalItem(action="print('Hello, world!')", options={"task_id": "hello-world"}),
                codegym.EvalItem(action="print('bye')", options={"task_id": "hello-world"}),
            ]
            good, bad = client.evaluate("codegym/Code-v0", items)
        assert good.reward == 1.0 and bad.reward < 1.0, (good, bad)
        print(f"Evaluate: rewards {good.reward} and {bad.reward}")
    assert not server.running


if __name__ == "__main__":
    main()
