"""Raftka's consumer fetches in incremental fetch sessions (KIP-227) against a real cluster (1
controller + 3 brokers, real processes): assigned 100 partitions, once it read what was there its
Fetches name (almost) no partition and their answers carry none, records produced later reach it
in the same sessions, and every record is read exactly once. Requests are seen through the
consumer's connection factory; sessions through ``raftka_broker_incremental_fetch_sessions``."""
from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

import pytest

from raftka.client import Producer, TopicPartition, aio
from raftka.client.aio.cluster import API_FETCH, default_connection_factory
from raftka.cluster import wait_until
from test_broker import FAST, create_topic, wait_for_partition
from test_fetch_sessions_cluster import metric

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 100
IDLE_S = 2.0  # ~20 fetch rounds per broker at fetch_max_wait_ms=100


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """1 controller + 3 brokers, stopped by PID at the end of the module."""
    return module_cluster_factory("consumer-fetch-sessions", controllers=1, brokers=3, configs=FAST)


class Seen:
    """Every Fetch the consumer sent and what its answer carried."""

    def __init__(self) -> None:
        self.fetches: list[tuple[int, int, int, int, int]] = []  # session_id, epoch, named, forgotten, answered

    async def connect(self, host: str, port: int, client_id: str) -> Any:
        inner = await default_connection_factory(host, port, client_id)
        seen = self

        class Counting:
            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

            async def request(self, api_key: int, body: Any, *args: Any, **kwargs: Any) -> Any:
                code, answer = await inner.request(api_key, body, *args, **kwargs)
                if api_key == API_FETCH and answer is not None:
                    seen.fetches.append((
                        body["session_id"], body["session_epoch"],
                        sum(len(t["partitions"]) for t in body["topics"]),
                        sum(len(t["partitions"]) for t in body["forgotten_topics_data"]),
                        sum(len(t["partitions"]) for t in answer["responses"])))
                return code, answer

        return Counting()


def test_an_idle_consumer_of_100_partitions_names_none_and_reads_every_record_once(cluster):
    topic = "consumed-in-sessions"
    create_topic(cluster, topic, partitions=PARTITIONS, rf=3)
    for index in range(PARTITIONS):
        wait_for_partition(cluster, topic, index, lambda p: len(p["isr_nodes"]) == 3, timeout_s=30)
    bootstrap = ",".join(cluster.broker_address(b) for b in cluster.broker_ids)
    with Producer(bootstrap_servers=bootstrap) as producer:
        for index in range(PARTITIONS):
            producer.send(topic, f"first-{index}".encode(), partition=index)
        producer.flush()
    sessions_before = sum(metric(cluster, b, "raftka_broker_incremental_fetch_sessions") for b in cluster.broker_ids)

    async def main() -> tuple[collections.Counter[bytes], list, list, int]:
        seen = Seen()
        consumer = aio.Consumer(bootstrap_servers=bootstrap, connection_factory=seen.connect,
                                auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=100)
        read: collections.Counter[bytes] = collections.Counter()

        async def poll_until(count: int, timeout_s: float = 30) -> None:
            deadline = time.monotonic() + timeout_s
            while sum(read.values()) < count and time.monotonic() < deadline:
                for records in (await consumer.poll(timeout_ms=200)).values():
                    read.update(r.value for r in records)

        try:
            consumer.assign([TopicPartition(topic, i) for i in range(PARTITIONS)])
            await poll_until(PARTITIONS)
            await asyncio.sleep(0.5)  # the fetches that moved the offsets are over
            sessions = sum(metric(cluster, b, "raftka_broker_incremental_fetch_sessions")
                           for b in cluster.broker_ids) - sessions_before
            start = len(seen.fetches)
            deadline = time.monotonic() + IDLE_S
            while time.monotonic() < deadline:
                await consumer.poll(timeout_ms=100)
            idle = seen.fetches[start:]
            with Producer(bootstrap_servers=bootstrap) as producer:
                for index in (3, 50, 97):
                    producer.send(topic, f"later-{index}".encode(), partition=index)
                producer.flush()
            start = len(seen.fetches)
            await poll_until(PARTITIONS + 3)
            await asyncio.sleep(0.5)
            await poll_until(PARTITIONS + 4, timeout_s=0.5)  # anything read twice would show here
            return read, idle, seen.fetches[start:], sessions
        finally:
            await consumer.close()

    read, idle, later, sessions = asyncio.run(main())
    assert sessions == 3, f"the consumer holds {sessions} new sessions, not one per broker"
    expected = {f"first-{i}".encode() for i in range(PARTITIONS)} | {f"later-{i}".encode() for i in (3, 50, 97)}
    assert set(read) == expected and all(n == 1 for n in read.values()), "every record exactly once"
    assert len(idle) >= 6, f"only {len(idle)} fetches in {IDLE_S} s of idling"
    assert all(epoch > 0 and session_id > 0 for session_id, epoch, *_ in idle), idle
    named = sum(f[2] for f in idle) + sum(f[3] for f in idle)
    answered = sum(f[4] for f in idle)
    # Sessionless, each of these fetches would name and answer about a third of the 100 partitions.
    assert named <= 3 and answered <= 3, (named, answered, idle)
    assert all(f[2] <= 3 and f[4] <= 3 for f in later), later


def test_close_ends_the_consumers_sessions_at_the_brokers(cluster):
    topic = "sessions-closed"
    create_topic(cluster, topic, partitions=6, rf=3)
    for index in range(6):
        wait_for_partition(cluster, topic, index, lambda p: len(p["isr_nodes"]) == 3, timeout_s=30)
    bootstrap = ",".join(cluster.broker_address(b) for b in cluster.broker_ids)
    with Producer(bootstrap_servers=bootstrap) as producer:
        for index in range(6):
            producer.send(topic, b"v", partition=index)
        producer.flush()

    def sessions() -> int:
        return sum(metric(cluster, b, "raftka_broker_incremental_fetch_sessions") for b in cluster.broker_ids)
    before = sessions()

    async def main() -> int:
        consumer = aio.Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                                fetch_max_wait_ms=100)
        try:
            consumer.assign([TopicPartition(topic, i) for i in range(6)])
            read, deadline = 0, time.monotonic() + 30
            while read < 6 and time.monotonic() < deadline:
                read += sum(len(r) for r in (await consumer.poll(timeout_ms=200)).values())
            return sessions() - before  # every leader of the topic answered in a session
        finally:
            await consumer.close()

    opened = asyncio.run(main())
    assert opened >= 1, "the consumer opened no fetch session"
    # Without the close, a consumer's session stays until a newcomer needs its slot.
    wait_until(lambda: sessions() == before, 5, what="the consumer's fetch sessions removed at close")
