"""Brokers reach each other and the controllers through proxies (broker.dial.proxies,
controller.rpc.proxies), as the chaos harness runs them: a proxy per directed link from
chaos/cluster.py (``raftka chaos proxy``, Toxiproxy's API). Cutting a leader's link to one
follower drops that follower from the ISR while acks=all goes on; healing the link brings it back.
If a broker dialed its peer directly instead of through its proxy, the cut would change nothing
and the ISR wait below would time out."""
from __future__ import annotations

from raftka.chaos.cluster import Network, ProxiedCluster, ProxyService
from raftka.common import errors
from test_broker import FAST, batch, create_topic, leader_address, produce, wait_for_partition

SEED = 11  # the proxy server's random choices (no toxic here draws any)


def test_followers_fetch_through_proxies_and_a_cut_link_only_shrinks_the_isr(tmp_path):
    proxies = ProxyService(tmp_path / "proxy", seed=SEED)
    try:
        cluster = ProxiedCluster.start(tmp_path / "cluster", proxies, controllers=1, brokers=3, configs=FAST)
        try:
            network = Network(cluster)
            brokers = cluster.broker_ids
            create_topic(cluster, "proxied")
            leader, address = leader_address(cluster, "proxied")
            assert produce(address, "proxied", batch([b"through proxies"]))["error_code"] == errors.NONE
            follower = next(b for b in brokers if b != leader)
            network.cut_links([(follower, leader)])  # only the follower's fetch link
            wait_for_partition(cluster, "proxied", 0, lambda p: follower not in p["isr_nodes"], among=[leader])
            assert produce(address, "proxied", batch([b"with two"]))["error_code"] == errors.NONE
            network.heal()
            wait_for_partition(cluster, "proxied", 0, lambda p: len(p["isr_nodes"]) == 3, among=[leader],
                               timeout_s=30)
        finally:
            cluster.close()
    finally:
        proxies.close()
