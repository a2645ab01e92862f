"""Fixtures: a real `codegym serve` on 127.0.0.1:0, started once per test session."""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]

# tests/heavy/ (a local multi-node Ray cluster, ...) runs only in CI's heavy step, which installs
# what it needs and sets CODEGYM_HEAVY=1 (see tests/all.sh).
collect_ignore = [] if os.environ.get("CODEGYM_HEAVY") == "1" else ["heavy"]
# Generous: the server may be starting on two loaded cores alongside other test suites.
STARTUP_TIMEOUT_S = 120.0


# Skips CI accepts, by test file or node id, each with why. With CODEGYM_FAIL_ON_SKIP=1 (tests/all.sh)
# any other skip fails the run; with CODEGYM_FAIL_ON_SKIP=all, every skip does (the verifiers venv).
ALLOWED_SKIPS = {
    # Need `verifiers` (and the `transformers` it brings, without torch), whose pins would weigh on
    # every test install: tests/all.sh runs them in a venv of their own with the `verifiers` extra.
    "tests/test_verifiers.py": "run in the verifiers venv",
    "tests/test_trl_env.py::test_transformers_renders_the_tool_schemas": "run in the verifiers venv",
}


def _allowed(nodeid: str) -> bool:
    nodeid = nodeid.split("[")[0]
    return any(nodeid == k or nodeid.endswith("/" + k) or nodeid.startswith(k + "::") for k in ALLOWED_SKIPS)


def pytest_sessionfinish(session, exitstatus) -> None:
    mode = os.environ.get("CODEGYM_FAIL_ON_SKIP")
    if mode not in ("1", "all"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    bad = [r.nodeid for r in skipped if mode == "all" or not _allowed(r.nodeid)]
    if bad:
        print(f"\nunexpected skips (CODEGYM_FAIL_ON_SKIP={mode}; allowed: tests/conftest.py ALLOWED_SKIPS):")
        for nodeid in bad:
            print(f"  {nodeid}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def codegym_bin() -> Path:
    path = Path(os.environ.get("CODEGYM_BIN", "target/debug/codegym"))
    return path if path.is_absolute() else REPO_ROOT / path


def _drain(stream, sink: queue.Queue | None) -> None:
    # Keeps the pipe empty so that the server never blocks on a full stdout.
    for line in stream:
        if sink is not None:
            sink.put(line)


@contextlib.contextmanager
def serve(log_dir: Path, *extra_args: str, lines: int = 1) -> Iterator[list[str]]:
    """Runs `codegym serve --addr 127.0.0.1:0 EXTRA_ARGS` and yields its first `lines` stdout lines
    (the addresses it listens on); stops it afterwards."""
    with serve_process(log_dir, *extra_args, lines=lines) as (_, printed):
        yield printed


@contextlib.contextmanager
def serve_process(log_dir: Path, *extra_args: str, lines: int = 1) -> Iterator[tuple[subprocess.Popen, list[str]]]:
    """`serve`, also yielding the process (for tests that signal or kill it)."""
    binary = codegym_bin()
    if not binary.exists():
        pytest.fail(f"codegym binary not found at {binary}: build it (cargo build -p codegym) or set CODEGYM_BIN")
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "stderr.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [str(binary), "serve", "--addr", "127.0.0.1:0", *extra_args],
        stdout=subprocess.PIPE,
        stderr=log,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=REPO_ROOT,
    )
    sink: queue.Queue = queue.Queue()
    threading.Thread(target=_drain, args=(proc.stdout, sink), daemon=True).start()
    try:
        printed = [sink.get(timeout=STARTUP_TIMEOUT_S) for _ in range(lines)]
    except queue.Empty:
        proc.kill()
        pytest.fail(
            f"codegym serve printed fewer than {lines} lines in {STARTUP_TIMEOUT_S}s; stderr: {log_path.read_text()}"
        )
    if not printed[0].startswith("listening on "):
        proc.kill()
        pytest.fail(f"unexpected first line {printed[0]!r}; stderr: {log_path.read_text()}")
    try:
        yield proc, [line.strip() for line in printed]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="session")
def server_address(tmp_path_factory) -> Iterator[str]:
    with serve(tmp_path_factory.mktemp("server")) as printed:
        yield printed[0][len("listening on ") :]


@pytest.fixture()
def client(server_address):
    import codegym

    with codegym.Client(server_address, timeout=60.0) as c:
        yield c
