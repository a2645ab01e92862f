"""Runs every snippet of README.md against a real server and a real export."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from conftest import codegym_bin
from rollout_data import write_rollout

README = Path(__file__).resolve().parents[1] / "README.md"


def blocks(lang: str) -> list[str]:
    # Fences on their own lines: snippets may contain ``` inside strings.
    return re.findall(rf"^```{lang}\n(.*?)^```$", README.read_text(), flags=re.DOTALL | re.MULTILINE)


def test_readme_snippets_run(server_address, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_rollout(tmp_path / "rollout.jsonl")
    # The export commands of the offline section (the install block has no `codegym` command).
    commands = [line for block in blocks("bash") for line in block.splitlines() if line.startswith("codegym ")]
    assert len(commands) == 2
    for line in commands:
        argv = shlex.split(line)
        done = subprocess.run([str(codegym_bin()), *argv[1:]], check=False, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    snippets = blocks("python")
    assert len(snippets) == 10
    scopes = []
    for code in snippets:
        scope: dict = {}
        program = compile(code.replace("localhost:50051", server_address), str(README), "exec")
        exec(program, scope)  # noqa: S102 - running the README is the point
        scopes.append(scope)
    assert len(scopes[0]["rl"]) == 6 and "chosen" in scopes[0]["dpo"].column_names
    assert "task_id" in scopes[1]["train"].column_names
    assert scopes[3]["obs"]["stdout"] == "338350\n"
    assert (scopes[4]["area"], scopes[4]["words"], scopes[4]["hits"]) == (12.57, 3, ["rust-0", "rust-1"])
    scores = scopes[5]["scores"]
    assert scores[0] > scores[1]
    assert len(scopes[6]["ds"]) > 0
    assert scopes[7]["env"].get_reward() == 1.0
    assert scopes[8]["played"].result > 0 and scopes[8]["played"].restarts == []
    assert scopes[9]["reward"] == 1.0 and scopes[9]["rewards"] == [1.0]
