"""Rack-aware placement with real processes: brokers started with ``broker.rack`` register their
rack, the active controller spreads each partition's replicas over racks, and every broker's
Metadata answer shows each broker's rack to clients.

One controller and four broker processes (racks r1, r1, r2, r2) from raftka.cluster; the topic
is created through a broker (forwarded to the controller), as a client would.
"""
from __future__ import annotations

import pytest

from raftka.common import errors
from raftka.common.transport import call_sync
from raftka.cluster import Cluster, wait_until

METADATA, CREATE_TOPICS = 3, 19
RACKS = ["r1", "r1", "r2", "r2"]


@pytest.fixture(scope="module")
def racked(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("racks"), controllers=1, brokers=len(RACKS))
    try:
        for broker_id, rack in zip(cluster.broker_ids, RACKS):
            cluster.nodes[broker_id].extra["broker.rack"] = rack
        cluster.ensure_running()
        yield cluster
    finally:
        cluster.close()


def test_replicas_of_every_partition_span_both_racks_and_brokers_report_their_racks(racked):
    address = racked.broker_address(racked.broker_ids[0])
    code, out = call_sync(address, CREATE_TOPICS, {"topics": [{"name": "racked", "num_partitions": 8,
                                                               "replication_factor": 2, "configs": []}]},
                          timeout_ms=20_000)
    assert code == errors.NONE and out["topics"][0]["error_code"] == errors.NONE, out
    rack_of = dict(zip(racked.broker_ids, RACKS))

    def metadata(broker_id):
        code, out = call_sync(racked.broker_address(broker_id), METADATA, {"topics": [{"name": "racked"}]}, timeout_ms=5000)
        assert code == errors.NONE
        return out

    for broker_id in racked.broker_ids:  # every broker's image, once it has the topic
        wait_until(lambda: metadata(broker_id)["topics"][0]["error_code"] == errors.NONE, 20,
                   what=f"broker {broker_id} knows the topic")
        out = metadata(broker_id)
        assert {b["node_id"]: b["rack"] for b in out["brokers"]} == rack_of
        partitions = out["topics"][0]["partitions"]
        assert len(partitions) == 8
        for p in partitions:
            assert {rack_of[r] for r in p["replica_nodes"]} == {"r1", "r2"}, p
        leaders = [p["leader_id"] for p in partitions]
        assert set(leaders) == set(racked.broker_ids)  # leadership spread over every broker
        assert max(leaders.count(b) for b in racked.broker_ids) == 2
