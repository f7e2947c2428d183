"""A send to an explicit partition the producer's metadata lacks waits for it, as Kafka's producer
does (the partition may have just been added by CreatePartitions): metadata is refreshed every
``retry_backoff_ms`` until it has the partition, and after ``max_block_ms`` the send raises
KafkaTimeoutError naming topic, partition and the partition count seen. A negative partition
never appears and fails at once.

The first tests drive the asyncio producer against test_client_logic's in-process fake broker
(its partition count is changed under the waiting send); the last two run against real
processes, one controller and one broker, with CreatePartitions through the AdminClient.
"""
from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

from raftka.client import KafkaTimeoutError, NewTopic, Producer, TopicPartition, aio
from raftka.client.errors import UnknownTopicOrPartitionError
from helpers import wait_for_topic
from test_client_logic import FakeKafka, producer

pytestmark = pytest.mark.timeout(120)

MAX_BLOCK_MS = 1500
LATE_S = 0.5  # the budget beyond max_block_ms a timed-out send may take (a refresh in flight)


def _add_partition(kafka: FakeKafka, topic: str) -> None:
    index = kafka.topics[topic]
    kafka.topics[topic] = index + 1
    tp = TopicPartition(topic, index)
    kafka.leaders[tp], kafka.epochs[tp] = 1, 0


def test_a_send_to_a_partition_added_while_it_waits_is_appended_there():
    kafka = FakeKafka({"t": 1})

    async def main() -> None:
        p = producer(kafka, max_block_ms=10_000, retry_backoff_ms=20, linger_ms=0)
        await (await p.send("t", b"first", partition=0))  # metadata known: one partition
        send = asyncio.get_running_loop().create_task(p.send("t", b"late", partition=1))
        await asyncio.sleep(0.3)
        assert not send.done(), "the send gave up instead of waiting for the partition"
        metadata_requests = kafka.requests[3]
        _add_partition(kafka, "t")
        meta = await (await asyncio.wait_for(send, 5))
        assert (meta.topic, meta.partition, meta.offset) == ("t", 1, 0)
        assert metadata_requests >= 3, "the producer refreshed metadata while it waited"
        await p.close()

    asyncio.run(main())


def test_a_send_to_a_partition_that_never_appears_times_out_after_max_block_ms():
    kafka = FakeKafka({"t": 2})

    async def main() -> None:
        p = producer(kafka, max_block_ms=MAX_BLOCK_MS, retry_backoff_ms=50)
        await (await p.send("t", b"first", partition=0))
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError) as info:
            await p.send("t", b"lost", partition=7)
        waited_s = time.monotonic() - started
        assert MAX_BLOCK_MS / 1000 <= waited_s < MAX_BLOCK_MS / 1000 + LATE_S
        assert (info.value.topic, info.value.partition) == ("t", 7)
        assert "partition 7 does not exist" in str(info.value) and "partition count 2" in str(info.value)
        assert "1500 ms" in str(info.value)
        await p.close()

    asyncio.run(main())


def test_a_negative_partition_fails_at_once_without_waiting():
    kafka = FakeKafka({"t": 1})

    async def main() -> None:
        p = producer(kafka, max_block_ms=60_000)
        started = time.monotonic()
        with pytest.raises(UnknownTopicOrPartitionError) as info:
            await p.send("t", b"v", partition=-1)
        assert time.monotonic() - started < 5 and info.value.partition == -1
        await p.close()

    asyncio.run(main())


# -- against real processes ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory("explicit-partition", controllers=1, brokers=1,
                                  configs={"default.replication.factor": 1})


@pytest.fixture(scope="module")
def admin(cluster, module_admin_factory):
    return module_admin_factory(cluster, request_timeout_ms=10_000)


def _one_partition_topic(admin) -> str:
    name = f"grow-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, 1)])
    wait_for_topic(admin, name, 1)
    return name


def test_a_blocking_send_to_partition_1_succeeds_once_create_partitions_adds_it(cluster, admin):
    topic = _one_partition_topic(admin)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, max_block_ms=30_000, retry_backoff_ms=100) as p:
        assert p.send(topic, b"first", partition=0).get(timeout=30).partition == 0
        assert p.partitions_for(topic) == {0}  # this producer's metadata: one partition
        outcome: dict = {}

        def send_late() -> None:
            try:
                outcome["meta"] = p.send(topic, b"late", partition=1).get(timeout=30)
            except Exception as error:  # noqa: BLE001 - asserted below
                outcome["error"] = error
        sender = threading.Thread(target=send_late)
        sender.start()
        time.sleep(1.0)
        assert sender.is_alive() and not outcome, f"the send did not wait for partition 1: {outcome}"
        admin.create_partitions({topic: 2})
        sender.join(timeout=40)
        assert not sender.is_alive()
        assert "error" not in outcome, outcome.get("error")
        meta = outcome["meta"]
        assert (meta.topic, meta.partition, meta.offset) == (topic, 1, 0)


def test_an_asyncio_send_to_a_partition_never_added_fails_after_max_block_ms(cluster, admin):
    topic = _one_partition_topic(admin)

    async def main() -> None:
        p = aio.Producer(bootstrap_servers=cluster.bootstrap_servers, max_block_ms=MAX_BLOCK_MS,
                         retry_backoff_ms=100)
        try:
            await (await p.send(topic, b"first", partition=0))
            started = time.monotonic()
            with pytest.raises(KafkaTimeoutError) as info:
                await p.send(topic, b"lost", partition=3)
            waited_s = time.monotonic() - started
            assert MAX_BLOCK_MS / 1000 <= waited_s < MAX_BLOCK_MS / 1000 + 5  # a loaded box: refreshes are slow
            assert (info.value.topic, info.value.partition) == (topic, 3)
            assert "partition count 1" in str(info.value)
        finally:
            await p.close()

    asyncio.run(main())
