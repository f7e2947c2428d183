"""Voters reached through proxies (controller.quorum.voter.proxies): identity and dial address
kept apart, as the chaos harness needs. The proxies are the harness's own (chaos/cluster.py: a
proxy per directed link behind ``raftka chaos proxy``, Toxiproxy's API).

Cutting every link of the active controller isolates it although its process lives: the rest
elect another leader, and the old one steps down. Were the voters dialing each other directly,
the cut would change nothing and no other leader would be elected.
"""
from __future__ import annotations

from raftka.chaos.cluster import Network, ProxiedCluster, ProxyService
from raftka.cluster import wait_until

SEED = 12  # the proxy server's random choices (no toxic here draws any)


def test_voters_talk_through_proxies_and_an_isolated_leader_is_replaced(tmp_path):
    proxies = ProxyService(tmp_path / "proxy", seed=SEED)
    try:
        cluster = ProxiedCluster.start(tmp_path / "cluster", proxies, controllers=3, brokers=0)
        try:
            network = Network(cluster)
            voters = cluster.controller_ids
            leader = cluster.wait_for_leader(timeout_s=30)
            wait_until(lambda: all(v["endpoint"] for v in cluster.describe_quorum(leader)["voters"]), 20,
                       what="all endpoints committed through the proxies")
            others = [n for n in voters if n != leader]
            network.isolate(leader, others)  # both directions, the process still alive
            new = cluster.wait_for_leader(timeout_s=30, among=others)
            assert new != leader and cluster.alive(leader)
            # The isolated old leader steps down (leaderFallbackTimeout) instead of claiming to lead.
            wait_until(lambda: not cluster.describe_quorum(leader)["active"], 20, what="old leader steps down")
            network.heal()

            def agreed():  # no PreVote in pysyncobj: the rejoining node may force one more election
                views = [cluster.describe_quorum(n) for n in voters]
                leaders = {v["leader_id"] for v in views}
                return len(leaders) == 1 and -1 not in leaders and sum(v["active"] for v in views) == 1
            wait_until(agreed, 30, what="all three agree on one active controller after healing")
        finally:
            cluster.close()
    finally:
        proxies.close()
