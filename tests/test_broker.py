"""Brokers as real processes (3 controllers + 3 brokers, started once for this module): the
client APIs, replication to followers, and bad input answered with typed errors while the broker
keeps serving everyone else. Failover and ISR tests are in test_broker_failover.py."""
from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
import urllib.request

import collections

import crc32c
import pytest

from raftka.common import errors
from raftka.common.codec import encoder, request_header_version
from raftka.common.messages import KAFKA_API
from raftka.common.records import CRC_OFFSET, RECORDS_OFFSET, BatchBuilder, iter_records
from raftka.common.transport import Connection, call_sync, decode_kafka_response, newest_version
from raftka.cluster import Cluster, wait_until

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID = 18, 19, 20, 22
OFFSETS_FOR_LEADER_EPOCH, DESCRIBE_CONFIGS, ALTER_CONFIGS, DESCRIBE_CLUSTER = 23, 32, 33, 60

FAST = {  # every process: quick fencing and ISR changes so fault tests stay short
    "broker.session.timeout.ms": 2000,
    "broker.heartbeat.interval.ms": 250,
    "replica.lag.time.max.ms": 2000,
    "replica.fetch.wait.max.ms": 200,
    "min.insync.replicas": 2,
    "default.replication.factor": 3,
    "socket.request.max.bytes": 2_000_000,
}


# -- helpers shared with test_broker_failover.py ------------------------------------------------

def batch(values: list[bytes], *, timestamp_ms: int | None = None) -> bytes:
    builder = BatchBuilder(batch_size=1 << 20)
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    for value in values:
        builder.append(ts, None, value)
    return builder.build()


def request(address: str, api_key: int, body: dict, timeout_s: float = 10.0) -> tuple[int, dict]:
    """One request at the newest declared version; (NONE, the answer) (its errors are in it)."""
    return call_sync(address, api_key, body, timeout_ms=int(timeout_s * 1000))


def kafka_request(address: str, api_key: int, version: int, body: dict, timeout_s: float = 10.0) -> dict:
    """One request in Kafka's protocol at ``version``; the answer's body."""
    async def one() -> dict:
        host, _, port = address.rpartition(":")
        connection = await Connection.open(host, int(port), client_id="test", kafka_versions={api_key: version})
        try:
            return (await connection.request(api_key, body, timeout_ms=int(timeout_s * 1000)))[1]
        finally:
            await connection.close()
    return asyncio.run(one())


def create_topic(cluster: Cluster, name: str, partitions: int = 1, rf: int = 3, configs: dict | None = None) -> dict:
    """Create through a broker (forwarded), then wait until every broker's metadata has a leader."""
    address = cluster.broker_address(cluster.broker_ids[0])
    out = kafka_request(address, CREATE_TOPICS, 7, {"topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": rf,
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}]})
    assert out["topics"][0]["error_code"] == errors.NONE, out
    return wait_for_partition(cluster, name, 0, lambda p: p["leader_id"] >= 0)


def partition_metadata(address: str, topic: str, index: int = 0) -> dict | None:
    code, out = request(address, METADATA, {"topics": [{"name": topic}]}, timeout_s=3)
    if code != errors.NONE or out["topics"][0]["error_code"] != errors.NONE:
        return None
    return out["topics"][0]["partitions"][index]


def wait_for_partition(cluster: Cluster, topic: str, index: int, predicate, timeout_s: float = 20.0,
                       among: list[int] | None = None) -> dict:
    """Wait until every (live, listed) broker's Metadata shows the partition satisfying predicate."""
    def check():
        seen = None
        for broker in among or cluster.broker_ids:
            if not cluster.alive(broker):
                continue
            p = partition_metadata(cluster.broker_address(broker), topic, index)
            if p is None or not predicate(p):
                return None
            seen = p
        return seen
    return wait_until(check, timeout_s, interval_s=0.05, what=f"{topic}-{index} metadata condition")


def produce(address: str, topic: str, records: bytes, *, acks: int = -1, index: int = 0,
            timeout_ms: int = 5000) -> dict:
    code, out = request(address, PRODUCE, {"acks": acks, "timeout_ms": timeout_ms, "topic_data": [
        {"name": topic, "partition_data": [{"index": index, "records": records}]}]}, timeout_s=timeout_ms / 1000 + 5)
    assert code == errors.NONE, (code, out)
    return out["responses"][0]["partition_responses"][0]


