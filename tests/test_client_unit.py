"""Pure unit tests of the client's own logic: murmur2 against Kafka's published vectors, the
partitioner, the accumulator (batching, linger, size limits, buffer_memory), producer-field
stamping, futures, configs, bootstrap parsing. No network, no processes."""
from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from raftka.client import KafkaTimeoutError, TopicPartition
from raftka.client.aio.accumulator import RecordAccumulator, record_size_estimate
from raftka.client.aio.cluster import ClusterMetadata, parse_bootstrap, parse_metadata
from raftka.client.aio.consumer import consumer_config
from raftka.client.aio.producer import producer_config
from raftka.client.errors import ConfigError, MessageTooLargeError
from raftka.client.futures import Future
from raftka.client.partitioner import DefaultPartitioner, murmur2, partition_for_key, to_positive
from raftka.common import records as rec

# Kafka's own vectors (clients' UtilsTest.testMurmur2): input bytes -> Java's signed int result.
KAFKA_MURMUR2_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}
# Published by Akka's Murmur2Spec as "expected correct hash values from the kafka murmur2 impl".
# (kafkajs' *legacy* partitioner vectors differ on purpose: it was not Java-compatible.)
MORE_MURMUR2_VECTORS = {
    b"1": -1993445489,
    b"12": 126087238,
    b"123": -267702483,
    b"1234": -1614185708,
    b"12345": -1188365604,
}


def test_murmur2_matches_kafkas_java_client_vectors():
    for data, expected in KAFKA_MURMUR2_VECTORS.items():
        assert murmur2(data) == expected, data


def test_murmur2_matches_other_published_java_compatible_vectors():
    for data, expected in MORE_MURMUR2_VECTORS.items():
        assert murmur2(data) == expected, data


def test_murmur2_covers_every_tail_length_and_empty_input():
    # Between them the vectors above have every remainder length (0-3 trailing bytes); the empty
    # input's value is listed by other Java-compatible ports as Kafka's.
    assert {len(k) % 4 for k in {**KAFKA_MURMUR2_VECTORS, **MORE_MURMUR2_VECTORS}} == {0, 1, 2, 3}
    assert murmur2(b"") == 275646681


def test_key_partition_is_to_positive_murmur2_modulo_partitions():
    for data, h in KAFKA_MURMUR2_VECTORS.items():
        for n in (1, 3, 7, 12, 50):
            assert partition_for_key(data, n) == (h & 0x7FFFFFFF) % n
    assert to_positive(-2**31) == 0  # not abs(): Java's Integer.MIN_VALUE maps to 0
    assert partition_for_key(b"foobar", 50) == (-790332482 & 0x7FFFFFFF) % 50


def test_keyed_records_always_go_to_the_murmur2_partition():
    partitioner = DefaultPartitioner(random.Random(1))
    parts = list(range(6))
    for data in KAFKA_MURMUR2_VECTORS:
        assert partitioner("t", data, parts, parts) == partition_for_key(data, 6)
        assert partitioner("t", data, parts, []) == partition_for_key(data, 6)


def test_keyless_records_stick_to_one_partition_until_its_batch_closes():
    seed = 7
    partitioner = DefaultPartitioner(random.Random(seed))
    parts = list(range(4))
    first = {partitioner("t", None, parts, parts) for _ in range(100)}
    assert len(first) == 1, f"seed {seed}"
    sticky = first.pop()
    partitioner.on_batch_closed("t", (sticky + 1) % 4, parts, parts)  # another partition: no change
    assert partitioner("t", None, parts, parts) == sticky
    partitioner.on_batch_closed("t", sticky, parts, parts)
    assert partitioner("t", None, parts, parts) != sticky, f"seed {seed}"


def test_keyless_records_prefer_partitions_with_a_leader():
    partitioner = DefaultPartitioner(random.Random(3))
    for _ in range(20):
        partitioner.on_batch_closed("t", partitioner("t", None, [0, 1, 2], [2]), [0, 1, 2], [2])
        assert partitioner("t", None, [0, 1, 2], [2]) == 2


