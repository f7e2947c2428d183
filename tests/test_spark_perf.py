"""Spark read throughput (-m perf): 1M records of 100 bytes in a 4-partition topic (RF 3, on 1
controller + 3 brokers), read in batch by Spark (local[2]) into count() and into Parquet, against
the plain Python consumer reading the same records. Prints medians of 3 runs; the floors only
catch a collapse (the box is shared and noisy), the figures go to BENCHMARKS.md.

    .venv/bin/python -m pytest -m perf tests/test_spark_perf.py -s
"""
from __future__ import annotations

import os
import statistics
import time

import pytest

from raftka.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition

pytestmark = [pytest.mark.perf, pytest.mark.spark, pytest.mark.timeout(1800)]

RECORDS = int(os.environ.get("RAFTKA_SPARK_PERF_RECORDS", 1_000_000))
PARTITIONS = 4
RUNS = 3
FLOOR_RECORDS_PER_S = 10_000  # far below what was measured: a collapse, not noise


@pytest.fixture(scope="module")
def spark():
    if os.environ.get("RAFTKA_HAVE_JAVA") != "1":
        from raftka.spark.session import JavaNotFoundError, require_java
        try:
            require_java()
        except JavaNotFoundError as error:
            pytest.skip(f"Spark tests need Java 17+: {error}")
    from raftka.spark.session import local_session
    session = local_session("raftka-perf", conf={"spark.ui.showConsoleProgress": "false"})
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def loaded(module_cluster_factory):
    """A cluster with RECORDS 100-byte records in topic 'perf'."""
    cluster = module_cluster_factory("spark-perf", controllers=1, brokers=3,
                                     configs={"default.replication.factor": 3, "min.insync.replicas": 2})
    with AdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("perf", PARTITIONS, 3)])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            [d] = admin.describe_topics(["perf"])
            if len(d["partitions"]) == PARTITIONS and all(p["leader"] >= 0 for p in d["partitions"]):
                break
            time.sleep(0.1)
    began = time.monotonic()
    value = b"x" * 100
    with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=20, batch_size=262_144,
                  compression_type="lz4") as producer:
        for i in range(RECORDS):
            producer.send("perf", value, partition=i % PARTITIONS)
        assert not producer.flush(timeout=600)
    print(f"\nproduced {RECORDS:,} records in {time.monotonic() - began:.1f} s")
    return cluster


def _median_rate(label: str, run) -> float:
    rates = []
    for _ in range(RUNS):
        began = time.monotonic()
        count = run()
        took = time.monotonic() - began
        assert count == RECORDS, f"{label}: read {count} records, expected {RECORDS}"
        rates.append(count / took)
    median = statistics.median(rates)
    print(f"{label}: median {median:,.0f} records/s (runs: {', '.join(f'{r:,.0f}' for r in rates)})")
    return median


def test_spark_batch_read_throughput_against_the_plain_consumer(spark, loaded, tmp_path):
    servers = loaded.bootstrap_servers
    print(f"load average before: {os.getloadavg()[0]:.1f}")

    def plain_consumer() -> int:
        consumer = Consumer(bootstrap_servers=servers, auto_offset_reset="earliest", max_poll_records=5000,
                            max_partition_fetch_bytes=4 * 1_048_576)
        try:
            tps = [TopicPartition("perf", p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            end = consumer.end_offsets(tps)
            count = 0
            while any(consumer.position(tp) < end[tp] for tp in tps):
                for records in consumer.poll(timeout_ms=500).values():
                    count += len(records)
            return count
        finally:
            consumer.close()

    df = spark.read.format("raftka").option("kafka.bootstrap.servers", servers).option("subscribe", "perf").load()
    # Warm-up, not timed: the first query of a session pays for JVM code loading (~7 s).
    warm = '{"perf": {' + ", ".join(f'"{p}": 1000' for p in range(PARTITIONS)) + "}}"
    spark.read.format("raftka").option("kafka.bootstrap.servers", servers).option("subscribe", "perf") \
        .option("endingOffsets", warm).load().write.mode("overwrite").parquet(str(tmp_path / "warm"))
    runs = iter(range(RUNS))

    def to_parquet() -> int:
        path = str(tmp_path / f"parquet-{next(runs)}")
        df.write.parquet(path)
        return spark.read.parquet(path).count()

    consumer_rate = _median_rate("plain Python consumer (1 process)", plain_consumer)
    count_rate = _median_rate("Spark batch read -> count() (local[2])", df.count)
    parquet_rate = _median_rate("Spark batch read -> Parquet (local[2])", to_parquet)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    for rate in (consumer_rate, count_rate, parquet_rate):
        assert rate >= FLOOR_RECORDS_PER_S