def fetch(address: str, topic: str, offset: int, *, index: int = 0, max_wait_ms: int = 0, min_bytes: int = 1,
          max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20, replica_id: int = -1,
          current_leader_epoch: int = -1, last_fetched_epoch: int = -1) -> dict:
    code, out = request(address, FETCH, {
        "replica_id": replica_id, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
        "isolation_level": 0, "topics": [{"topic": topic, "partitions": [{
            "partition": index, "current_leader_epoch": current_leader_epoch, "fetch_offset": offset,
            "last_fetched_epoch": last_fetched_epoch, "log_start_offset": -1,
            "partition_max_bytes": partition_max_bytes}]}]}, timeout_s=max_wait_ms / 1000 + 10)
    assert code == errors.NONE, (code, out)
    return out["responses"][0]["partitions"][0]


def read_all(address: str, topic: str, index: int = 0) -> list[tuple[int, bytes]]:
    """Every committed (offset, value) of a partition, read from its leader at ``address``."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        answer = fetch(address, topic, offset, index=index)
        assert answer["error_code"] == errors.NONE, answer
        records = list(iter_records(answer["records"])) if answer["records"] else []
        if not records:
            return out
        out.extend((r.offset, r.value) for r in records)
        offset = records[-1].offset + 1


def leader_address(cluster: Cluster, topic: str, index: int = 0) -> tuple[int, str]:
    p = wait_for_partition(cluster, topic, index, lambda p: p["leader_id"] >= 0)
    return p["leader_id"], cluster.broker_address(p["leader_id"])


class RawConnection:
    """A blocking socket speaking Kafka's frames by hand (newest declared versions), for
    pipelining and bad-input tests."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation = 0
        self.expected: collections.deque[tuple[int, int]] = collections.deque()  # (api key, version)

    def send(self, api_key: int, body: dict, *, expect_answer: bool = True) -> int:
        self.correlation += 1
        version = newest_version(api_key)
        request_message = KAFKA_API[api_key][0]
        header = struct.pack(">hhih", api_key, version, self.correlation, 4) + b"test"
        if request_header_version(request_message, version) == 2:
            header += b"\x00"
        payload = header + encoder(request_message, version)(body)
        self.sock.sendall(struct.pack(">I", len(payload)) + payload)
        if expect_answer:
            self.expected.append((api_key, version))
        return self.correlation

    def receive(self) -> tuple[int, dict]:
        """(correlation id, body) of the next answer."""
        (length,) = struct.unpack(">I", self._exactly(4))
        api_key, version = self.expected.popleft()
        return decode_kafka_response(self._exactly(length), api_key, version)

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    def closed_by_peer(self, timeout_s: float = 5.0) -> bool:
        self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()


