"""The blocking producer appends on the caller's thread and falls back to the I/O thread when it
must wait: several threads sending through a small buffer_memory (so both paths run, mixed)
lose nothing, keep each thread's order and complete every future and callback."""
from __future__ import annotations

import threading
import time
import uuid

import pytest

from raftka.client import AdminClient, Consumer, NewTopic, Producer
from raftka.client.structs import TopicPartition
from helpers import wait_for_topic

SEND_THREADS = 3
RECORDS_PER_THREAD = 4000


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory("send-threads", controllers=1, brokers=3,
                                  configs={"default.replication.factor": 3})


def test_threads_through_a_full_buffer_keep_order_and_lose_nothing(cluster):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=10_000)
    try:
        admin.create_topics([NewTopic(topic, 1, 3)])
        wait_for_topic(admin, topic, 1)
    finally:
        admin.close()
    # 32 KiB of buffer for ~1.5 MB of records: sends keep running out of memory and wait.
    producer = Producer(bootstrap_servers=cluster.bootstrap_servers, buffer_memory=32_768,
                        batch_size=4096, linger_ms=2, max_block_ms=30_000)
    acknowledged = [0] * SEND_THREADS
    futures: list[list] = [[] for _ in range(SEND_THREADS)]
    errors: list[BaseException] = []

    def send(n: int) -> None:
        try:
            for i in range(RECORDS_PER_THREAD):
                future = producer.send(topic, b"%d:%06d" % (n, i) + b"x" * 90)
                if i % 7 == 0:
                    future.add_callback(lambda _md, n=n: acknowledged.__setitem__(n, acknowledged[n] + 1))
                futures[n].append(future)
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=send, args=(n,)) for n in range(SEND_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert not errors, errors
        assert producer.flush(timeout=60) == []
        for n in range(SEND_THREADS):
            offsets = [f.get(timeout=10).offset for f in futures[n]]
            assert offsets == sorted(offsets) and len(set(offsets)) == RECORDS_PER_THREAD
        assert acknowledged == [len(range(0, RECORDS_PER_THREAD, 7))] * SEND_THREADS
    finally:
        producer.close()
    consumer = Consumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest")
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < SEND_THREADS * RECORDS_PER_THREAD and time.monotonic() < deadline:
            values += [r.value for r in consumer.poll(timeout_ms=1000).get(tp, [])]
    finally:
        consumer.close()
    assert len(values) == SEND_THREADS * RECORDS_PER_THREAD
    for n in range(SEND_THREADS):
        mine = [v[:8] for v in values if v.startswith(b"%d:" % n)]
        assert mine == [b"%d:%06d" % (n, i) for i in range(RECORDS_PER_THREAD)]
