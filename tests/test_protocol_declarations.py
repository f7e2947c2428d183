"""Bodies are declared once per API (common/messages/) and the listeners hold requests to them.

A real broker and controller close a connection whose request does not decode as its
declaration says, without a traceback in their logs, and keep serving; the broker's answers to
valid requests (and to ones with per-partition errors) decode as the declared responses. (The
codec's rules, one by one, are tests/test_codec.py's.)
"""
from __future__ import annotations

import asyncio
import struct

import pytest

from raftka.common import errors
from raftka.common.api import ApiKey


# -- against a real broker and controller ----------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """1 controller + 1 broker."""
    return module_cluster_factory("declared", controllers=1, brokers=1,
                                  configs={"default.replication.factor": 1, "min.insync.replicas": 1})


def test_bytes_that_do_not_decode_close_the_connection_without_a_traceback_and_the_listener_serves_on(cluster):
    """A body that does not decode as its declaration says (a string length past the end, an
    array count far past it) closes its connection, on the broker's listener and the
    controller's alike; neither logs a traceback, and both go on serving."""
    from test_broker import RawConnection
    from raftka.raft_meta.metadata.fetcher import fetch_entries
    broker_id, controller_id = cluster.broker_ids[0], cluster.controller_ids[0]
    controller = cluster.bootstrap_controllers.split(",")[0]
    for address in (cluster.broker_address(broker_id), controller):
        for body in (b"\x00\x00\x00\x01\x7f\xff", b"\xff" * 16):  # Metadata v4: topics, then a name
            conn = RawConnection(address)
            payload = struct.pack(">hhih", ApiKey.METADATA if address != controller else ApiKey.DESCRIBE_QUORUM,
                                  4 if address != controller else 0, 1, -1) + body
            conn.sock.sendall(struct.pack(">I", len(payload)) + payload)
            assert conn.closed_by_peer(), (address, body)
            conn.close()
    conn = RawConnection(cluster.broker_address(broker_id))
    conn.send(ApiKey.METADATA, {"topics": []})
    assert conn.receive()[1]["topics"] == []
    conn.close()
    assert asyncio.run(fetch_entries(controller))[1]  # the metadata log, in Kafka's Fetch
    for node_id in (broker_id, controller_id):
        assert "Traceback" not in cluster.nodes[node_id].log_path.read_text()


def test_a_brokers_answers_decode_as_their_declarations_say(cluster):
    """Answers to valid requests, and to ones that get per-partition or per-group errors, are
    encoded from their declarations at the newest declared version and decode back."""
    from raftka.common.records import BatchBuilder
    from raftka.common.transport import call_sync
    from raftka.cluster import wait_until
    address = cluster.broker_address(cluster.broker_ids[0])

    def answer(api_key: int, body: dict) -> dict:
        code, out = call_sync(address, api_key, body, timeout_ms=10_000)
        assert code == errors.NONE, (api_key, code, out)
        return out
    created = answer(ApiKey.CREATE_TOPICS, {"topics": [{"name": "shapes", "num_partitions": 1, "replication_factor": 1}]})
    assert created["topics"][0]["error_code"] == errors.NONE
    wait_until(lambda: answer(ApiKey.METADATA, {"topics": [{"name": "shapes"}]})["topics"][0]["partitions"][0][
        "leader_id"] >= 0, 20, what="a leader for shapes")
    builder = BatchBuilder(batch_size=1 << 16)
    builder.append(1_000, None, b"value")
    produced = answer(ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 5_000, "topic_data": [
        {"name": "shapes", "partition_data": [{"index": 0, "records": builder.build()}]},
        {"name": "no-such-topic", "partition_data": [{"index": 0, "records": builder.build()}]}]})
    assert produced["responses"][1]["partition_responses"][0]["error_code"] == errors.UNKNOWN_TOPIC_OR_PARTITION
    fetched = answer(ApiKey.FETCH, {"topics": [{"topic": "shapes", "partitions": [{"partition": 0}]},
                                               {"topic": "no-such-topic", "partitions": [{"partition": 0}]}]})
    assert fetched["responses"][0]["partitions"][0]["records"]
    assert fetched["responses"][1]["partitions"][0]["error_code"] == errors.UNKNOWN_TOPIC_OR_PARTITION
    listed = answer(ApiKey.LIST_OFFSETS, {"topics": [
        {"name": "shapes", "partitions": [{"partition_index": 0, "timestamp": -1}]},
        {"name": "no-such-topic", "partitions": [{"partition_index": 0}]}]})
    assert listed["topics"][0]["partitions"][0]["offset"] == 1
    answer(ApiKey.OFFSET_FOR_LEADER_EPOCH, {"topics": [{"topic": "shapes", "partitions": [
        {"partition": 0, "leader_epoch": 0}]}]})
    assert {t["name"] for t in answer(ApiKey.METADATA, {"topics": None})["topics"]} >= {"shapes"}
    answer(ApiKey.API_VERSIONS, {})
    assert answer(ApiKey.INIT_PRODUCER_ID, {})["producer_id"] >= 0
    answer(ApiKey.DESCRIBE_CLUSTER, {})
    answer(ApiKey.FIND_COORDINATOR, {"key": "shapes-group"})
    beat = answer(ApiKey.HEARTBEAT, {"group_id": "shapes-group", "generation_id": 1, "member_id": "nobody"})
    assert beat["error_code"] != errors.NONE
    answer(ApiKey.OFFSET_COMMIT, {"group_id": "shapes-group", "topics": [
        {"name": "shapes", "partitions": [{"partition_index": 0, "committed_offset": 1}]}]})
    answer(ApiKey.OFFSET_FETCH, {"group_id": "shapes-group", "topics": [{"name": "shapes", "partition_indexes": [0]}]})