def http_get(address: str, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


# -- the module's cluster ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """3 controllers + 3 brokers (real processes), stopped by PID at the end of the module."""
    return module_cluster_factory("broker", controllers=3, brokers=3, configs=FAST)


def test_a_produced_batch_is_replicated_and_read_back_from_the_leader(cluster):
    create_topic(cluster, "round-trip")
    leader, address = leader_address(cluster, "round-trip")
    first = produce(address, "round-trip", batch([b"a", b"b", b"c"]))
    second = produce(address, "round-trip", batch([b"d"]), acks=1)
    assert (first["error_code"], first["base_offset"]) == (errors.NONE, 0)
    assert (second["error_code"], second["base_offset"]) == (errors.NONE, 3)
    wait_for_partition(cluster, "round-trip", 0, lambda p: len(p["isr_nodes"]) == 3)
    assert wait_until(lambda: len(read_all(address, "round-trip")) == 4, 5, what="HW at 4")
    assert read_all(address, "round-trip") == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    # Every follower has the same bytes: each answers its log end offset in /metrics.
    for broker in cluster.broker_ids:
        def leo_is_4():
            _, text = http_get(cluster.http_address(broker), "/metrics")
            return 'raftka_partition_log_end_offset{node="%d",topic="round-trip",partition="0"} 4' % broker in text
        wait_until(leo_is_4, 10, what=f"broker {broker} log end offset 4")


def test_metadata_lists_unfenced_brokers_and_the_partition_leader(cluster):
    create_topic(cluster, "meta", partitions=3)
    code, out = request(cluster.broker_address(cluster.broker_ids[1]), METADATA,
                        {"topics": [{"name": "meta"}, {"name": "nope"}]})
    assert code == errors.NONE
    assert sorted(b["node_id"] for b in out["brokers"]) == cluster.broker_ids
    assert {b["port"] for b in out["brokers"]} == {cluster.nodes[b].broker_port for b in cluster.broker_ids}
    meta, nope = out["topics"]
    assert len(meta["partitions"]) == 3 and all(len(p["replica_nodes"]) == 3 for p in meta["partitions"])
    assert nope["error_code"] == errors.UNKNOWN_TOPIC_OR_PARTITION
    code, described = request(cluster.broker_address(cluster.broker_ids[0]), DESCRIBE_CLUSTER, {})
    assert code == errors.NONE and [b["broker_id"] for b in described["brokers"]] == cluster.broker_ids
    code, versions = request(cluster.broker_address(cluster.broker_ids[0]), API_VERSIONS, {})
    assert {PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSETS_FOR_LEADER_EPOCH} <= {k["api_key"] for k in versions["api_keys"]}


def test_a_forwarded_create_topics_answers_each_client_version_in_its_own_shape(cluster):
    """A broker re-encodes the client's CreateTopics at v7 for the controller and the answer back
    at the client's version: v2 gets name, error code and message only; v7 the topic id, partition
    count, replication factor and configs too. A v2 request's missing fields (validate_only is
    v1+, so present; v2 has no per-topic ids) carry Kafka's defaults to the controller."""
    address = cluster.broker_address(cluster.broker_ids[1])
    old = kafka_request(address, CREATE_TOPICS, 2, {"topics": [{
        "name": "v2-topic", "num_partitions": 2, "replication_factor": 1,
        "configs": [{"name": "retention.ms", "value": "120000"}]}], "timeout_ms": 5000})
    entry = old["topics"][0]
    assert (entry["name"], entry["error_code"], entry["error_message"]) == ("v2-topic", errors.NONE, None)
    # v2's answer has no id, counts or configs: they decode to Kafka's defaults, as not sent
    assert (entry["topic_id"], entry["num_partitions"], entry["configs"]) == ("0" * 32, -1, [])
    new = kafka_request(address, CREATE_TOPICS, 7, {"topics": [{
        "name": "v7-topic", "num_partitions": 3, "replication_factor": 2,
        "configs": [{"name": "retention.ms", "value": "120000"}]}]})
    topic = new["topics"][0]
    assert topic["error_code"] == errors.NONE and topic["topic_id"] != "0" * 32
    assert (topic["num_partitions"], topic["replication_factor"]) == (3, 2)
    retention = next(c for c in topic["configs"] if c["name"] == "retention.ms")
    assert retention["value"] == "120000" and retention["config_source"] == 1  # the topic's override
    for name, partitions in (("v2-topic", 2), ("v7-topic", 3)):
        wait_for_partition(cluster, name, partitions - 1, lambda p: p["leader_id"] >= 0)
    again = kafka_request(address, CREATE_TOPICS, 2, {"topics": [{"name": "v7-topic", "num_partitions": 1,
                                                                  "replication_factor": 1}]})
    assert again["topics"][0]["error_code"] == errors.TOPIC_ALREADY_EXISTS and "v7-topic" in \
        again["topics"][0]["error_message"]
    # DeleteTopics v6 names a topic by id alone; the controller finds it.
    out = kafka_request(address, DELETE_TOPICS, 6, {"topics": [{"name": None, "topic_id": topic["topic_id"]}],
                                                    "timeout_ms": 5000})
    assert out["responses"][0]["name"] == "v7-topic" and out["responses"][0]["error_code"] == errors.NONE


def test_admin_requests_to_a_broker_are_forwarded_to_the_active_controller(cluster):
    address = cluster.broker_address(cluster.broker_ids[2])
    create_topic(cluster, "admin", configs={"retention.ms": "60000"})
    out = kafka_request(address, DESCRIBE_CONFIGS, 4, {"resources": [{"resource_type": 2, "resource_name": "admin",
                                                                      "configuration_keys": None}]})
    configs = {c["name"]: c["value"] for c in out["results"][0]["configs"]}
    assert out["results"][0]["error_code"] == errors.NONE and configs["retention.ms"] == "60000"
    out = kafka_request(address, CREATE_TOPICS, 7, {"topics": [{"name": "admin", "num_partitions": 1,
                                                                "replication_factor": 3}]})
    assert out["topics"][0]["error_code"] == errors.TOPIC_ALREADY_EXISTS
    _, leader = leader_address(cluster, "admin")
    assert produce(leader, "admin", batch([b"old"]))["base_offset"] == 0
    out = kafka_request(address, DELETE_TOPICS, 1, {"topic_names": ["admin"], "timeout_ms": 5000})
    assert out["responses"][0]["name"] == "admin" and out["responses"][0]["error_code"] == errors.NONE
    wait_until(lambda: partition_metadata(address, "admin") is None, 10, what="admin deleted")
    # A new topic of the same name starts empty on every replica (the old logs were deleted).
    create_topic(cluster, "admin")
    _, leader = leader_address(cluster, "admin")
    assert produce(leader, "admin", batch([b"new"]))["base_offset"] == 0
    assert wait_until(lambda: read_all(leader, "admin") == [(0, b"new")], 10, what="new topic readable")


def test_a_consumer_sees_only_records_below_the_high_watermark_and_a_follower_up_to_the_log_end(cluster):
    create_topic(cluster, "hw")
    leader, address = leader_address(cluster, "hw")
    follower = next(b for b in cluster.broker_ids if b != leader)
    produce(address, "hw", batch([b"x"]))
    # A fetch claiming to be a follower with a stale epoch is fenced; a future epoch is unknown.
    answer = fetch(address, "hw", 0, replica_id=follower, current_leader_epoch=-1)
    assert answer["records"]  # followers read up to the log end offset
    p = partition_metadata(address, "hw")
    stale = fetch(address, "hw", 0, current_leader_epoch=p["leader_epoch"] - 1) if p["leader_epoch"] > 0 else None
    future = fetch(address, "hw", 0, current_leader_epoch=p["leader_epoch"] + 1)
    assert future["error_code"] == errors.UNKNOWN_LEADER_EPOCH
    if stale is not None:
        assert stale["error_code"] == errors.FENCED_LEADER_EPOCH
    # Offsets past the log end are out of range.
    assert fetch(address, "hw", 99)["error_code"] == errors.OFFSET_OUT_OF_RANGE


def test_a_long_poll_fetch_waits_for_data_and_returns_as_soon_as_it_is_committed(cluster):
    create_topic(cluster, "poll")
    _, address = leader_address(cluster, "poll")
    started = time.monotonic()
    empty = fetch(address, "poll", 0, max_wait_ms=600)
    waited = time.monotonic() - started
    assert empty["records"] == b"" and 0.5 <= waited < 3, waited
    results = {}

    def poll():
        t0 = time.monotonic()
        results["answer"] = fetch(address, "poll", 0, max_wait_ms=8000)
        results["took"] = time.monotonic() - t0
    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.3)
    produce(address, "poll", batch([b"wake"]))
    thread.join(15)
    assert [r.value for r in iter_records(results["answer"]["records"])] == [b"wake"]
    assert results["took"] < 4, results["took"]


