"""A pool of codegym servers behind one client: the Python twin of the rollout engine's remote backend.

- Servers come from `host:port` (or `http://host:port`) addresses; a name that resolves to several
  addresses (a Kubernetes headless Service) is several servers. Names are resolved again every
  `resolve_interval` seconds.
- A background thread checks every server with the standard `grpc.health.v1` protocol every
  `health_interval` seconds; only SERVING servers get new sessions (a draining server answers
  NOT_SERVING).
- `ServerPool.session(env_id, **kwargs)` opens a `Session` stream on the least-loaded healthy server
  (load: this pool's open sessions there) and makes the env. UNAVAILABLE, RESOURCE_EXHAUSTED, a broken
  connection or no answer in time move it to another server, with backoff; any other error is raised.
- The returned `PooledSession` stays on its server for its whole life (an episode's state lives
  there). Every call has a deadline (`timeout`). When the server is lost (stream broken or ended, no
  answer in time, UNAVAILABLE) the call raises `ServerLost`: play the episode again from its start
  with the same seed on a new session (`pool.session(..., avoid=lost.server)`).
"""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, ParamSpec, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from codegym._errors import CodegymError
from codegym.client import Client, Session, StepResult
from codegym.options import ClientOptions

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")

HEALTH_SERVICE = "codegym.v1.EnvService"

# What says "this server cannot take the session now, another may" (see the server's status table).
_MOVE_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED}
# What a broken stream or connection looks like from the client's side.
_TRANSPORT_CODES = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}


class ServerLost(CodegymError):
    """The session's server was lost mid-session; `server` is its address. Restart the episode."""

    def __init__(self, server: str, details: str) -> None:
        super().__init__(grpc.StatusCode.UNAVAILABLE, f"env server {server} lost: {details}", "Session")
        self.server = server


def _split(address: str) -> tuple[str, int]:
    """`host:port`, `[v6]:port` or `http://host:port` -> (host, port)."""
    rest = address.removeprefix("http://")
    if "://" in rest or "/" in rest:
        raise ValueError(f"bad env server address {address!r}: expected host:port or http://host:port")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"bad env server address {address!r}: expected host:port")
    return host.strip("[]"), int(port)


def resolve(addresses: Sequence[str]) -> list[str]:
    """Every `ip:port` the addresses stand for now (sorted, deduplicated), via the system resolver."""
    found: set[str] = set()
    for address in addresses:
        host, port = _split(address)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        if not infos:
            raise OSError(f"{host}:{port} has no address")
        for family, _, _, _, sockaddr in infos:
            ip = sockaddr[0]
            found.add(f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}")
    return sorted(found)


@dataclass
class _Server:
    address: str
    client: Client
    health: str = "unknown"  # serving / not_serving / down / unknown
    load: int = 0
    busy_until: float = 0.0
    health_stub: Any = field(default=None, repr=False)


@dataclass(frozen=True)
class Restart:
    """An attempt of an episode lost with its server."""

    server: str
    reason: str


@dataclass(frozen=True)
class Played(Generic[T]):
    """What `ServerPool.play` returns: the episode's result, where it ran, the attempts it lost."""

    result: T
    server: str
    restarts: list[Restart]


