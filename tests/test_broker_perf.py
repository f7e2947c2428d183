"""Broker performance figures (``pytest -m perf tests/test_broker_perf.py -s``; excluded by default):
produce round trip (acks=1, acks=all with RF 3), pipelined produce throughput, and the broker's
own per-batch cost on the produce path (in process, no network). Prints the figures that
BENCHMARKS.md records; asserts only loose bounds, so a regression by an order of magnitude fails."""
from __future__ import annotations

import asyncio
import statistics
import time

import pytest

from raftka.common import errors
from raftka.common.records import BatchBuilder
from raftka.common.transport import Connection
from raftka.cluster import Cluster
from test_broker import create_topic, leader_address, wait_for_partition

pytestmark = pytest.mark.perf


def make_batch(records: int, value_bytes: int) -> bytes:
    builder = BatchBuilder(batch_size=1 << 22)
    for _ in range(records):
        builder.append(int(time.time() * 1000), None, b"x" * value_bytes)
    return builder.build()


def body(topic: str, records: bytes, acks: int) -> dict:
    return {"acks": acks, "timeout_ms": 10_000, "topic_data": [{"name": topic, "partition_data": [
        {"index": 0, "records": records}]}]}


async def round_trips(address: str, topic: str, acks: int, count: int) -> list[float]:
    host, _, port = address.rpartition(":")
    conn = await Connection.open(host, int(port))
    batch = make_batch(1, 100)
    out = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            code, answer = await conn.request(0, body(topic, batch, acks))
            out.append(time.perf_counter() - started)
            assert code == errors.NONE and answer["responses"][0]["partition_responses"][0]["error_code"] == 0
    finally:
        await conn.close()
    return out


async def throughput(address: str, topic: str, acks: int, seconds: float, window: int) -> tuple[float, float]:
    host, _, port = address.rpartition(":")
    conn = await Connection.open(host, int(port), max_in_flight_requests=window)
    batch = make_batch(160, 100)  # ~16 KiB, the producer's default batch.size
    sent = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal sent
        while time.perf_counter() < deadline:
            code, answer = await conn.request(0, body(topic, batch, acks))
            assert code == errors.NONE and answer["responses"][0]["partition_responses"][0]["error_code"] == 0
            sent += 1
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(window)))
    elapsed = time.perf_counter() - started
    await conn.close()
    return sent * 160 / elapsed, sent * len(batch) / elapsed / 1e6


def test_produce_round_trip_and_throughput(tmp_path):
    with Cluster.start(tmp_path, controllers=1, brokers=3, configs={"default.replication.factor": 3,
                                                                    "min.insync.replicas": 2}) as cluster:
        create_topic(cluster, "perf")
        _, address = leader_address(cluster, "perf")
        for acks in (1, -1):
            samples = asyncio.run(round_trips(address, "perf", acks, 500))[50:]
            p50 = statistics.median(samples) * 1000
            p99 = sorted(samples)[int(len(samples) * 0.99)] * 1000
            print(f"\nacks={acks} round trip, RF 3: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
            assert p50 < 50
        for acks in (1, -1):
            records_s, mb_s = asyncio.run(throughput(address, "perf", acks, 3.0, 8))
            print(f"acks={acks} pipelined (8 in flight, 16 KiB batches of 160 x 100 B): "
                  f"{records_s:,.0f} records/s, {mb_s:.1f} MB/s")
            assert records_s > 10_000


def test_the_produce_path_costs_per_batch_not_per_record(tmp_path):
    from raftka.broker.metadata import BrokerInfo, MetadataView, PartitionInfo, TopicInfo
    from raftka.broker.replica_manager import ReplicaManager
    from raftka.storage import LogManager

    logs = LogManager([str(tmp_path)], {"max.message.bytes": 1 << 21, "segment.bytes": 1 << 30})

    async def no_alter(*args):
        pass
    manager = ReplicaManager(1, {"min.insync.replicas": 1, "message.max.bytes": 1 << 21}, logs, no_alter)
    manager.on_metadata(MetadataView(1, {1: BrokerInfo(1, 1, {"PLAINTEXT": "x:1"}, None, False)},
                                     {"t": TopicInfo("t", "id", (PartitionInfo((1,), (1,), 1, 0, 0),), {})}, {}))
    costs = {}
    for records, value_bytes in ((10, 100), (160, 100), (100, 1000), (1000, 100)):
        batch = make_batch(records, value_bytes)
        rounds = 2000
        started = time.perf_counter()
        for _ in range(rounds):
            manager.append("t", 0, batch, -1)
        costs[records, value_bytes] = (time.perf_counter() - started) / rounds * 1e6
        print(f"\n{records} records x {value_bytes} B ({len(batch)} B batch): "
              f"{costs[records, value_bytes]:.1f} us per batch append")
    logs.close()
    # The same bytes in 10x the records cost about the same: the work is per batch and per byte
    # (CRC-32C, one write), never per record.
    assert costs[1000, 100] < 2 * costs[100, 1000]


def test_failover_time_after_kill_9_and_after_sigterm_of_the_leader(tmp_path):
    """kill -9: the controller fences the silent broker after broker.session.timeout.ms, then elects
    from the ISR. SIGTERM: controlled shutdown fences the broker at once, so leadership moves first."""
    from test_broker import FAST
    from test_broker_failover import current_leader, produce_until_acked
    with Cluster.start(tmp_path, controllers=3, brokers=3, configs=FAST) as cluster:
        create_topic(cluster, "failover")
        produce_until_acked(cluster, "failover", b"warm-up")
        figures = {}
        for how in ("kill -9", "SIGTERM"):
            times = []
            for i in range(5):
                leader = current_leader(cluster, "failover")
                started = time.monotonic()
                if how == "kill -9":
                    cluster.kill(leader)
                else:
                    cluster.stop(leader)
                produce_until_acked(cluster, "failover", b"%s-%d" % (how.encode(), i))
                times.append(time.monotonic() - started)
                cluster.restart(leader)
                wait_for_partition(cluster, "failover", 0, lambda p: len(p["isr_nodes"]) == 3, timeout_s=30)
            figures[how] = times
            print(f"\n{how} of the leader -> next acks=all write acknowledged: median "
                  f"{statistics.median(times):.2f} s, max {max(times):.2f} s (session timeout "
                  f"{FAST['broker.session.timeout.ms']} ms)")
        assert statistics.median(figures["SIGTERM"]) < statistics.median(figures["kill -9"])
