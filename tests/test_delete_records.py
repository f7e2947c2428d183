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


def test_raftka_delete_records_moves_the_log_start_and_a_consumer_resets_to_it(cluster, module_admin_factory, tmp_path):
    import json
    import subprocess
    import sys
    from raftka.client import Consumer
    admin = module_admin_factory(cluster)
    admin.create_topics([NewTopic("cli-delete", 1, 3)])
    wait_for_topic(admin, "cli-delete", 1)
    _produce(cluster, "cli-delete", 20)
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"version": 1, "partitions": [{"topic": "cli-delete", "partition": 0, "offset": 12}]}))
    run = subprocess.run([sys.executable, "-m", "raftka", "delete-records", "--bootstrap-server",
                          cluster.bootstrap_servers, "--offset-json-file", str(offsets)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "partition: cli-delete-0\tlow_watermark: 12" in run.stdout, run.stdout + run.stderr
    assert _earliest(cluster, "cli-delete") == 12
    with Consumer("cli-delete", bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                  consumer_timeout_ms=3000) as consumer:
        assert [r.offset for r in consumer] == list(range(12, 20))
    offsets.write_text(json.dumps({"partitions": [{"topic": "cli-delete", "partition": -1, "offset": 5}]}))
    bad = subprocess.run([sys.executable, "-m", "raftka", "delete-records", "--bootstrap-server",
                          cluster.bootstrap_servers, "--offset-json-file", str(offsets)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "partition (>= 0)" in bad.stderr and "Traceback" not in bad.stderr