def test_bootstrap_servers_accepts_a_string_or_a_list():
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["a:1", "b"]) == [("a", 1), ("b", 9092)]
    with pytest.raises(ConfigError, match="bootstrap_servers"):
        parse_bootstrap("")
    with pytest.raises(ConfigError, match="bootstrap_servers"):
        parse_bootstrap("host:notaport")


def test_metadata_parsing_skips_fenced_brokers_and_reads_leaders():
    meta = parse_metadata({
        "cluster_id": "c", "controller_id": 1,
        "brokers": [{"node_id": 1, "host": "h", "port": 1}, {"node_id": 2, "host": "h", "port": 2, "fenced": True}],
        "topics": [{"error_code": 0, "name": "t", "topic_id": "x", "partitions": [
            {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 3,
             "replica_nodes": [1, 2], "isr_nodes": [1], "offline_replicas": []},
            {"error_code": 0, "partition_index": 1, "leader_id": 2, "leader_epoch": 1,
             "replica_nodes": [2], "isr_nodes": [2], "offline_replicas": []}]}]})
    assert set(meta.brokers) == {1}
    assert meta.leader_for(TopicPartition("t", 0)) == 1
    assert meta.leader_for(TopicPartition("t", 1)) is None  # its leader is fenced
    assert meta.available_partitions("t") == [0]
    assert meta.partitions_for("t") == [0, 1]
    assert meta.leader_epoch(TopicPartition("t", 0)) == 3
    assert ClusterMetadata().partitions_for("t") is None


def test_producer_config_rejects_what_kafka_rejects():
    assert producer_config({})["acks"] == -1
    with pytest.raises(ConfigError, match="acks"):
        producer_config({"acks": 1})  # idempotence (default on) needs acks=all
    assert producer_config({"acks": 1, "enable_idempotence": False})["acks"] == 1
    with pytest.raises(ConfigError, match="max_in_flight"):
        producer_config({"max_in_flight_requests_per_connection": 6})
    with pytest.raises(ConfigError, match="compression_type"):
        producer_config({"compression_type": "brotli"})
    with pytest.raises(ConfigError, match="lingr_ms"):
        producer_config({"lingr_ms": 5})
    with pytest.raises(ConfigError, match="auto_offset_reset"):
        consumer_config({"auto_offset_reset": "beginning"})


def test_accumulator_starts_a_new_batch_when_batch_size_is_reached():
    async def main():
        acc = RecordAccumulator(batch_size=200, linger_ms=1000)
        loop = asyncio.get_running_loop()
        tp = TopicPartition("t", 0)
        closed = []
        for i in range(20):
            batch, _index, done = acc.append(tp, 1000 + i, b"k", b"v" * 20, None, 40)
            if done:
                closed.append(done)
        assert len(acc.queues[tp]) >= 3
        assert all(b.closed and len(b.buffer) <= 200 for b in closed)
        assert sum(b.record_count for b in acc.queues[tp]) == 20
        # The open batch lingers; the closed ones are ready at once.
        head, due = acc.first_ready(tp, time.monotonic(), urgent=False)
        assert head is acc.queues[tp][0]
    asyncio.run(main())


def test_accumulator_holds_a_lone_batch_for_linger_ms_unless_urgent():
    async def main():
        now = [100.0]
        acc = RecordAccumulator(batch_size=16384, linger_ms=50, clock=lambda: now[0])
        tp = TopicPartition("t", 0)
        acc.append(tp, 1000, None, b"v", None, 30)
        batch, due = acc.first_ready(tp, now[0], urgent=False)
        assert batch is None and due == pytest.approx(100.05)
        assert acc.first_ready(tp, now[0], urgent=True)[0] is not None
        assert acc.first_ready(tp, 100.06, urgent=False)[0] is not None
    asyncio.run(main())


