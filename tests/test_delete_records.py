"""DeleteRecords (Kafka's api 21) on a real 1+3 cluster, through kafka-python's admin client:
the leader moves its log start, every in-sync follower follows before the answer, and a new
leader after kill -9 starts where the old one did."""
from __future__ import annotations

import pytest

from helpers import wait_for_topic
from raftka.client import NewTopic, Producer
from raftka.cluster import wait_until

pytest.importorskip("kafka")
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition  # noqa: E402
from kafka.errors import OffsetOutOfRangeError  # noqa: E402

FAST = {"replica.lag.time.max.ms": 3000}


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory("delete-records", controllers=1, brokers=3, configs=FAST)


def _produce(cluster, topic: str, count: int) -> None:
    with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as producer:
        for i in range(count):
            producer.send(topic, b"v%d" % i)
        producer.flush()


def _earliest(cluster, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers)
    try:
        tp = TopicPartition(topic, 0)
        return consumer.beginning_offsets([tp])[tp]
    finally:
        consumer.close()


def _leader(admin, topic: str) -> int:
    return admin.describe_topics([topic])[0]["partitions"][0]["leader"]


def test_delete_records_moves_every_in_sync_copy_and_survives_a_leader_kill(cluster, module_admin_factory):
    admin = module_admin_factory(cluster)
    admin.create_topics([NewTopic("dr", 1, 3, {"min.insync.replicas": "2"})])
    wait_for_topic(admin, "dr", 1)
    _produce(cluster, "dr", 100)
    kafka_admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=20_000)
    old = None
    try:
        tp = TopicPartition("dr", 0)
        result = kafka_admin.delete_records({tp: 40}, timeout_ms=20_000)
        assert result[tp]["low_watermark"] == 40  # every in-sync copy starts at 40 now
        assert _earliest(cluster, "dr") == 40
        with pytest.raises(OffsetOutOfRangeError):
            kafka_admin.delete_records({tp: 101}, timeout_ms=20_000)  # past the high watermark
        old = _leader(admin, "dr")
        cluster.kill(old)
        wait_until(lambda: _leader(admin, "dr") not in (old, -1), 30, what="a new leader")
        assert _earliest(cluster, "dr") == 40  # the follower had deleted too
        assert kafka_admin.delete_records({tp: -1}, timeout_ms=20_000)[tp]["low_watermark"] == 100
        _produce(cluster, "dr", 10)
        assert admin.delete_records({tp: 105})[tp]["low_watermark"] == 105  # Raftka's own admin
        assert admin.list_offsets({tp: "earliest"})[tp] == 105
    finally:
        kafka_admin.close()
        if old is not None:
            cluster.restart(old)
