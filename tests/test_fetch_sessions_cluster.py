"""Followers fetch in incremental fetch sessions (KIP-227) in a real cluster (1 controller + 3
brokers, real processes): with 60 partitions of RF 3, an idle cluster's Fetch answers to followers
carry no partition at all, and a produce to one partition puts only that one in them, while the
record still reaches every replica. Counted from each broker's /metrics:
``raftka_broker_replication_partitions_out_total`` (partitions in its answers to followers) and
``raftka_broker_incremental_fetch_sessions``."""
from __future__ import annotations

import re
import time

import pytest

from raftka.common import errors
from raftka.cluster import wait_until
from test_broker import FAST, batch, create_topic, http_get, produce, wait_for_partition

PARTITIONS = 60
IDLE_S = 2.0  # ~10 fetch rounds per follower at replica.fetch.wait.max.ms=200


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """1 controller + 3 brokers, stopped by PID at the end of the module."""
    return module_cluster_factory("fetch-sessions", controllers=1, brokers=3, configs=FAST)


def metric(cluster, broker: int, name: str, labels: str = "") -> int:
    _, text = http_get(cluster.http_address(broker), "/metrics")
    match = re.search(rf'^{name}{{node="{broker}"{labels}}} (\d+)$', text, re.MULTILINE)
    assert match, f"{name} missing from broker {broker}'s /metrics"
    return int(match.group(1))


def partitions_out(cluster) -> int:
    return sum(metric(cluster, b, "raftka_broker_replication_partitions_out_total") for b in cluster.broker_ids)


def log_end_offsets(cluster, topic: str, index: int) -> list[int]:
    out = []
    for broker in cluster.broker_ids:
        out.append(metric(cluster, broker, "raftka_partition_log_end_offset", f',topic="{topic}",partition="{index}"'))
    return out


def test_an_idle_followers_answers_carry_no_partition_and_a_produce_only_the_partition_it_wrote(cluster):
    topic = "many"
    create_topic(cluster, topic, partitions=PARTITIONS, rf=3)
    for index in range(PARTITIONS):
        wait_for_partition(cluster, topic, index, lambda p: len(p["isr_nodes"]) == 3, timeout_s=30)
    # Every broker follows the other two: each holds one session per follower.
    wait_until(lambda: all(metric(cluster, b, "raftka_broker_incremental_fetch_sessions") >= 2
                           for b in cluster.broker_ids), 10, what="a fetch session per follower at every leader")
    time.sleep(1.0)  # the full fetches that made the sessions are over

    before = partitions_out(cluster)
    time.sleep(IDLE_S)
    idle = partitions_out(cluster) - before
    # Sessionless, each of the 6 leader-follower pairs would answer its 20 partitions per round.
    assert idle <= 2, f"an idle cluster answered {idle} partitions to followers in {IDLE_S} s"

    index = 7
    leader = wait_for_partition(cluster, topic, index, lambda p: p["leader_id"] >= 0)["leader_id"]
    before = partitions_out(cluster)
    answer = produce(cluster.broker_address(leader), topic, batch([b"only-here"]), index=index)
    assert answer["error_code"] == errors.NONE, answer
    wait_until(lambda: log_end_offsets(cluster, topic, index) == [1, 1, 1], 10,
               what="the record on every replica")
    time.sleep(1.0)  # the followers learn the new high watermark
    produced = partitions_out(cluster) - before
    # Two followers, each: the records, then the high watermark (sometimes in one answer).
    assert 2 <= produced <= 6, f"one produce put {produced} partitions in the followers' answers"


def test_kafka_pythons_consumer_reads_in_fetch_sessions_what_is_produced_after_they_are_made(cluster):
    kafka = pytest.importorskip("kafka")
    topic = "many-consumed"
    create_topic(cluster, topic, partitions=PARTITIONS, rf=3)
    leaders = {}
    for index in range(PARTITIONS):
        leaders[index] = wait_for_partition(cluster, topic, index, lambda p: len(p["isr_nodes"]) == 3,
                                            timeout_s=30)["leader_id"]
    sessions_before = {b: metric(cluster, b, "raftka_broker_incremental_fetch_sessions") for b in cluster.broker_ids}
    bootstrap = ",".join(cluster.broker_address(b) for b in cluster.broker_ids)
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                   enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        consumer.assign([kafka.TopicPartition(topic, i) for i in range(PARTITIONS)])
        consumer.poll(timeout_ms=500)
        # One session per broker it fetches from, beside the followers'.
        wait_until(lambda: all(metric(cluster, b, "raftka_broker_incremental_fetch_sessions") > sessions_before[b]
                               for b in cluster.broker_ids), 10, what="kafka-python's sessions at every broker")
        sent = {}
        for index in (3, 31, 59):
            value = f"p{index}".encode()
            answer = produce(cluster.broker_address(leaders[index]), topic, batch([value]), index=index)
            assert answer["error_code"] == errors.NONE, answer
            sent[index] = value
        read: dict[int, list[bytes]] = {}
        deadline = time.monotonic() + 15
        while sum(map(len, read.values())) < len(sent) and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                read.setdefault(tp.partition, []).extend(r.value for r in records)
        assert read == {i: [v] for i, v in sent.items()}, read
    finally:
        consumer.close()