def test_list_offsets_gives_earliest_latest_and_by_timestamp(cluster):
    create_topic(cluster, "offsets")
    _, address = leader_address(cluster, "offsets")
    produce(address, "offsets", batch([b"old"], timestamp_ms=1_000))
    produce(address, "offsets", batch([b"new1", b"new2"], timestamp_ms=5_000))

    def list_offset(ts):
        code, out = request(address, LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "offsets", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}]}]})
        return out["topics"][0]["partitions"][0]
    assert list_offset(-2)["offset"] == 0
    assert list_offset(-1)["offset"] == 3
    assert list_offset(2_000)["offset"] == 1
    assert list_offset(9_000)["offset"] == -1
    # inside one batch: the earliest record reaching the timestamp, with its own timestamp
    builder = BatchBuilder(batch_size=1 << 20)
    for ts in (6_000, 8_000, 7_000):  # offsets 3, 4, 5
        builder.append(ts, None, b"x")
    produce(address, "offsets", builder.build())
    assert (list_offset(7_500)["offset"], list_offset(7_500)["timestamp"]) == (4, 8_000)
    assert (list_offset(6_500)["offset"], list_offset(6_500)["timestamp"]) == (4, 8_000)
    assert (list_offset(5_500)["offset"], list_offset(5_500)["timestamp"]) == (3, 6_000)


