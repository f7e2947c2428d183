"""The client against real processes: one controller and three brokers on 127.0.0.1 (ports picked
at run time), shared by this module's tests; every process is stopped by PID at the end.

Covers every public method of Producer, Consumer and AdminClient (blocking and asyncio), keyed
partitioning as Kafka's Java client does it, lz4 round trips, seek/reset/iteration, and the
typed errors users meet (unknown topic, no offset, out of range, closed clients).
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest

from raftka.client import aio
from raftka.client import (AdminClient, ConfigResource, Consumer, ConsumerRecord, KafkaTimeoutError, NewTopic,
                    NoOffsetForPartitionError, Producer, RecordMetadata, TopicPartition)
from raftka.client.errors import (IllegalStateError, InvalidPartitionsError, KafkaClosedError,
                           OffsetOutOfRangeError, TopicAlreadyExistsError,
                           UnknownTopicOrPartitionError)
from raftka.client.partitioner import partition_for_key
from helpers import wait_for_topic

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory("client-cluster", controllers=1, brokers=3,
                                  configs={"default.replication.factor": 3, "num.partitions": 3})


@pytest.fixture(scope="module")
def admin(cluster, module_admin_factory):
    return module_admin_factory(cluster, request_timeout_ms=10_000)


def new_topic(admin: AdminClient, partitions: int = 3, replication: int = 3, configs=None) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, replication, configs)])
    wait_for_topic(admin, name, partitions)
    return name


def wait_for_leaders(bootstrap: str, topic: str, partitions: int, timeout_s: float = 15) -> None:
    with Producer(bootstrap_servers=bootstrap) as p:
        deadline = time.monotonic() + timeout_s
        while len(p.partitions_for(topic)) < partitions and time.monotonic() < deadline:
            time.sleep(0.05)


def tps(topic: str, n: int = 3) -> list[TopicPartition]:
    return [TopicPartition(topic, i) for i in range(n)]


def test_admin_creates_lists_describes_and_deletes_topics(cluster, admin):
    topic = new_topic(admin, 3, 3)
    assert topic in admin.list_topics()
    [described] = admin.describe_topics([topic])
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    for p in described["partitions"]:
        assert len(p["replicas"]) == 3 and p["leader"] in p["replicas"] and p["leader"] in p["isr"]
    with pytest.raises(TopicAlreadyExistsError) as info:
        admin.create_topics([NewTopic(topic, 3, 3)])
    assert info.value.topic == topic
    with pytest.raises(InvalidPartitionsError):
        admin.create_topics([NewTopic(f"bad-{topic}", 0, 1)])
    results = admin.create_topics([NewTopic(topic, 3, 3)], raise_errors=False)
    assert isinstance(results[topic], TopicAlreadyExistsError)
    assert admin.delete_topics([topic]) == {topic: None}
    deadline = time.monotonic() + 10
    while topic in admin.list_topics() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert topic not in admin.list_topics()


def test_admin_describes_the_cluster_with_brokers_and_a_live_broker_as_controller(cluster, admin):
    described = admin.describe_cluster()
    assert [b["node_id"] for b in described["brokers"]] == cluster.broker_ids
    assert all(not b["fenced"] and b["port"] > 0 for b in described["brokers"])
    # Kafka's meaning: the broker a client sends controller requests to (any forwards them).
    assert described["controller_id"] == min(cluster.broker_ids)


def test_admin_describes_and_alters_topic_configs(cluster, admin):
    topic = new_topic(admin, 1, 1, {"retention.ms": 3_600_000})
    configs = admin.describe_configs([ConfigResource("topic", topic)])[topic]
    # values are strings, as Kafka's AdminClient gives them
    assert configs["retention.ms"].value == "3600000" and not configs["retention.ms"].is_default
    assert configs["unclean.leader.election.enable"].value in ("true", "false")
    assert all(e.value is None or isinstance(e.value, str) for e in configs.values())
    assert admin.alter_configs([ConfigResource("topic", topic, {"retention.ms": 7_200_000})]) == {topic: None}
    assert admin.describe_configs([topic])[topic]["retention.ms"].value == "7200000"
    with pytest.raises(Exception) as info:
        admin.alter_configs([ConfigResource("topic", topic, {"no.such.config": 1})])
    assert "no.such.config" in str(info.value)


def test_keyed_records_land_on_the_partition_kafkas_java_client_picks(cluster, admin):
    topic = new_topic(admin, 5, 1)
    wait_for_leaders(cluster.bootstrap_servers, topic, 5)
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as producer:
        keys = [b"21", b"foobar", b"abc", b"a-little-bit-long-string", b"user-%d" % 7]
        for key in keys:
            meta = producer.send(topic, b"v", key=key).get(timeout=10)
            assert meta.partition == partition_for_key(key, 5), key
        explicit = producer.send(topic, b"v", key=b"21", partition=4).get(timeout=10)
        assert explicit.partition == 4
    # A partition the metadata lacks is waited for up to max_block_ms (it may be new), then refused.
    with Producer(bootstrap_servers=cluster.bootstrap_servers, max_block_ms=2000) as producer:
        with pytest.raises(KafkaTimeoutError, match="partition 9 does not exist"):
            producer.send(topic, b"v", partition=9)


def test_producer_futures_give_offsets_in_order_and_callbacks_fire(cluster, admin):
    topic = new_topic(admin, 1, 3)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=20) as producer:
        seen: list[RecordMetadata] = []
        errors: list[BaseException] = []
        futures = [producer.send(topic, b"%d" % i).add_callback(seen.append).add_errback(errors.append)
                   for i in range(500)]
        assert producer.flush(timeout=20) == []
        offsets = [f.get(timeout=1).offset for f in futures]
        assert offsets == list(range(500))
        assert len(seen) == 500 and not errors
        assert all(f.succeeded() for f in futures)
        assert futures[0].value.topic == topic and futures[0].value.timestamp > 0


def test_lz4_compressed_records_round_trip_with_keys_headers_and_timestamps(cluster, admin):
    topic = new_topic(admin, 1, 3)
    sent = [(b"k%d" % i, (b"value-%d " % i) * 20, [("h", b"%d" % i)], 1_700_000_000_000 + i) for i in range(300)]
    with Producer(bootstrap_servers=cluster.bootstrap_servers, compression_type="lz4", linger_ms=50) as p:
        for key, value, headers, ts in sent:
            p.send(topic, value, key=key, headers=headers, partition=0, timestamp_ms=ts)
        assert p.flush(timeout=20) == []
    with Consumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                  consumer_timeout_ms=1000) as c:
        c.assign([TopicPartition(topic, 0)])
        got = list(c)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in got] == sent
    assert [r.offset for r in got] == list(range(300))
    assert all(isinstance(r, ConsumerRecord) and r.timestamp_type == 0 for r in got)


def test_serializers_and_deserializers_apply_to_keys_and_values(cluster, admin):
    topic = new_topic(admin, 1, 1)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, key_serializer=str.encode,
                  value_serializer=lambda v: json.dumps(v).encode()) as p:
        p.send(topic, {"n": 1}, key="a").get(timeout=10)
        p.send(topic, None, key="tombstone").get(timeout=10)
    with Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                  key_deserializer=bytes.decode, value_deserializer=json.loads, consumer_timeout_ms=1000) as c:
        got = [(r.key, r.value) for r in c]
    assert got == [("a", {"n": 1}), ("tombstone", None)]


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_every_acks_setting_delivers(cluster, admin, acks):
    topic = new_topic(admin, 1, 3)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, acks=acks,
                  enable_idempotence=acks == "all") as p:
        metas = [p.send(topic, b"%d" % i) for i in range(50)]
        assert p.flush(timeout=10) == []
        offsets = [m.get(1).offset for m in metas]
    assert offsets == ([-1] * 50 if acks == 0 else list(range(50)))
    with Consumer(bootstrap_servers=cluster.bootstrap_servers) as c:
        deadline = time.monotonic() + 10
        while c.end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)] < 50:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_seek_position_and_reset_policies(cluster, admin):
    topic = new_topic(admin, 1, 3)
    tp = TopicPartition(topic, 0)
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
        for i in range(100):
            p.send(topic, b"%d" % i)
        p.flush(timeout=10)
    with Consumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert c.assignment() == {tp}
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 100}
        assert c.position(tp) == 0
        got = c.poll(timeout_ms=5000, max_records=10)
        assert [r.offset for r in got[tp]] == list(range(10))
        assert c.position(tp) == 10
        c.seek(tp, 57)  # within a batch: earlier records of that batch are dropped
        assert c.position(tp) == 57
        assert c.poll(timeout_ms=5000, max_records=1)[tp][0].value == b"57"
        c.seek_to_end(tp)
        assert c.position(tp) == 100
        assert c.poll(timeout_ms=200) == {}
        c.seek_to_beginning()
        assert c.poll(timeout_ms=5000, max_records=1)[tp][0].offset == 0
        assert c.highwater(tp) == 100
        c.seek(tp, 1000)  # past the end: OFFSET_OUT_OF_RANGE -> 'earliest' policy
        first = c.poll(timeout_ms=5000, max_records=1)
        assert first[tp][0].offset == 0
    with Consumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="latest") as c:
        c.assign([tp])
        assert c.position(tp) == 100
    with Consumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="none") as c:
        c.assign([tp])
        with pytest.raises(NoOffsetForPartitionError):
            c.poll(timeout_ms=100)
        c.seek(tp, 1000)
        deadline = time.monotonic() + 5
        with pytest.raises(OffsetOutOfRangeError) as info:
            while time.monotonic() < deadline:
                c.poll(timeout_ms=200)
        assert info.value.partition == 0 and info.value.topic == topic
        c.seek(tp, 99)
        assert c.poll(timeout_ms=5000)[tp][0].offset == 99


def test_iteration_stops_after_consumer_timeout_ms_and_poll_honours_max_records(cluster, admin):
    topic = new_topic(admin, 3, 1)
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
        for i in range(90):
            p.send(topic, b"%d" % i, key=b"%d" % i)
        p.flush(timeout=10)
    with Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                  consumer_timeout_ms=500, max_poll_records=7) as c:
        batch = c.poll(timeout_ms=5000)
        assert 0 < sum(len(v) for v in batch.values()) <= 7
        started = time.monotonic()
        rest = list(c)
        assert sum(len(v) for v in batch.values()) + len(rest) == 90
        assert time.monotonic() - started >= 0.5
        assert c.subscription() == {topic} and c.assignment() == set(tps(topic))
        with pytest.raises(IllegalStateError, match="consumer groups"):
            c.commit()


def test_offsets_for_times_pause_and_resume(cluster, admin):
    topic = new_topic(admin, 1, 1)
    tp = TopicPartition(topic, 0)
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
        for i in range(10):  # one batch each: the broker answers ListOffsets per batch
            p.send(topic, b"%d" % i, timestamp_ms=1_000_000 + i * 10).get(timeout=10)
    with Consumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest") as c:
        c.assign([tp])
        found = c.offsets_for_times({tp: 1_000_045})
        assert found[tp].offset == 5 and found[tp].timestamp == 1_000_050
        assert c.offsets_for_times({tp: 9_000_000})[tp] is None
        c.pause(tp)
        assert c.paused() == {tp}
        assert c.poll(timeout_ms=300) == {}
        c.resume(tp)
        assert len(c.poll(timeout_ms=5000)[tp]) == 10


def test_unknown_topics_and_closed_clients_give_typed_errors(cluster):
    with Producer(bootstrap_servers=cluster.bootstrap_servers, max_block_ms=2000) as p:
        started = time.monotonic()
        with pytest.raises(UnknownTopicOrPartitionError) as info:
            p.send("no-such-topic", b"v")
        assert info.value.topic == "no-such-topic" and time.monotonic() - started < 5
    with pytest.raises(KafkaClosedError):
        p.send("t", b"v")
    c = Consumer(bootstrap_servers=cluster.bootstrap_servers)
    with pytest.raises(IllegalStateError):
        c.poll(timeout_ms=10)
    with pytest.raises(IllegalStateError, match="not assigned"):
        c.position(TopicPartition("x", 0))
    c.close()
    c.close()  # twice is fine


def test_a_producer_with_no_reachable_broker_fails_with_a_timeout(tmp_path):
    from raftka.cluster import free_ports
    [port] = free_ports(1)
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError):  # NoBrokersAvailable, from the constructor as in kafka-python
        Producer(bootstrap_servers=f"127.0.0.1:{port}", bootstrap_timeout_ms=700, request_timeout_ms=300)
    assert time.monotonic() - started < 5

    async def send_unstarted() -> None:  # the asyncio producer bootstraps in start(): send waits max_block_ms
        p = aio.Producer(bootstrap_servers=f"127.0.0.1:{port}", max_block_ms=700, request_timeout_ms=300)
        try:
            started = time.monotonic()
            with pytest.raises(KafkaTimeoutError):
                await p.send("t", b"v")
            assert time.monotonic() - started < 5
        finally:
            await p.close(0)
    asyncio.run(send_unstarted())


def test_the_asyncio_flavour_produces_and_consumes(cluster, admin):
    topic = new_topic(admin, 2, 3)

    async def main() -> list[ConsumerRecord]:
        producer = aio.Producer(bootstrap_servers=cluster.bootstrap_servers)
        futures = [await producer.send(topic, b"%d" % i, key=b"%d" % (i % 4)) for i in range(40)]
        metas = await asyncio.gather(*futures)
        assert await producer.flush() == []
        assert await producer.close() == []
        assert {m.partition for m in metas} <= {0, 1}
        consumer = aio.Consumer(topic, bootstrap_servers=cluster.bootstrap_servers,
                                       auto_offset_reset="earliest", consumer_timeout_ms=1000)
        got = [r async for r in consumer]
        ends = await consumer.end_offsets(tps(topic, 2))
        await consumer.close()
        assert sum(ends.values()) == 40
        admin_aio = aio.AdminClient(bootstrap_servers=cluster.bootstrap_servers)
        admin_aio.cluster.start()
        assert topic in await admin_aio.list_topics()
        await admin_aio.close()
        return got

    got = asyncio.run(main())
    assert sorted(int(r.value) for r in got) == list(range(40))


def test_pattern_subscription_and_topic_listing_without_a_group(cluster, admin):
    prefix = f"pat-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(f"{prefix}-a", 1, 1), NewTopic(f"{prefix}-b", 2, 1)])
    wait_for_topic(admin, f"{prefix}-a", 1)
    wait_for_topic(admin, f"{prefix}-b", 2)
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
        p.send(f"{prefix}-a", b"a").get(timeout=10)
        p.send(f"{prefix}-b", b"b", partition=1).get(timeout=10)
    c = Consumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest", consumer_timeout_ms=1500)
    with c:
        assert {f"{prefix}-a", f"{prefix}-b"} <= c.topics()
        assert c.partitions_for_topic(f"{prefix}-b") == {0, 1}
        assert c.partitions_for_topic("no-such-topic-here") is None
        c.subscribe(pattern=f"{prefix}-.*")
        got = sorted((r.topic, r.partition, r.value) for r in c)
        assert got == [(f"{prefix}-a", 0, b"a"), (f"{prefix}-b", 1, b"b")]
        assert c.assignment() == {TopicPartition(f"{prefix}-a", 0), TopicPartition(f"{prefix}-b", 0),
                                  TopicPartition(f"{prefix}-b", 1)}
        with pytest.raises(IllegalStateError, match="consumer groups"):
            c.committed(TopicPartition(f"{prefix}-a", 0))
        c.unsubscribe()
        assert c.assignment() == set() and c.subscription() is None
        c.assign([TopicPartition(f"{prefix}-a", 0)])
        assert c.assignment() == {TopicPartition(f"{prefix}-a", 0)}


def test_clients_closed_right_after_creation_leave_no_pending_task(cluster):
    # A connection still being opened when close() cancelled its asker used to be left open,
    # and its read loop pending when the client's loop stopped ("Task was destroyed but it is
    # pending!"); seen on 8 runs of 8 with a group consumer before the fix.
    import subprocess
    import sys
    script = (
        "from raftka.client import Consumer, Producer, AdminClient\n"
        f"bootstrap = {cluster.bootstrap_servers!r}\n"
        "for _ in range(3):\n"
        "    Consumer(bootstrap_servers=bootstrap, group_id='closed-at-once').close()\n"
        "    Consumer(bootstrap_servers=bootstrap).close()\n"
        "    Producer(bootstrap_servers=bootstrap).close()\n"
        "    AdminClient(bootstrap_servers=bootstrap).close()\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "Task was destroyed" not in run.stderr and "Traceback" not in run.stderr, run.stderr


def test_a_leader_answers_the_consumers_offsets_for_leader_epoch_v4_in_kafkas_shape(cluster, admin):
    """What the consumer's check after a leader change reads (client/aio/fetcher.py): the current
    epoch ends at the log end offset; an epoch newer than any the leader had is undefined (-1);
    a current_leader_epoch the leader does not have yet is UNKNOWN_LEADER_EPOCH."""
    from raftka.client.aio.cluster import API_OFFSET_FOR_LEADER_EPOCH, Cluster as ClientCluster
    from raftka.common import errors
    topic = new_topic(admin, 1, 3)
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as producer:
        for i in range(5):
            producer.send(topic, b"%d" % i, partition=0)
        assert producer.flush(timeout=30) == []

    async def main() -> list[dict]:
        client = ClientCluster(cluster.bootstrap_servers, request_timeout_ms=10_000)
        try:
            await client.refresh_metadata([topic])
            tp = TopicPartition(topic, 0)
            leader, epoch = client.metadata.leader_for(tp), client.metadata.leader_epoch(tp)
            answers = []
            for current, wanted in [(epoch, epoch), (epoch, epoch + 5), (epoch + 1, epoch)]:
                code, answer = await client.request(leader, API_OFFSET_FOR_LEADER_EPOCH, {
                    "replica_id": -1, "topics": [{"topic": topic, "partitions": [
                        {"partition": 0, "current_leader_epoch": current, "leader_epoch": wanted}]}]})
                assert code == errors.NONE and answer["topics"][0]["topic"] == topic
                answers.append({"epoch": epoch, **answer["topics"][0]["partitions"][0]})
            return answers
        finally:
            await client.close()

    answers = asyncio.run(main())
    current = answers[0]
    assert (current["error_code"], current["partition"], current["leader_epoch"], current["end_offset"]) == \
        (0, 0, current["epoch"], 5)
    assert (answers[1]["error_code"], answers[1]["leader_epoch"]) == (0, -1)
    assert answers[2]["error_code"] == errors.UNKNOWN_LEADER_EPOCH
