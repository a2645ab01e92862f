"""`codegym serve` on a Ray cluster: one server per node (or per placement-group bundle), each
managed by a Ray actor, and the resulting server pool for clients and rollouts.

```python
import ray, codegym.ray
ray.init()
servers = codegym.ray.start_servers()            # one `codegym serve` per alive node
with servers.pool() as pool:                      # a codegym.ServerPool over them
    played = pool.play("codegym/Code-v0", my_episode)
subprocess.run(["codegym", "rollout", ..., *servers.env_server_args()])
servers.shutdown()
```

Each actor starts the `codegym` binary (`binary`, else `$CODEGYM_BIN`, else `codegym` on the
node's PATH) listening on the node's IP address (or `host`), waits for its `listening on` line, and
stops it on `stop()` (SIGTERM, then SIGKILL after `grace` seconds). The server is tied to the actor's
process (Linux parent-death signal): when the actor dies or is killed, so does its server.
Requires `ray` (not a dependency of `codegym`: `pip install ray`).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from codegym.pool import ServerPool

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: SIGKILL when the actor's process (thread) ends.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _binary(binary: str | None) -> str:
    found = binary or os.environ.get("CODEGYM_BIN") or shutil.which("codegym")
    if not found:
        raise FileNotFoundError("no codegym binary: pass binary=..., set CODEGYM_BIN, or put codegym on PATH")
    return found


class CodegymServer:
    """The Ray actor that owns one `codegym serve` process on its node."""

    def __init__(
        self, binary: str | None, host: str | None, port: int, serve_args: Sequence[str], startup_timeout: float
    ):
        host = host or ray.util.get_node_ip_address()
        bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._proc = subprocess.Popen(
            [_binary(binary), "serve", "--addr", bind, *serve_args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=None,  # the actor's log
            text=True,
            preexec_fn=_die_with_parent,
        )
        stdout = self._proc.stdout
        assert stdout is not None  # stdout=PIPE
        first: list[str] = []
        reader = threading.Thread(target=lambda: first.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(startup_timeout)
        line = first[0].strip() if first else ""
        if not line.startswith("listening on "):
            self._proc.kill()
            raise RuntimeError(f"codegym serve did not start (first line {line!r}, exit {self._proc.poll()})")
        # Keep the pipe drained so the server never blocks on its stdout.
        threading.Thread(target=lambda: [None for _ in stdout], daemon=True).start()
        self._address = line[len("listening on ") :]
        self._node_id = ray.get_runtime_context().get_node_id()

    def info(self) -> dict[str, Any]:
        """`address` (host:port), `node_id`, `pid` and whether the process is `alive`."""
        return {"address": self._address, "node_id": self._node_id, "pid": self._proc.pid, "alive": self.alive()}

    def alive(self) -> bool:
        return self._proc.poll() is None

    def kill_server(self) -> None:
        """SIGKILLs the server (fault injection); the actor stays."""
        self._proc.kill()
        self._proc.wait()

    def stop(self, grace: float = 30.0) -> int | None:
        """SIGTERM (graceful: in-flight steps finish, or `--drain-secs`), SIGKILL after `grace` s."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(grace)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        return self._proc.returncode


@dataclass
class RayServers:
    """The servers started by `start_servers`: their actors and addresses."""

    actors: list[Any]
    infos: list[dict[str, Any]]

    @property
    def addresses(self) -> list[str]:
        return [i["address"] for i in self.infos]

    def env_server_args(self) -> list[str]:
        """`--env-server http://ADDR` for each server, for `codegym rollout`."""
        return [arg for a in self.addresses for arg in ("--env-server", f"http://{a}")]

    def pool(self, **kwargs: Any) -> ServerPool:
        """A `codegym.ServerPool` over the servers (kwargs as `ServerPool`'s)."""
        return ServerPool(self.addresses, **kwargs)

    def refresh(self) -> list[dict[str, Any]]:
        """Asks every actor again (`alive` may have changed)."""
        self.infos = ray.get([a.info.remote() for a in self.actors])
        return self.infos

    def shutdown(self, grace: float = 30.0) -> None:
        """Stops every server gracefully, then the actors. Idempotent."""
        stops = [a.stop.remote(grace) for a in self.actors]
        for ref in stops:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                pass  # the actor is gone, and its server with it
        for a in self.actors:
            ray.kill(a)
        self.actors = []

    def __enter__(self) -> RayServers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def start_servers(
    *,
    placement_group: Any = None,
    binary: str | None = None,
    host: str | None = None,
    port: int = 0,
    serve_args: Sequence[str] = (),
    num_cpus: float = 0,
    startup_timeout: float = 120.0,
) -> RayServers:
    """Starts one `codegym serve` per alive Ray node, or per bundle of `placement_group`.

    `num_cpus` is what each actor reserves (0 by default: the sandbox, not Ray, paces programs).
    `port` 0 picks a free port on each node; `serve_args` are passed to `codegym serve`.
    """
    actor = ray.remote(CodegymServer)
    if placement_group is not None:
        ray.get(placement_group.ready())
        strategies = [
            PlacementGroupSchedulingStrategy(placement_group=placement_group, placement_group_bundle_index=i)
            for i in range(placement_group.bundle_count)
        ]
    else:
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        strategies = [NodeAffinitySchedulingStrategy(node_id=n, soft=False) for n in nodes]
    actors = [
        actor.options(num_cpus=num_cpus, scheduling_strategy=s).remote(
            binary, host, port, list(serve_args), startup_timeout
        )
        for s in strategies
    ]
    try:
        infos = ray.get([a.info.remote() for a in actors])
    except Exception:
        for a in actors:
            ray.kill(a)
        raise
    return RayServers(actors, infos)
