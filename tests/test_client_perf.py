"""Client throughput and latency against real processes (``pytest -m perf``; excluded by default).

Prints the numbers docs/client.md quotes and fails on a large regression: floors are about a
quarter of what this 2-core box measured (2026-11-23), so only a real slowdown trips them.
"""
from __future__ import annotations

import time

import pytest

from raftka.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition

pytestmark = [pytest.mark.perf, pytest.mark.timeout(300)]
RECORDS = 50_000
VALUE = b"x" * 100


def test_producer_and_consumer_throughput_and_send_latency(tmp_path):
    from raftka.cluster import Cluster
    with Cluster.start(tmp_path / "c", controllers=1, brokers=3,
                       configs={"default.replication.factor": 3}) as cluster:
        with AdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
            admin.create_topics([NewTopic("perf", 3, 3)])
        with Producer(bootstrap_servers=cluster.bootstrap_servers) as producer:
            producer.send("perf", b"warm-up").get(timeout=10)
            started = time.perf_counter()
            for _ in range(RECORDS):
                producer.send("perf", VALUE)
            assert producer.flush(timeout=60) == []
            produce_rate = RECORDS / (time.perf_counter() - started)
        with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=0) as producer:
            producer.send("perf", b"warm-up").get(timeout=10)
            latencies = []
            for _ in range(300):
                t0 = time.perf_counter()
                producer.send("perf", VALUE, key=b"k").get(timeout=10)
                latencies.append((time.perf_counter() - t0) * 1000)
            latencies.sort()
        with Consumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition("perf", p) for p in range(3)])
            started = time.perf_counter()
            count = 0
            while count < RECORDS:
                for records in consumer.poll(timeout_ms=1000, max_records=5000).values():
                    count += len(records)
            consume_rate = count / (time.perf_counter() - started)
    print(f"\nproduce {produce_rate:,.0f} records/s; consume {consume_rate:,.0f} records/s; "
          f"send().get() linger_ms=0 p50 {latencies[150]:.2f} ms p99 {latencies[296]:.2f} ms")
    assert produce_rate > 9_000
    assert consume_rate > 30_000
    assert latencies[150] < 10
