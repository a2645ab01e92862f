"""`LocalServer`: a `codegym serve` of this machine's own, on a free loopback port, for a `with` block.

    with codegym.LocalServer() as server:
        env = codegym.make("codegym/Code-v0", server)
        reward = codegym.reward_fn(server)

The binary is, in order: `binary=`, `$CODEGYM_BIN`, the one installed with this package (the wheel
puts it in the environment's scripts directory), `codegym` on `PATH`.
"""

from __future__ import annotations

import atexit
import os
import queue
import subprocess
import sys
import sysconfig
import threading
import weakref
from pathlib import Path
from typing import IO, Any

__all__ = ["LocalServer", "find_codegym_bin", "resolve_address"]

_EXE = "codegym" + (sysconfig.get_config_var("EXE") or "")
_LIVE: weakref.WeakSet[LocalServer] = weakref.WeakSet()


def _scripts_dirs() -> list[Path]:
    """Where installers put a wheel's scripts: this environment's, the user scheme's, and the
    `bin/` beside a `pip install --target` directory."""
    dirs = [Path(sysconfig.get_path("scripts"))]
    try:
        scheme = sysconfig.get_preferred_scheme("user")
        dirs.append(Path(sysconfig.get_path("scripts", scheme)))
    except (AttributeError, KeyError):  # Python 3.9's sysconfig, or no user scheme
        pass
    dirs.append(Path(__file__).resolve().parent.parent / "bin")
    return dirs


def find_codegym_bin() -> str:
    """The `codegym` binary: `$CODEGYM_BIN`, the packaged one, else `codegym` on `PATH`."""
    explicit = os.environ.get("CODEGYM_BIN")
    if explicit:
        return explicit
    tried = []
    for folder in _scripts_dirs():
        candidate = folder / _EXE
        tried.append(str(candidate))
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    from shutil import which

    found = which("codegym")
    if found is not None:
        return found
    raise FileNotFoundError(
        "no codegym binary: install the codegym wheel, put `codegym` on PATH or set CODEGYM_BIN "
        f"(looked in {', '.join(tried)} and PATH)"
    )


def _flags(options: dict[str, Any]) -> list[str]:
    """`serve` flags from keyword arguments: `max_sessions=8` -> `--max-sessions 8`, `packages=True`
    -> `--packages`, a list repeats the flag, `None` and `False` leave it out."""
    args: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            for v in value:
                args += [flag, os.fspath(v) if isinstance(v, os.PathLike) else str(v)]
        else:
            args += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return args


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    # Keeps the pipe drained so that the server never blocks on a full stdout.
    for line in stream:
        lines.put(line)
    lines.put(None)


class LocalServer:
    """`codegym serve` on `127.0.0.1`, a free port, started on `with` (or `start()`) and stopped on
    leaving the block (or `stop()`), and at interpreter exit at the latest.

    Args:
        http: Also serve the HTTP facades (SandboxFusion, OpenEnv) on a free port: `.http_address`.
        binary: The `codegym` binary (default: see `find_codegym_bin`).
        startup_timeout: Seconds to wait for the server's `listening on ADDR` line.
        stderr: Where the server's log goes (a file object); default: this process's stderr.
        **serve_options: `codegym serve` flags, `max_sessions=8`, `packages=True`,
            `tasks_dir=["tasks/"]`, `config="serve.json"` (see `codegym serve --help`).
    """

    def __init__(
        self,
        *,
        http: bool = False,
        binary: str | os.PathLike[str] | None = None,
        startup_timeout: float = 60.0,
        stderr: IO[Any] | None = None,
        **serve_options: Any,
    ) -> None:
        for reserved in ("addr", "http"):
            serve_options.pop(reserved, None)
        self._args = _flags(serve_options)
        self._http = http
        self._binary = os.fspath(binary) if binary is not None else None
        self._startup_timeout = startup_timeout
        self._stderr = stderr
        self._proc: subprocess.Popen[str] | None = None
        self.address: str | None = None
        self.http_address: str | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> LocalServer:
        """Starts the server and waits until it listens; returns `self`."""
        if self._proc is not None:
            raise RuntimeError("this LocalServer was already started")
        binary = self._binary or find_codegym_bin()
        cmd = [binary, "serve", "--addr", "127.0.0.1:0", *self._args]
        if self._http:
            cmd += ["--http", "127.0.0.1:0"]
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr if self._stderr is not None else sys.stderr,
            text=True,
        )
        _LIVE.add(self)
        lines: queue.Queue[str | None] = queue.Queue()
        assert self._proc.stdout is not None
        threading.Thread(target=_pump, args=(self._proc.stdout, lines), daemon=True).start()
        try:
            self.address = self._expect(lines, "listening on ")
            if self._http:
                self.http_address = self._expect(lines, "http listening on ")
        except BaseException:
            self.stop()
            raise
        return self

    def _expect(self, lines: queue.Queue[str | None], prefix: str) -> str:
        try:
            line = lines.get(timeout=self._startup_timeout)
        except queue.Empty:
            raise TimeoutError(f"codegym serve printed no `{prefix}ADDR` in {self._startup_timeout} s") from None
        if line is None:
            code = self._proc.wait() if self._proc is not None else None
            raise RuntimeError(f"codegym serve exited (code {code}) before listening; its log is on stderr")
        if not line.startswith(prefix):
            raise RuntimeError(f"codegym serve printed {line!r}, not `{prefix}ADDR`")
        return line[len(prefix) :].strip()

    def stop(self, timeout: float = 30.0) -> None:
        """Stops the server (SIGTERM, then SIGKILL after `timeout` seconds). Idempotent."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __del__(self) -> None:
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            proc.kill()

    def __str__(self) -> str:
        return self.address or "<LocalServer, not started>"

    def __repr__(self) -> str:
        return f"LocalServer(address={self.address!r}, http_address={self.http_address!r})"


def resolve_address(address: str | LocalServer) -> str:
    """`host:port` of `address`: a string as it is, a started `LocalServer`'s `.address`."""
    if isinstance(address, LocalServer):
        if address.address is None or not address.running:
            raise RuntimeError("the LocalServer is not running: use it inside `with`, or call start()")
        return address.address
    return address


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop(timeout=5.0)