def test_offsets_for_leader_epoch_gives_where_an_epoch_ends(cluster):
    create_topic(cluster, "epochs")
    _, address = leader_address(cluster, "epochs")
    produce(address, "epochs", batch([b"a", b"b"]))
    epoch = partition_metadata(address, "epochs")["leader_epoch"]
    code, out = request(address, OFFSETS_FOR_LEADER_EPOCH, {"replica_id": -1, "topics": [
        {"topic": "epochs", "partitions": [{"partition": 0, "current_leader_epoch": epoch, "leader_epoch": epoch}]}]})
    answer = out["topics"][0]["partitions"][0]
    assert (answer["error_code"], answer["leader_epoch"], answer["end_offset"]) == (errors.NONE, epoch, 2)


def test_produce_to_a_follower_answers_not_leader_with_the_current_leader(cluster):
    create_topic(cluster, "route")
    leader, _ = leader_address(cluster, "route")
    follower = next(b for b in cluster.broker_ids if b != leader)
    answer = produce(cluster.broker_address(follower), "route", batch([b"x"]))
    assert answer["error_code"] == errors.NOT_LEADER_OR_FOLLOWER
    assert answer["current_leader"]["leader_id"] == leader


def test_bad_batches_get_typed_errors_and_nothing_is_appended(cluster):
    create_topic(cluster, "strict", configs={"max.message.bytes": "2000"})
    _, address = leader_address(cluster, "strict")
    assert produce(address, "strict", batch([b"x" * 5000]))["error_code"] == errors.MESSAGE_TOO_LARGE
    corrupt = bytearray(batch([b"hello world"]))
    corrupt[-3] ^= 0xFF  # inside the CRC-covered records
    assert produce(address, "strict", bytes(corrupt))["error_code"] == errors.CORRUPT_MESSAGE
    assert produce(address, "strict", b"not a batch")["error_code"] == errors.CORRUPT_MESSAGE
    assert produce(address, "no-such-topic", batch([b"x"]))["error_code"] == errors.UNKNOWN_TOPIC_OR_PARTITION
    _, out = request(address, PRODUCE, {"acks": 2, "timeout_ms": 100, "topic_data": [
        {"name": "strict", "partition_data": [{"index": 0, "records": batch([b"two"])}]}]})
    assert out["responses"][0]["partition_responses"][0]["error_code"] == errors.INVALID_REQUIRED_ACKS
    assert produce(address, "strict", batch([b"ok"]))["base_offset"] == 0  # nothing was appended before
    # The poison pill: a valid CRC over a garbage record length. Acknowledged before #hardening,
    # it made the partition unreadable from then on; the leader's record walk refuses it.
    poison = bytearray(batch([b"bad"]))
    poison[RECORDS_OFFSET] = 0x7F  # record length -64
    struct.pack_into(">I", poison, CRC_OFFSET, crc32c.crc32c(bytes(poison[CRC_OFFSET + 4:])))
    answer = produce(address, "strict", bytes(poison))
    assert answer["error_code"] == errors.CORRUPT_MESSAGE and "record 0 declares length -64" in answer["error_message"]
    assert produce(address, "strict", batch([b"after"]))["base_offset"] == 1
    wait_until(lambda: read_all(address, "strict") == [(0, b"ok"), (1, b"after")], 10, what="both good records readable")


