"""Bugs the chaos harness found, each as a minimal reproduction. An open one is xfail(strict)
(it fails, XPASS, once fixed, so the fix is noticed); a fixed one stays here, in the default
suite, as its regression test.
"""
from __future__ import annotations


from raftka.broker.group.records import partition_for
from raftka.chaos.cluster import CLIENT, Network, ProxiedCluster, ProxyService
from raftka.chaos.scenarios import CLUSTER_CONFIGS
from raftka.client import AdminClient, Consumer, NewTopic, TopicPartition
from raftka.cluster import wait_until

SEED = 3
OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions default


def test_committed_offsets_read_back_never_go_back_when_the_coordinator_is_isolated(tmp_path):
    """Found by `raftka chaos run --scenario isolate-leader --seed 3` and `majority-minority
    --seed 1` (45 s): a consumer read committed offsets back lower than another consumer had read
    them just before (nonmonotonic_commits).

    The group coordinator is the leader of the group's __consumer_offsets partition. Cut off from
    the other brokers and the controllers, but not from clients, it is fenced and replaced, yet
    does not know it: it keeps answering OffsetFetch from its in-memory groups
    (broker/group/offsets.py OffsetManager.offset_fetch: the coordinator's owner_error only asks "do I lead the partition?").
    A client still connected to it reads the offsets of the moment it was cut off, after newer
    commits were accepted by the new coordinator."""
    proxies = ProxyService(tmp_path, seed=SEED)
    cluster = ProxiedCluster.start(tmp_path, proxies, configs=CLUSTER_CONFIGS)
    clients = []
    try:
        network = Network(cluster)
        admin = AdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=10_000)
        clients.append(admin)
        admin.create_topics([NewTopic("t", 1, 3)])
        tp = TopicPartition("t", 0)
        first = Consumer(bootstrap_servers=cluster.bootstrap_servers, group_id="g", enable_auto_commit=False)
        clients.append(first)
        first.assign([tp])
        wait_until(lambda: first.commit({tp: 5}) is None, 60, what="commit 5 (manual assignment, empty group)")
        offsets_partition = partition_for("g", OFFSETS_PARTITIONS)
        coordinator = admin.describe_topics(["__consumer_offsets"])[0]["partitions"][offsets_partition]["leader"]

        # A reader whose only bootstrap is the coordinator: it reads through it.
        reader = Consumer(bootstrap_servers=cluster.listen(CLIENT, coordinator), group_id="g", enable_auto_commit=False)
        clients.append(reader)
        reader.assign([tp])
        assert reader.committed(tp) == 5

        network.isolate(coordinator, [n for n in cluster.nodes if n != coordinator])  # clients still reach it
        others = ",".join(cluster.listen(CLIENT, b) for b in cluster.broker_ids if b != coordinator)
        fresh_admin = AdminClient(bootstrap_servers=others, request_timeout_ms=10_000)
        clients.append(fresh_admin)
        wait_until(lambda: fresh_admin.describe_topics(["__consumer_offsets"])[0]["partitions"][offsets_partition]
                   ["leader"] not in (-1, coordinator), 60, what="a new coordinator elected")
        writer = Consumer(bootstrap_servers=others, group_id="g", enable_auto_commit=False)
        clients.append(writer)
        writer.assign([tp])
        wait_until(lambda: writer.commit({tp: 9}) is None, 60, what="commit 9 through the new coordinator")
        assert writer.committed(tp) == 9  # read back: 9, and this read completed

        # A later read through the old coordinator must not see an older value.
        assert reader.committed(tp) >= 9, f"read 5 back after 9 was committed and read (seed {SEED})"
    finally:
        for c in clients:
            try:
                c.close()
            except Exception:
                pass
        cluster.close()
        proxies.close()
