"""A Raftka consumer and a kafka-python consumer in ONE group (protocol type "consumer"), on a real
cluster (1 controller + 1 broker): they agree on an assignor both offer (Kafka's names "range" and
"roundrobin"), whichever of them leads reads the other's ConsumerProtocolSubscription and writes
a ConsumerProtocolAssignment the other reads, so the partitions are split between them (each gets
some, none twice, none left out) and every record produced then is read exactly once.

How: each consumer polls in its own thread (kafka-python joins inside poll()); the Raftka consumer
subscribes first, so in one run it leads, and the kafka-python consumer leads after the Raftka
one leaves and rejoins, so both directions of the bytes are exercised.
"""
from __future__ import annotations

import collections
import threading
import time
import uuid
from typing import Any, Callable

import pytest

from helpers import wait_for_topic
from raftka.client import Consumer, NewTopic, Producer
from raftka.cluster import wait_until

pytest.importorskip("kafka")
from kafka import KafkaConsumer  # noqa: E402
from kafka.coordinator.assignors.range import RangePartitionAssignor  # noqa: E402
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor  # noqa: E402

pytestmark = pytest.mark.timeout(180)

FAST = {
    "broker.session.timeout.ms": 2000,
    "broker.heartbeat.interval.ms": 250,
    "offsets.topic.num.partitions": 3,
    "offsets.topic.replication.factor": 1,
    "group.initial.rebalance.delay.ms": 100,
    "group.min.session.timeout.ms": 500,
}
PARTITIONS = 6
RECORDS = 60
WAIT_S = 40.0
KAFKA_PYTHON_ASSIGNORS = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory("mixed-groups", controllers=1, brokers=1, configs=FAST)


@pytest.fixture(scope="module")
def admin(cluster, module_admin_factory):
    return module_admin_factory(cluster, request_timeout_ms=15_000)


class Member:
    """One consumer polling in its own thread; records what it read and its assignment."""

    def __init__(self, consumer: Any, topic: str, assignment: Callable[[], set[tuple[str, int]]]) -> None:
        self.consumer = consumer
        self.topic = topic
        self.assignment = assignment
        self.read: list[bytes] = []
        self.failures: list[BaseException] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.lock = threading.Lock()

    def start(self) -> "Member":
        self.consumer.subscribe([self.topic])
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                got = self.consumer.poll(timeout_ms=100)
                with self.lock:
                    for batch in got.values():
                        self.read += [record.value for record in batch]
                if got:
                    self.consumer.commit()
        except BaseException as error:  # reported by the test's thread
            self.failures.append(error)
        finally:
            self.consumer.close(autocommit=False)

    def close(self) -> None:
        if not self.thread.is_alive():
            return
        self.stop.set()
        self.thread.join(timeout=20)
        assert not self.thread.is_alive(), "a consumer did not close"


def raftka_member(cluster, topic: str, group: str, assignor: str) -> Member:
    consumer = Consumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=300,
                        request_timeout_ms=10_000, partition_assignment_strategy=[assignor])
    return Member(consumer, topic, lambda: {(tp.topic, tp.partition) for tp in consumer.assignment()})


def kafka_python_member(cluster, topic: str, group: str, assignor: str) -> Member:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                             heartbeat_interval_ms=300, request_timeout_ms=10_000, fetch_max_wait_ms=100,
                             max_poll_interval_ms=10_000,
                             partition_assignment_strategy=[KAFKA_PYTHON_ASSIGNORS[assignor]])
    return Member(consumer, topic, lambda: {(tp.topic, tp.partition) for tp in consumer.assignment()})


def wait_split(members: list[Member], topic: str) -> None:
    """Until every member holds some partitions, no partition is held twice and none is left out."""
    everything = {(topic, p) for p in range(PARTITIONS)}

    def split() -> bool:
        assert not any(m.failures for m in members), [m.failures for m in members]
        held = [m.assignment() for m in members]
        return all(held) and sum(map(len, held)) == PARTITIONS and set().union(*held) == everything
    wait_until(split, WAIT_S, what=f"{PARTITIONS} partitions split between {len(members)} members")


def produce(cluster, topic: str, values: list[bytes]) -> None:
    with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=2) as producer:
        for i, value in enumerate(values):
            producer.send(topic, value, partition=i % PARTITIONS)
        assert producer.flush(timeout=30) == []


def read_exactly_once(members: list[Member], values: list[bytes]) -> None:
    def total() -> int:
        return sum(len(m.read) for m in members)
    wait_until(lambda: total() >= len(values) or any(m.failures for m in members), WAIT_S,
               what=f"{len(values)} records read")
    time.sleep(0.3)  # a duplicate would show up here
    read, sent = collections.Counter(v for m in members for v in m.read), collections.Counter(values)
    assert read == sent, f"lost {sent - read}, read twice or unexpected {read - sent}"


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
def test_a_raftka_and_a_kafka_python_consumer_split_one_groups_partitions(cluster, admin, assignor):
    topic, group = f"mixed-{uuid.uuid4().hex[:8]}", f"g-mixed-{assignor}-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    wait_for_topic(admin, topic, PARTITIONS)
    raftka = raftka_member(cluster, topic, group, assignor).start()
    members = [raftka]
    try:
        wait_split(members, topic)  # alone, it leads
        theirs = kafka_python_member(cluster, topic, group, assignor).start()
        members.append(theirs)
        wait_split(members, topic)  # the Raftka leader read kafka-python's subscription
        described = admin.describe_consumer_groups([group])[0]
        assert described.protocol == assignor and len(described.members) == 2, described
        # Raftka's admin decodes both members' bytes (ConsumerProtocolSubscription / Assignment).
        shown = [{(tp.topic, tp.partition) for tp in m.member_assignment.partitions} for m in described.members]
        assert all(shown) and sorted(tp for s in shown for tp in s) == [(topic, p) for p in range(PARTITIONS)]
        assert all(m.member_metadata.topics == [topic] for m in described.members)
        values = [b"first-%d" % i for i in range(RECORDS)]
        produce(cluster, topic, values)
        read_exactly_once(members, values)
        assert raftka.read and theirs.read  # both consumed their share

        raftka.close()  # kafka-python leads now; a new Raftka member joins under it
        wait_split([theirs], topic)
        second = raftka_member(cluster, topic, group, assignor).start()
        members.append(second)
        wait_split([theirs, second], topic)  # the kafka-python leader read Raftka's v3 subscription
        later = [b"second-%d" % i for i in range(RECORDS)]
        produce(cluster, topic, later)
        read_exactly_once(members, values + later)  # from the committed offsets on: nothing twice
        assert second.read
    finally:
        for member in members:
            member.close()
    assert not any(m.failures for m in members), [m.failures for m in members]