class ServerPool:
    """Servers, health, placement and retries; thread-safe. Use as a context manager or `close()`."""

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        timeout: float = 300.0,
        health_interval: float = 1.0,
        health_timeout: float = 2.0,
        resolve_interval: float = 10.0,
        place_timeout: float = 120.0,
        backoff_initial: float = 0.05,
        backoff_max: float = 2.0,
        busy_cool_down: float = 1.0,
        options: ClientOptions | None = None,
    ) -> None:
        if not addresses:
            raise ValueError("no env server address")
        self._targets = list(addresses)
        self.timeout = timeout
        self.health_timeout = health_timeout
        self.place_timeout = place_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.busy_cool_down = busy_cool_down
        self._options = options
        self._lock = threading.Lock()
        self._servers: dict[str, _Server] = {}
        self._turn = 0
        self._stop = threading.Event()
        self._replace(resolve(self._targets))
        self.check_health()
        self._thread = threading.Thread(
            target=self._maintain, args=(health_interval, resolve_interval), name="codegym-pool", daemon=True
        )
        self._thread.start()

    # --- servers ------------------------------------------------------------------------------------

    def servers(self) -> list[str]:
        """Addresses (`ip:port`) of the servers known now."""
        with self._lock:
            return list(self._servers)

    def health(self) -> dict[str, str]:
        """Each server's last known health: `serving`, `not_serving`, `down` or `unknown`."""
        with self._lock:
            return {a: s.health for a, s in self._servers.items()}

    def load(self) -> dict[str, int]:
        """Sessions this pool has open on each server."""
        with self._lock:
            return {a: s.load for a, s in self._servers.items()}

    def _replace(self, addrs: list[str]) -> None:
        with self._lock:
            for a in addrs:
                if a not in self._servers:
                    client = Client(a, timeout=self.timeout, options=self._options)
                    self._servers[a] = _Server(a, client, health_stub=health_pb2_grpc.HealthStub(client._channel))
            for gone in [a for a in self._servers if a not in addrs]:
                # Open sessions keep their own reference to the server's client.
                del self._servers[gone]

    def check_health(self) -> None:
        """Checks every server now (the background thread does it every `health_interval`)."""
        with self._lock:
            servers = list(self._servers.values())
        for s in servers:
            try:
                resp = s.health_stub.Check(
                    health_pb2.HealthCheckRequest(service=HEALTH_SERVICE), timeout=self.health_timeout
                )
                health = "serving" if resp.status == health_pb2.HealthCheckResponse.SERVING else "not_serving"
            except grpc.RpcError as err:
                health = "not_serving" if err.code() == grpc.StatusCode.NOT_FOUND else "down"
            s.health = health

    def _maintain(self, health_interval: float, resolve_interval: float) -> None:
        next_resolve = time.monotonic() + resolve_interval
        while not self._stop.wait(health_interval):
            if time.monotonic() >= next_resolve:
                next_resolve = time.monotonic() + resolve_interval
                try:
                    self._replace(resolve(self._targets))
                except OSError:
                    pass  # keep the servers we have: DNS may be back next time
            self.check_health()

    # --- placement ----------------------------------------------------------------------------------

    def _pick(self, exclude: set[str]) -> _Server | None:
        now = time.monotonic()
        with self._lock:
            eligible = [
                s
                for s in self._servers.values()
                if s.health == "serving" and s.busy_until <= now and s.address not in exclude
            ]
            if not eligible:
                return None
            least = min(s.load for s in eligible)
            tied = [s for s in eligible if s.load == least]
            server = tied[self._turn % len(tied)]
            self._turn += 1
            server.load += 1
            return server

    def _release(self, server: _Server) -> None:
        with self._lock:
            server.load -= 1

    def session(self, env_id: str, *, avoid: str | None = None, **kwargs: Any) -> PooledSession:
        """A new session of `env_id` (made with `kwargs`) on the least-loaded healthy server other than
        `avoid`, retrying elsewhere with backoff for up to `place_timeout` seconds."""
        give_up = time.monotonic() + self.place_timeout
        tried: set[str] = {avoid} if avoid else set()
        last = "no env server is serving"
        attempt = 0
        while True:
            attempt += 1
            server = self._pick(tried)
            if server is None and tried:
                tried.clear()
                server = self._pick(tried)
            if server is not None:
                try:
                    return PooledSession(self, server, env_id, kwargs)
                except CodegymError as err:
                    if err.code not in _MOVE_CODES | _TRANSPORT_CODES:
                        raise
                    if err.code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                        server.busy_until = time.monotonic() + self.busy_cool_down
                    else:
                        server.health = "down"
                    tried.add(server.address)
                    last = f"{server.address}: {err}"
            pause = random.uniform(0, min(self.backoff_max, self.backoff_initial * 2 ** (attempt - 1)))
            if time.monotonic() + pause >= give_up:
                raise CodegymError(
                    grpc.StatusCode.UNAVAILABLE, f"no env server took the session (last: {last})", "Session"
                )
            time.sleep(pause)

    def play(
        self, env_id: str, episode: Callable[[PooledSession], T], *, max_restarts: int = 3, **kwargs: Any
    ) -> Played[T]:
        """Plays one episode: `episode(session)` on a new session, again from its start on another
        server each time its server is lost (up to `max_restarts` times, then `ServerLost` is
        raised). `episode` must be a pure function of what the env answers (reset with a fixed seed),
        so a replay is the same episode."""
        restarts: list[Restart] = []
        avoid = None
        while True:
            session = self.session(env_id, avoid=avoid, **kwargs)
            try:
                result = episode(session)
                return Played(result, session.server, restarts)
            except ServerLost as lost:
                if len(restarts) >= max_restarts:
                    raise
                restarts.append(Restart(lost.server, lost.details))
                avoid = lost.server
            finally:
                session.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        with self._lock:
            servers = list(self._servers.values())
        for s in servers:
            s.client.close_channel()

    def __enter__(self) -> ServerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PooledSession:
    """A `Session` stream pinned to one server of a pool; every call has the pool's deadline.

    Raises `ServerLost` when the server is lost; other failures raise `CodegymError` as usual.
    """

    def __init__(self, pool: ServerPool, server: _Server, env_id: str, kwargs: Mapping[str, Any]) -> None:
        self._pool = pool
        self._server = server
        self.server = server.address
        self._released = False
        self.lost: str | None = None
        self._session: Session = server.client.session()
        try:
            self.session_id, self.spec = self._call(self._session.make, env_id, **kwargs)
        except ServerLost as lost:
            self.close()
            raise CodegymError(grpc.StatusCode.UNAVAILABLE, str(lost), "Session") from None
        except BaseException:
            self.close()
            raise

    def _call(self, method: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        # The stream has no per-message deadline: a timer cancels it when a call overstays.
        timer = threading.Timer(self._pool.timeout, self._session._responses.cancel)
        timer.start()
        try:
            return method(*args, **kwargs)
        except CodegymError as err:
            if timer.finished.is_set():
                raise ServerLost(self.server, f"no answer within {self._pool.timeout}s") from None
            # An error answered on a live stream is the server's verdict on the request; a stream
            # that ended, or UNAVAILABLE (the server cannot run the session), is a lost server.
            if self._session._responses.done() or err.code == grpc.StatusCode.UNAVAILABLE:
                raise ServerLost(self.server, f"{err.code.name}: {err.details}") from None
            raise
        finally:
            timer.cancel()

    def _checked(self, method: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        if self.lost is not None:
            raise ServerLost(self.server, self.lost)
        try:
            return self._call(method, *args, **kwargs)
        except ServerLost as lost:
            self.lost = lost.details
            # Until a health check says otherwise, nothing new goes there.
            self._server.health = "down"
            raise

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        return self._checked(self._session.reset, seed, options)

    def step(self, action: Any) -> StepResult:
        return self._checked(self._session.step, action)

    def close(self) -> None:
        """Ends the stream (the server closes the env) and frees the server's slot. Idempotent."""
        self._session.close()
        if not self._released:
            self._released = True
            self._pool._release(self._server)

    def __enter__(self) -> PooledSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
