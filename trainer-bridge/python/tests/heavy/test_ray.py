"""codegym.ray on a real local multi-node Ray cluster (`ray.cluster_utils.Cluster`: a head and two
worker nodes, each its own raylet, on this machine): one `codegym serve` per node, a Python rollout
spread over the cluster through the pool, one node's server killed mid-rollout, actor death, and a
clean shutdown."""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import ray
from conftest import codegym_bin
from ray.cluster_utils import Cluster

import codegym
import codegym.ray

pytestmark = pytest.mark.heavy

# Ray's workers cannot import this test module: ship its functions by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

CARTPOLE = "classic/CartPole-v1"
STEPS = 12


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): look at its state.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(cond, what: str, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@ray.remote
class Progress:
    def __init__(self) -> None:
        self.steps = 0

    def add(self) -> None:
        self.steps += 1

    def count(self) -> int:
        return self.steps


def episode(seed: int, progress=None):
    """A fixed policy, slow like a model: the rewards depend only on the seed."""

    def play(session: codegym.PooledSession) -> list[float]:
        session.reset(seed=seed)
        rewards = []
        for t in range(STEPS):
            if progress is not None:
                progress.add.remote()
            time.sleep(0.05)
            step = session.step(t % 2)
            rewards.append(step.reward)
            if step.terminated:
                break
        return rewards

    return play


@ray.remote(num_cpus=0)
def rollout_share(addresses: list[str], seeds: list[int], progress) -> list[dict]:
    """One Ray task's share of the rollout: its episodes, four at a time, through a pool."""
    with codegym.ServerPool(addresses, health_interval=0.2, timeout=60.0) as pool:

        def one(seed: int) -> dict:
            played = pool.play(CARTPOLE, episode(seed, progress))
            return {"seed": seed, "rewards": played.result, "server": played.server, "restarts": played.restarts}

        with ThreadPoolExecutor(4) as threads:
            return list(threads.map(one, seeds))


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(2):
        c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, runtime_env={"env_vars": {"RAY_DEDUP_LOGS": "0"}})
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def test_one_server_per_node_a_rollout_survives_a_killed_server_and_shutdown_is_clean(cluster):
    servers = codegym.ray.start_servers(binary=str(codegym_bin()), host="127.0.0.1")
    infos = servers.infos
    assert len(infos) == 3
    assert len({i["node_id"] for i in infos}) == 3, "one server per node"
    assert all(i["alive"] and pid_alive(i["pid"]) for i in infos)
    assert len(servers.env_server_args()) == 6

    # 24 episodes in three Ray tasks; the first server dies once they are under way.
    progress = Progress.remote()
    seeds = list(range(24))
    shares = [rollout_share.remote(servers.addresses, seeds[i::3], progress) for i in range(3)]
    wait_for(lambda: ray.get(progress.count.remote()) >= 40, "the rollout to get going")
    victim = infos[0]
    ray.get(servers.actors[0].kill_server.remote())
    assert not pid_alive(victim["pid"])
    results = [r for share in ray.get(shares) for r in share]

    assert sorted(r["seed"] for r in results) == seeds, "every episode exactly once"
    restarted = [r for r in results if r["restarts"]]
    assert restarted, "no episode was on the killed server when it died"
    for r in restarted:
        assert all(x.server == victim["address"] for x in r["restarts"])
        assert r["server"] != victim["address"]
    # A replayed episode is the same episode: its rewards match a fresh play of its seed.
    with codegym.ServerPool(servers.addresses) as pool:
        for r in restarted:
            assert pool.play(CARTPOLE, episode(r["seed"])).result == r["rewards"]

    # An actor that dies takes its server with it.
    second = servers.refresh()[1]
    ray.kill(servers.actors[1])
    wait_for(lambda: not pid_alive(second["pid"]), "the dead actor's server to exit")

    third = servers.infos[2]
    servers.shutdown(grace=30)
    assert not pid_alive(third["pid"])
