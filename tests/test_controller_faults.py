"""Seeded fault run against a real 3-controller quorum: kill -9, SIGSTOP/SIGCONT and restarts
while a client keeps creating topics (retrying retriable errors, as clients do).

Checked after healing, on every controller's committed log (via Fetch into a local state):
- every CreateTopics that was acknowledged is there, with the topic id it was acknowledged with;
- every controller holds the same committed log (same offsets, same bytes);
- at most one active controller at the end, and all agree on it.
The default suite makes 4 faults, `-m soak` 8 (RAFTKA_FAULT_ROUNDS=N sets both).
Reproduce a failure with RAFTKA_SEED=<seed printed on failure>.
"""
from __future__ import annotations

import asyncio
import os
import random
import threading
import time
import uuid

import pytest

from raftka.common import errors
from raftka.raft_meta.metadata.loader import MetadataLoader
from raftka.raft_meta.metadata.state import ControllerStateMachine
from raftka.cluster import wait_until
from raftka.cluster.controller_client import controller_request
from raftka.raft_meta.metadata.fetcher import fetch_entries


def committed_log(cluster, node_id):
    partition, entries = asyncio.run(fetch_entries("%s:%d" % cluster.controller_address(node_id)))
    assert partition["snapshot_id"]["end_offset"] < 0  # the whole log is still in the window
    return entries


SMOKE_ROUNDS = 4
SOAK_ROUNDS = 8


@pytest.mark.slow
@pytest.mark.parametrize("rounds", [pytest.param(SMOKE_ROUNDS, id=f"{SMOKE_ROUNDS}-faults"),
                                    pytest.param(SOAK_ROUNDS, id=f"{SOAK_ROUNDS}-faults", marks=pytest.mark.soak)])
def test_acknowledged_topic_creations_survive_kills_and_pauses(cluster_factory, rounds):
    seed = int(os.environ.get("RAFTKA_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    rounds = int(os.environ.get("RAFTKA_FAULT_ROUNDS", rounds))
    cluster = cluster_factory(voters=3, configs={"broker.session.timeout.ms": 60000})
    try:
        cluster.wait_for_leader(timeout_s=30)
        code, out = controller_request(cluster.bootstrap_controllers, 62, {
            "broker_id": 1, "cluster_id": cluster.cluster_id, "incarnation_id": uuid.uuid4().hex,
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 1}]}, timeout_s=20)
        assert code == errors.NONE, out
        epoch = out["broker_epoch"]
        wait_until(lambda: controller_request(cluster.bootstrap_controllers, 63, {
            "broker_id": 1, "broker_epoch": epoch, "current_metadata_offset": 1 << 40})[1].get("is_fenced") is False,
            20, what="broker unfenced")
        acked: dict[str, str] = {}
        stop = threading.Event()

        def workload():
            i = 0
            while not stop.is_set():
                name = f"t{i}"
                code, out = controller_request(cluster.bootstrap_controllers, 19, {"topics": [
                    {"name": name, "num_partitions": 1, "replication_factor": 1}]}, timeout_s=5)
                if code == errors.NONE:
                    result = out["topics"][0]
                    if result["error_code"] == errors.NONE:
                        acked[name] = result["topic_id"]
                        i += 1
                    elif result["error_code"] == errors.TOPIC_ALREADY_EXISTS:
                        i += 1  # an earlier attempt with unknown outcome did commit
                time.sleep(0.01)
        thread = threading.Thread(target=workload, daemon=True)
        thread.start()
        for _ in range(rounds):
            victim = rng.choice(list(cluster.nodes))
            fault = rng.choice(["kill", "pause"])
            if fault == "kill":
                cluster.kill(victim)
                time.sleep(rng.uniform(0.2, 1.5))
                cluster.restart(victim)
            else:
                cluster.pause(victim)
                time.sleep(rng.uniform(0.2, 1.5))
                cluster.resume(victim)
            time.sleep(rng.uniform(0.2, 1.0))
        stop.set()
        thread.join(30)
        assert acked, "the workload never got an acknowledgement"
        cluster.wait_for_leader(timeout_s=30)

        def same_log_everywhere():
            logs = [committed_log(cluster, n) for n in cluster.nodes]
            return logs[0] and all(log == logs[0] for log in logs) and logs[0]
        log = wait_until(same_log_everywhere, 30, what="identical committed logs")
        state = ControllerStateMachine(MetadataLoader())
        for offset, record in log:
            state.apply(record, offset)
        topics = state.metadata.image.topics
        lost = {n: t for n, t in acked.items() if n not in topics or topics[n].topic_id != t}
        print(f"\nseed {seed}: {len(acked)} acknowledged creations over {rounds} faults, log of {len(log)} records")
        assert not lost, f"acknowledged creations lost or changed: {sorted(lost)[:10]}"

        def one_agreed_leader():
            views = [cluster.describe_quorum(n) for n in cluster.nodes]
            return sum(v["active"] for v in views) == 1 and len({v["leader_id"] for v in views}) == 1
        wait_until(one_agreed_leader, 30, what="one active controller that every controller agrees on")
    except BaseException:
        print(f"RAFTKA_SEED={seed}")
        raise