def test_a_record_larger_than_batch_size_gets_a_batch_of_its_own():
    async def main():
        acc = RecordAccumulator(batch_size=100, linger_ms=0)
        tp = TopicPartition("t", 0)
        big = b"x" * 1000
        acc.append(tp, 1, None, b"a", None, 30)
        batch, _index, closed = acc.append(tp, 1, None, big, None, 1030)
        assert closed is not None and batch.record_count == 1
        batch.close()
        header, records = rec.decode_batch(batch.buffer)
        assert records[0].value == big
    asyncio.run(main())


def test_buffer_memory_blocks_for_max_block_ms_then_raises_a_timeout_naming_it():
    async def main():
        acc = RecordAccumulator(buffer_memory=1000, max_request_size=1000)
        await acc.reserve(900, 10)
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="buffer_memory=1000"):
            await acc.reserve(200, 100)
        assert 0.08 <= time.monotonic() - started < 1.0
        # Released bytes wake a waiter.
        waiter = asyncio.ensure_future(acc.reserve(200, 2000))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        acc.release(900)
        await asyncio.wait_for(waiter, 1)
        assert acc.buffer_used == 200
        with pytest.raises(MessageTooLargeError):
            await acc.reserve(5000, 10)
    asyncio.run(main())


def test_requeued_batch_goes_back_before_later_batches_of_its_partition():
    async def main():
        acc = RecordAccumulator(batch_size=100, linger_ms=0)
        tp = TopicPartition("t", 0)
        loop = asyncio.get_running_loop()
        for i in range(12):
            acc.append(tp, 1, None, b"v" * 30, None, 54)
        first = acc.pop(tp)
        second = acc.pop(tp)
        acc.requeue(second, 0.0)
        acc.requeue(first, 0.0)
        orders = [b.order for b in acc.queues[tp]]
        assert orders == sorted(orders) and acc.queues[tp][0] is first
    asyncio.run(main())


def test_stamped_producer_fields_keep_the_batch_crc_valid():
    async def main():
        acc = RecordAccumulator(compression_type="lz4")
        tp = TopicPartition("t", 0)
        for i in range(5):
            acc.append(tp, 1000 + i, b"k%d" % i, b"value %d" % i, [("h", b"1")], 40)
        batch = acc.pop(tp)
        batch.stamp_producer(4242, 3, 17)
        header = rec.validate_batch(batch.buffer)
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 3, 17)
        assert header.compression == rec.COMPRESSION_LZ4
        _, records = rec.decode_batch(batch.buffer)
        assert [r.value for r in records] == [b"value %d" % i for i in range(5)]
        assert records[0].headers == [("h", b"1")]
    asyncio.run(main())


def test_record_size_estimate_counts_key_value_and_headers():
    assert record_size_estimate(b"k", b"vv", [("h", b"123")]) > record_size_estimate(b"k", b"vv", None) > 3


def test_future_get_callbacks_and_errbacks_behave_like_kafka_python():
    f: Future[int] = Future()
    seen = []
    f.add_callback(lambda tag, v: seen.append((tag, v)), "ok")
    f.add_errback(lambda e: seen.append(("err", e)))
    with pytest.raises(KafkaTimeoutError):
        f.get(timeout=0.01)
    threading.Timer(0.02, f.success, (5,)).start()
    assert f.get(timeout=2) == 5
    assert seen == [("ok", 5)] and f.succeeded() and not f.failed() and f.is_done
    late = []
    f.add_callback(late.append)  # added after completion: runs at once
    assert late == [5]

    g: Future[int] = Future()
    g.add_errback(lambda e: seen.append(("err", type(e).__name__)))
    g.failure(ValueError("boom"))
    with pytest.raises(ValueError):
        g.get(1)
    assert ("err", "ValueError") in seen and g.failed() and isinstance(g.exception, ValueError)


def test_a_raising_callback_does_not_break_completion():
    f: Future[int] = Future()
    f.add_callback(lambda v: 1 / 0)
    after = []
    f.add_callback(after.append)
    f.success(1)
    assert after == [1]