def test_a_malformed_frame_closes_only_that_connection(cluster):
    address = cluster.broker_address(cluster.broker_ids[0])
    garbage = RawConnection(address)
    garbage.sock.sendall(struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1")  # no Kafka api key starts 0xc1
    assert garbage.closed_by_peer()
    huge = RawConnection(address)
    huge.sock.sendall(struct.pack(">I", FAST["socket.request.max.bytes"] + 1))
    assert huge.closed_by_peer()
    unknown = RawConnection(address)
    # An api key the broker does not serve closes the connection, as in Kafka (a controller's).
    unknown.sock.sendall(struct.pack(">Ihhih", 10, 55, 0, 1, -1))
    assert unknown.closed_by_peer()
    undeclared = RawConnection(address)
    undeclared.sock.sendall(struct.pack(">Ihhih", 10, FETCH, 99, 1, -1))  # a version not declared
    assert undeclared.closed_by_peer()
    good = RawConnection(address)
    good.send(API_VERSIONS, {})
    assert good.receive()[1]["error_code"] == errors.NONE
    for conn in (garbage, huge, unknown, undeclared, good):
        conn.close()


def test_acks_zero_gets_no_answer_and_pipelined_answers_keep_arrival_order(cluster):
    create_topic(cluster, "pipeline")
    _, address = leader_address(cluster, "pipeline")
    conn = RawConnection(address)
    body = lambda acks, value: {"acks": acks, "timeout_ms": 5000, "topic_data": [
        {"name": "pipeline", "partition_data": [{"index": 0, "records": batch([value])}]}]}
    conn.send(PRODUCE, body(0, b"fire-and-forget"), expect_answer=False)
    ids = [conn.send(PRODUCE, body(-1, b"all-%d" % i)) for i in range(5)]
    versions = conn.send(API_VERSIONS, {})
    answers = [conn.receive() for _ in range(6)]
    assert [a[0] for a in answers] == ids + [versions]  # no frame for acks=0; order kept
    offsets = [a[1]["responses"][0]["partition_responses"][0]["base_offset"] for a in answers[:5]]
    assert offsets == [1, 2, 3, 4, 5]
    conn.close()


def test_init_producer_id_hands_out_distinct_ids_from_a_controller_block(cluster):
    ids = set()
    for broker in cluster.broker_ids:
        for _ in range(3):
            code, out = request(cluster.broker_address(broker), INIT_PRODUCER_ID, {"transactional_id": None,
                                                                                  "transaction_timeout_ms": 60000})
            assert (code, out["error_code"]) == (errors.NONE, errors.NONE)
            ids.add(out["producer_id"])
    assert len(ids) == 9


def test_health_is_ready_and_metrics_are_prometheus_text(cluster):
    broker = cluster.broker_ids[0]
    status, text = http_get(cluster.http_address(broker), "/health")
    assert status == 200 and json.loads(text)["ready"] is True
    status, metrics = http_get(cluster.http_address(broker), "/metrics")
    assert status == 200
    for name in ("raftka_broker_bytes_in_total", "raftka_broker_under_replicated_partitions",
                 "raftka_broker_isr_shrinks_total", "raftka_broker_request_latency_seconds_bucket",
                 "raftka_broker_request_queue_depth", "raftka_partition_high_watermark"):
        assert name in metrics, name
    # the segment-file cache: the broker's open segments, under its bound
    figures = {line.split("{")[0]: int(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("raftka_broker_segment_file")}
    assert 0 < figures["raftka_broker_segment_files_open"] <= figures["raftka_broker_segment_files_open_max"]
    assert {"raftka_broker_segment_file_opens_total", "raftka_broker_segment_file_evictions_total"} <= set(figures)
    # the listener's connection counters: a bad frame shows up as a closed connection
    def closed_bad_frame() -> int:
        text = http_get(cluster.http_address(broker), "/metrics")[1]
        line = next(l for l in text.splitlines()
                    if l.startswith("raftka_broker_connections_closed_total") and 'reason="bad_frame"' in l)
        return int(line.rsplit(" ", 1)[1])
    before = closed_bad_frame()
    garbage = RawConnection(cluster.broker_address(broker))
    garbage.sock.sendall(struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1")
    assert garbage.closed_by_peer()
    garbage.close()
    assert closed_bad_frame() == before + 1
    assert "raftka_broker_connections_accepted_total" in http_get(cluster.http_address(broker), "/metrics")[1]


def test_combined_mode_runs_a_controller_and_a_broker_in_one_process(tmp_path):
    with Cluster.start(tmp_path, controllers=1, brokers=0, combined=True,
                       configs={"broker.heartbeat.interval.ms": 250}) as single:
        assert single.broker_ids == [1]
        create_topic(single, "laptop", rf=1)
        _, address = leader_address(single, "laptop")
        assert produce(address, "laptop", batch([b"one", b"two"]))["error_code"] == errors.NONE
        assert read_all(address, "laptop") == [(0, b"one"), (1, b"two")]
        assert single.stop(1) == 0  # SIGTERM: controlled shutdown, clean exit


def test_bytes_that_do_not_decode_as_declared_close_that_connection_and_the_broker_serves_on(cluster):
    """As Kafka: a request whose body does not match its version's declaration (cut short, an
    array count past the end, a string that is not UTF-8) closes its connection before any
    handler runs; the broker goes on serving everyone else."""
    address = cluster.broker_address(cluster.broker_ids[0])
    version = newest_version(FETCH)
    header = struct.pack(">hhih", FETCH, version, 1, -1) + b"\x00"
    body = encoder(KAFKA_API[FETCH][0], version)({"max_wait_ms": 0, "topics": [
        {"topic": "x", "partitions": [{"partition": 0, "fetch_offset": 0}]}]})
    for payload in (header + body[:-5],  # cut short
                    header + body[:-1] + b"\x7f",  # a tagged-field count past the end
                    header + b"\xff" * 40):  # counts and lengths far past the end
        conn = RawConnection(address)
        conn.sock.sendall(struct.pack(">I", len(payload)) + payload)
        assert conn.closed_by_peer(), payload
        conn.close()
    name = "\u00e9t\u00e9".encode()[:-1]  # a UTF-8 sequence cut in two
    bad_name = struct.pack(">hhih", METADATA, 4, 1, -1) + struct.pack(">ih", 1, len(name)) + name + b"\x00"
    conn = RawConnection(address)
    conn.sock.sendall(struct.pack(">I", len(bad_name)) + bad_name)
    assert conn.closed_by_peer()
    conn.close()
    good = RawConnection(address)
    good.send(API_VERSIONS, {})
    assert good.receive()[1]["error_code"] == errors.NONE
    good.close()


def test_altered_topic_configs_reach_the_partition_logs(cluster):
    create_topic(cluster, "altered", configs={"max.message.bytes": "2000"})
    _, address = leader_address(cluster, "altered")
    big = batch([b"y" * 5000])
    assert produce(address, "altered", big)["error_code"] == errors.MESSAGE_TOO_LARGE
    out = kafka_request(address, ALTER_CONFIGS, 0, {"resources": [{
        "resource_type": 2, "resource_name": "altered",
        "configs": [{"name": "max.message.bytes", "value": "100000"}]}]})
    assert out["responses"][0]["error_code"] == errors.NONE, out
    assert wait_until(lambda: produce(address, "altered", big)["error_code"] == errors.NONE, 10,
                      what="the larger batch accepted")


def test_fetch_limits_take_whole_batches_and_always_the_first(cluster):
    create_topic(cluster, "limits")
    _, address = leader_address(cluster, "limits")
    for i in range(3):
        produce(address, "limits", batch([bytes([65 + i]) * 1000]))
    wait_until(lambda: len(read_all(address, "limits")) == 3, 10, what="3 records committed")
    one = fetch(address, "limits", 0, partition_max_bytes=1500)
    assert [r.offset for r in iter_records(one["records"])] == [0]
    tiny = fetch(address, "limits", 1, max_bytes=10, partition_max_bytes=10)
    assert [r.offset for r in iter_records(tiny["records"])] == [1]  # larger than the limit, still sent
    two = fetch(address, "limits", 0, partition_max_bytes=2500)
    assert [r.offset for r in iter_records(two["records"])] == [0, 1]
