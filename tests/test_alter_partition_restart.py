"""A broker restart with a few hundred partitions (1 controller + 3 brokers, RF 3): every
partition is back to a full ISR quickly, its leaders ask for the ISR changes in a few batched
AlterPartition requests (not one per partition), and nobody is fenced on the way (#scale)."""
from __future__ import annotations

import re
import time

from raftka.client import NewTopic
from raftka.cluster import wait_until

from test_broker import FAST

TOPICS = 30
PARTITIONS_PER_TOPIC = 10
FULL_ISR_S_MAX = 30.0
BATCH = re.compile(r"AlterPartition: (\d+) ISR change")


def _full(admin, broker=None):
    partitions = [p for t in admin.describe_topics() if t["topic"].startswith("r") for p in t["partitions"]]
    if len(partitions) < TOPICS * PARTITIONS_PER_TOPIC:
        return False
    if broker is not None:  # broker out of every ISR
        return all(broker not in p["isr"] for p in partitions)
    return all(p["leader"] >= 0 and set(p["isr"]) >= set(p["replicas"]) for p in partitions)


def _batches(cluster, since):
    """(requests, ISR changes) logged by the brokers' AlterPartitionManagers, after ``since``
    bytes of each log."""
    requests = changes = 0
    for b in cluster.broker_ids:
        with open(cluster.nodes[b].log_path, errors="replace") as f:
            f.seek(since.get(b, 0))
            for n in BATCH.findall(f.read()):
                requests += 1
                changes += int(n)
    return requests, changes


def test_a_restarted_broker_is_back_in_every_isr_through_batched_alter_partition(
        module_cluster_factory, module_admin_factory):
    cluster = module_cluster_factory("isr-restart", controllers=1, brokers=3, configs=FAST)
    admin = module_admin_factory(cluster, request_timeout_ms=30_000)
    admin.create_topics([NewTopic(f"r{i:03d}", PARTITIONS_PER_TOPIC, 3) for i in range(TOPICS)])
    wait_until(lambda: _full(admin), 60, interval_s=0.5, what="every partition with a full ISR")
    controller = next(n for n in cluster.nodes if n not in cluster.broker_ids)
    victim = cluster.broker_ids[0]
    cluster.kill(victim)
    wait_until(lambda: _full(admin, victim), 30, interval_s=0.5, what=f"broker {victim} out of every ISR")
    since = {b: cluster.nodes[b].log_path.stat().st_size for b in cluster.broker_ids if b != victim}
    fenced_before = cluster.nodes[controller].log_path.read_text(errors="replace").count("fenced broker")
    restarted = time.monotonic()
    cluster.restart(victim)
    wait_until(lambda: _full(admin), FULL_ISR_S_MAX, interval_s=0.5, what="every partition back to a full ISR")
    took_s = time.monotonic() - restarted
    requests, changes = _batches(cluster, since)
    # The restarted broker rejoins every ISR it was in: about 300 expansions, a few requests.
    assert changes >= TOPICS * PARTITIONS_PER_TOPIC // 2, (requests, changes)
    assert requests * 10 <= changes, f"{requests} AlterPartition requests for {changes} ISR changes"
    fenced_after = cluster.nodes[controller].log_path.read_text(errors="replace").count("fenced broker")
    assert fenced_after == fenced_before, f"{fenced_after - fenced_before} fencing(s) after the restart"
    assert took_s < FULL_ISR_S_MAX
