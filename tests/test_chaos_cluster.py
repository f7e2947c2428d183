"""Every directed link of a chaos cluster goes through its own proxy: cutting a link kind has the
effect that link carries, and nothing else breaks.

One cluster (3 controllers, 3 brokers, 24 proxies behind `raftka chaos proxy`) for the module;
each test heals the network at the end. Proves: clients only know the proxies (brokers advertise
them); cutting a follower's fetch links drops it from the ISR; cutting a broker's controller
links fences it; cutting the active controller's Raft links elects another; and the workload +
final read + checker come out valid on a healthy cluster.
"""
from __future__ import annotations

import pytest

from raftka.chaos.checker import check
from raftka.chaos.cluster import CLIENT, Network, ProxiedCluster, ProxyService, wait_healthy
from raftka.chaos.history import HistoryWriter, read_history
from raftka.chaos.workload import Workload, WorkloadConfig
from raftka.client import AdminClient, NewTopic
from raftka.cluster import wait_until

SEED = 8
FAST = {"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500,
        "replica.lag.time.max.ms": 3000, "replica.fetch.wait.max.ms": 200}


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    root = tmp_path_factory.mktemp("proxied")
    proxies = ProxyService(root, seed=SEED)
    try:
        cluster = ProxiedCluster.start(root, proxies, configs=FAST)
    except BaseException:
        proxies.close()
        raise
    admin = AdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=10_000)
    try:
        yield cluster, Network(cluster), admin
    finally:
        admin.close()
        cluster.close()
        proxies.close()


def partition_of(admin, topic, partition=0):
    return admin.describe_topics([topic])[0]["partitions"][partition]


def test_there_is_one_proxy_per_directed_link_and_clients_only_see_proxies(proxied):
    cluster, network, admin = proxied
    links = set(cluster.links)
    brokers, controllers = cluster.broker_ids, cluster.controller_ids
    assert len(links) == 3 + 3 * 2 + 3 * 3 + 3 * 2
    assert {(CLIENT, b) for b in brokers} <= links
    assert {(a, c) for a in brokers for c in controllers} <= links
    advertised = {f"{b['host']}:{b['port']}" for b in admin.describe_cluster()["brokers"]}
    assert advertised == set(cluster.bootstrap_servers.split(","))
    assert not advertised & {cluster.broker_address(b) for b in brokers}
    assert network.all_links_up()


def test_cutting_a_followers_fetch_links_drops_it_from_the_isr(proxied):
    cluster, network, admin = proxied
    admin.create_topics([NewTopic("links", 1, 3, topic_configs={"min.insync.replicas": "2"})])
    leader = wait_healthy(admin, "links", 3, 30)[0]["leader"]
    follower = next(b for b in cluster.broker_ids if b != leader)
    try:
        network.cut(follower, leader)
        wait_until(lambda: follower not in partition_of(admin, "links")["isr"], 30,
                   what=f"broker {follower} out of the ISR (seed {SEED})")
        assert leader in partition_of(admin, "links")["isr"]
    finally:
        network.heal()
    wait_healthy(admin, "links", 3, 30)


def test_cutting_a_brokers_controller_links_fences_it(proxied):
    cluster, network, admin = proxied
    broker = cluster.broker_ids[-1]
    fenced = lambda: next(b for b in admin.describe_cluster()["brokers"] if b["node_id"] == broker)["fenced"]
    try:
        network.isolate(broker, cluster.controller_ids)
        wait_until(fenced, 30, what=f"broker {broker} fenced (seed {SEED})")
    finally:
        network.heal()
    wait_until(lambda: not fenced(), 30, what=f"broker {broker} unfenced after heal")


def test_cutting_the_active_controllers_raft_links_elects_another(proxied):
    cluster, network, admin = proxied
    active = cluster.wait_for_leader(timeout_s=30)
    others = [c for c in cluster.controller_ids if c != active]
    try:
        network.isolate(active, others)  # its broker links stay: only Raft is cut
        new = cluster.wait_for_leader(timeout_s=30, among=others)
        assert new != active
    finally:
        network.heal()
    wait_until(lambda: sum(cluster.describe_quorum(c)["active"] for c in cluster.controller_ids) == 1, 30,
               what="one active controller after heal")
    wait_until(lambda: not any(b["fenced"] for b in admin.describe_cluster()["brokers"]), 30,
               what="every broker unfenced after heal")


def test_the_workload_on_a_healthy_cluster_is_valid(proxied, tmp_path):
    cluster, network, admin = proxied
    config = WorkloadConfig(topic="healthy", rate_per_producer=50)
    with HistoryWriter(tmp_path / "history.jsonl") as history:
        workload = Workload(cluster.bootstrap_servers, history, config, seed=SEED)
        try:
            workload.setup()
            workload.start()
            wait_until(lambda: workload.counters.acked >= 200 and workload.counters.read >= 200, 60,
                       what="200 acknowledged and read")
            workload.stop(10)
            final = workload.final_read(30)
        finally:
            workload.close()
    verdict = check(read_history(tmp_path / "history.jsonl"))
    assert verdict.valid, "\n".join(verdict.summary_lines()) + f"\nseed {SEED}"
    assert sum(len(r) for r in final["records"].values()) == verdict.stats["acked"] >= 200
